//! `make deploy`'s build, as it runs it (`make sam-build`: `sam build` with the
//! repository's samconfig, the rust-cargolambda beta builder), for one function: the
//! bootstrap SAM packages is the arm64 binary cargo-lambda has just built from this
//! tree, never a stale one left where SAM's builder has looked in some version (the
//! cargo target directory's lambda/ folder, functions/target/lambda/, the build
//! folder itself). Slow (an arm64 build of the release profile), so ignored by the main
//! run and run last by `make test`, beside cargo lambda watch's test. What is tested is
//! the path from cargo-lambda to SAM's package, not the optimizer: the release
//! profile's optimization is turned down through cargo's own `CARGO_PROFILE_RELEASE_*`
//! variables (no LTO, opt-level 0, many codegen units), minutes less on a fresh clone.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use umpire_blackbox::{TempDir, repo_root};

const STALE: &[u8] = b"a stale bootstrap from an earlier build";

/// Removes what the test planted and no build replaced (a failed run leaves nothing
/// stale behind for a later deploy to package).
struct Planted(Vec<PathBuf>);

impl Drop for Planted {
    fn drop(&mut self) {
        for p in &self.0 {
            if std::fs::read(p).is_ok_and(|b| b == STALE) {
                let _ = std::fs::remove_file(p);
            }
            // And the folders made for it, if nothing else is in them.
            for dir in p.ancestors().skip(1).take(3) {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

fn plant(path: &Path) {
    std::fs::create_dir_all(path.parent().expect("a folder")).expect("mkdir");
    std::fs::write(path, STALE).expect("plant a stale bootstrap");
}

fn target_dir() -> PathBuf {
    std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME")).join(".cache/umpire/target")
        })
}

#[test]
#[ignore = "a release arm64 build through sam build: run last by make test (test-lambda-run)"]
fn sam_build_packages_the_bootstrap_just_built_from_this_tree() {
    let root = repo_root();
    let out = TempDir::new("sam-build");
    let packaged = out.path().join("HealthFunction/bootstrap");
    let built = target_dir().join("lambda/health/bootstrap");
    let in_source = root.join("functions/target/lambda/health/bootstrap");
    let _planted = Planted(vec![in_source.clone(), built.clone(), packaged.clone()]);
    for p in [&packaged, &built, &in_source] {
        plant(p);
    }
    let started = SystemTime::now();

    let status = Command::new("make")
        .args(["--no-print-directory", "sam-build"])
        .arg(format!(
            "SAM_BUILD_ARGS=HealthFunction --build-dir {}",
            out.path().display()
        ))
        .env("SAM_CLI_TELEMETRY", "0")
        .env("CARGO_PROFILE_RELEASE_LTO", "false")
        .env("CARGO_PROFILE_RELEASE_OPT_LEVEL", "0")
        .env("CARGO_PROFILE_RELEASE_CODEGEN_UNITS", "256")
        .current_dir(&root)
        .status()
        .expect("make sam-build");
    assert!(status.success(), "make sam-build failed");

    let bytes = std::fs::read(&packaged).expect("the packaged bootstrap");
    assert_ne!(bytes, STALE, "SAM packaged a stale bootstrap");
    assert_eq!(&bytes[..4], b"\x7fELF", "an executable");
    assert_eq!(
        u16::from_le_bytes([bytes[18], bytes[19]]),
        183,
        "for arm64 (EM_AARCH64), as the template's Architectures says"
    );
    let fresh = std::fs::read(&built).expect("cargo-lambda's output");
    assert_eq!(
        bytes, fresh,
        "the bootstrap cargo-lambda built, byte for byte"
    );
    let modified = std::fs::metadata(&built)
        .and_then(|m| m.modified())
        .expect("its time");
    assert!(modified >= started, "built by this run");
}
