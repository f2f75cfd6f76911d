//! The local data directory: where `umpire serve` and `umpire judge` keep the
//! signing key (and, later, the embedded store).

use std::io::Write;
use std::path::{Path, PathBuf};

use umpire_core::json::{Value, parse};
use umpire_core::signer::LocalSigner;

pub const KEY_FILE: &str = "signing-key.json";

/// `$UMPIRE_DATA_DIR`, else `$XDG_DATA_HOME/umpire`, else `~/.local/share/umpire`,
/// else `./.umpire`: one default shared by every command.
pub fn default_data_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("UMPIRE_DATA_DIR") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_DATA_HOME") {
        return PathBuf::from(d).join("umpire");
    }
    if let Some(h) = std::env::var_os("HOME") {
        return PathBuf::from(h).join(".local/share/umpire");
    }
    PathBuf::from(".umpire")
}

#[derive(Debug, thiserror::Error)]
pub enum KeyFileError {
    #[error("{path}: {source}")]
    Io {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path} is not an Umpire signing key file ({problem})")]
    Format { path: PathBuf, problem: String },
}

/// Loads the signing key of `dir`, generating and saving one (mode 0600) on first use.
pub fn load_or_create_signer(dir: &Path) -> Result<LocalSigner, KeyFileError> {
    let path = dir.join(KEY_FILE);
    let io = |source| KeyFileError::Io {
        path: path.clone(),
        source,
    };
    match std::fs::read(&path) {
        Ok(bytes) => read_key_file(&path, &bytes),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            std::fs::create_dir_all(dir).map_err(io)?;
            let signer = LocalSigner::from_seed(umpire_host::random_bytes());
            let doc = Value::object()
                .with("alg", "ed25519")
                .with("key_id", umpire_core::signer::Signer::key_id(&signer))
                .with("seed_hex", hex::encode(signer.seed()));
            let mut opts = std::fs::OpenOptions::new();
            opts.write(true).create_new(true);
            #[cfg(unix)]
            {
                use std::os::unix::fs::OpenOptionsExt;
                opts.mode(0o600);
            }
            match opts.open(&path) {
                Ok(mut f) => {
                    f.write_all(&doc.to_canonical_vec()).map_err(io)?;
                    f.sync_all().map_err(io)?;
                    Ok(signer)
                }
                // Another process created it first: use theirs.
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                    let bytes = std::fs::read(&path).map_err(io)?;
                    read_key_file(&path, &bytes)
                }
                Err(e) => Err(io(e)),
            }
        }
        Err(e) => Err(io(e)),
    }
}

/// Loads the signing key of `dir` without creating one.
pub fn load_signer(dir: &Path) -> Result<LocalSigner, KeyFileError> {
    let path = dir.join(KEY_FILE);
    let bytes = std::fs::read(&path).map_err(|source| KeyFileError::Io {
        path: path.clone(),
        source,
    })?;
    read_key_file(&path, &bytes)
}

fn read_key_file(path: &Path, bytes: &[u8]) -> Result<LocalSigner, KeyFileError> {
    let format = |problem: String| KeyFileError::Format {
        path: path.to_owned(),
        problem,
    };
    let v = parse(bytes).map_err(|e| format(e.to_string()))?;
    let seed_hex = v
        .get("seed_hex")
        .and_then(Value::as_str)
        .ok_or_else(|| format("no seed_hex".into()))?;
    LocalSigner::from_seed_hex(seed_hex)
        .ok_or_else(|| format("seed_hex is not 32 bytes of hex".into()))
}
