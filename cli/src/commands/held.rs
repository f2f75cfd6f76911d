//! Payments held under their Idempotency-Key: the payment a paid command signed for one
//! purchase, kept in `<data dir>/payments/` (readable by its owner only) until that
//! purchase is answered. A rerun with the same key sends the same payment again instead
//! of asking the service for a 402 and signing another: while a settlement's outcome is
//! unknown, a second authorization is a second charge waiting to happen. Only a `402`
//! to the held payment (the service shows it can no longer be used: voided, expired
//! unused, canceled) lets a new one be signed.

use std::path::{Path, PathBuf};

use umpire_core::hash::sha256_hex;
use umpire_core::json::{Value, parse};

use super::Local;

/// The payment held for one purchase: a service, a path and an Idempotency-Key.
pub struct Held {
    file: PathBuf,
    base: String,
    path: String,
    key: String,
}

impl Held {
    /// The place of the payment for `key`'s purchase of `path` from `base`, in the
    /// data directory (`$UMPIRE_DATA_DIR`, else `~/.local/share/umpire`).
    pub fn at(base: &str, path: &str, key: &str) -> Held {
        Held::in_dir(&umpire_server::datadir::default_data_dir(), base, path, key)
    }

    pub fn in_dir(dir: &Path, base: &str, path: &str, key: &str) -> Held {
        let name = sha256_hex(format!("{base}|{path}|{key}").as_bytes());
        Held {
            file: dir.join("payments").join(format!("{name}.json")),
            base: base.to_owned(),
            path: path.to_owned(),
            key: key.to_owned(),
        }
    }

    /// The payment header value held, if any (one written for another purchase, or
    /// unreadable, is ignored with a word).
    pub fn load(&self) -> Option<String> {
        let bytes = std::fs::read(&self.file).ok()?;
        let v = match parse(&bytes) {
            Ok(v) => v,
            Err(e) => {
                eprintln!("ignoring {}: not JSON ({e})", self.file.display());
                return None;
            }
        };
        let s = |k: &str| v.get(k).and_then(Value::as_str);
        if (s("base"), s("path"), s("key"))
            != (
                Some(&self.base[..]),
                Some(&self.path[..]),
                Some(&self.key[..]),
            )
        {
            eprintln!(
                "ignoring {}: it holds another purchase's payment",
                self.file.display()
            );
            return None;
        }
        s("payment").map(str::to_owned)
    }

    /// Keeps `payment` for this purchase, whole or not at all, before it is sent.
    pub fn save(&self, payment: &str) -> Result<(), Local> {
        let text = Value::object()
            .with("base", self.base.as_str())
            .with("path", self.path.as_str())
            .with("key", self.key.as_str())
            .with("payment", payment)
            .with("signed_at", umpire_host::Clock::system().now())
            .to_canonical_string();
        write_private_atomically(&self.file, text.as_bytes())
    }

    /// The purchase is answered (or its payment can no longer be used): nothing to hold.
    pub fn remove(&self) {
        if let Err(e) = std::fs::remove_file(&self.file)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            eprintln!("could not remove {}: {e}", self.file.display());
        }
    }
}

/// Writes `bytes` to `p` whole or not at all, readable by its owner only (folders
/// made as needed).
pub fn write_private_atomically(p: &Path, bytes: &[u8]) -> Result<(), Local> {
    let folder = p
        .parent()
        .ok_or_else(|| Local(format!("{}: no folder", p.display())))?;
    std::fs::create_dir_all(folder).map_err(|e| Local(format!("{}: {e}", folder.display())))?;
    let partial = p.with_extension(format!("tmp.{}", std::process::id()));
    write_private(&partial, bytes).map_err(|e| Local(format!("{}: {e}", partial.display())))?;
    std::fs::rename(&partial, p).map_err(|e| Local(format!("{}: {e}", p.display())))
}

#[cfg(unix)]
fn write_private(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(p)?;
    f.write_all(bytes)?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(p: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(p, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_payment_reads_back_for_its_purchase_only_and_only_its_owner_reads_it() {
        let dir = std::env::temp_dir().join(format!("umpire-held-{}", std::process::id()));
        let held = Held::in_dir(
            &dir,
            "http://127.0.0.1:8080",
            "/v1/verdicts/basic",
            "k-0001",
        );
        assert_eq!(held.load(), None);
        assert!(held.save("eyJwYXltZW50IjoxfQ==").is_ok());
        assert_eq!(held.load().as_deref(), Some("eyJwYXltZW50IjoxfQ=="));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&held.file)
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        // Another service, path or key holds nothing.
        for other in [
            Held::in_dir(
                &dir,
                "http://127.0.0.1:9090",
                "/v1/verdicts/basic",
                "k-0001",
            ),
            Held::in_dir(
                &dir,
                "http://127.0.0.1:8080",
                "/v1/verdicts/probe",
                "k-0001",
            ),
            Held::in_dir(
                &dir,
                "http://127.0.0.1:8080",
                "/v1/verdicts/basic",
                "k-0002",
            ),
        ] {
            assert_eq!(other.load(), None);
        }
        held.remove();
        assert_eq!(held.load(), None);
        held.remove();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
