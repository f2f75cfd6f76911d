//! Links the bootstraps without unwind tables when they panic by aborting.
//!
//! With `panic = "abort"` nothing unwinds: a panic prints its message and ends the
//! process, so the `.eh_frame` tables serve only backtraces. They still cover every
//! function, because our panic=abort code calls into the prebuilt standard library
//! (compiled to unwind) through abort-on-unwind landing pads, and a function with a
//! landing pad keeps its table whatever `-C force-unwind-tables` says. On the largest
//! bootstrap that is 1.3 MB of 8.9 (docs/benchmarks.md); the linker script discards it.
//!
//! Every release-based profile of the workspace (`release`, `fast`) sets
//! `panic = "abort"` (Cargo.toml); a build script cannot see the profile's panic setting
//! (`CARGO_CFG_PANIC` is the target's default), so it keys on the profile. Debug builds
//! and tests unwind and keep their tables.
fn main() {
    println!("cargo:rerun-if-changed=no-unwind-tables.ld");
    let abort = std::env::var("PROFILE").is_ok_and(|p| p == "release");
    let linux = std::env::var("CARGO_CFG_TARGET_OS").is_ok_and(|os| os == "linux");
    if abort && linux {
        // Linked from OUT_DIR, not the source folder: this script's output is reused by
        // a clone at another path that shares the target directory (cargo's hash does
        // not include the workspace's path), and the clone it first ran in may be gone.
        let dir = std::env::var("CARGO_MANIFEST_DIR").unwrap_or_else(|_| ".".into());
        let out = std::env::var("OUT_DIR").unwrap_or_else(|_| ".".into());
        let script = format!("{out}/no-unwind-tables.ld");
        if let Err(e) = std::fs::copy(format!("{dir}/no-unwind-tables.ld"), &script) {
            panic!("copy the linker script into OUT_DIR: {e}");
        }
        println!("cargo:rustc-link-arg-bins=-Wl,-T,{script}");
    }
}
