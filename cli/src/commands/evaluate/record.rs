//! What an evaluation keeps between runs: the verdict it bought for a job (its id and
//! one-time secret), in `<data dir>/evaluations/<the job's Idempotency-Key>.json`. A
//! later run (after a crash, a lost answer, a transaction that failed, or past the
//! service's one-day idempotency window) reads that verdict back instead of buying
//! again, for as long as the service keeps it (90 days).

use std::path::{Path, PathBuf};

use umpire_core::json::{Value, parse};

use crate::commands::Local;

/// One purchase made for one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub job: String,
    /// The service it was bought from (a record of another service is not ours to read).
    pub base: String,
    pub tier: String,
    pub verdict_id: String,
    pub secret: String,
}

fn path(dir: &Path, key: &str) -> PathBuf {
    dir.join("evaluations").join(format!("{key}.json"))
}

/// Held while one process evaluates one job: a second evaluation of the job on this
/// machine (a manual run beside a watcher, two watchers) waits its turn instead of
/// racing the first to the escrow. The operating system releases it when the process
/// ends, however it ends.
pub struct JobLock(#[allow(dead_code)] std::fs::File);

/// The job's lock, or `None` while another process holds it.
pub fn lock(dir: &Path, key: &str) -> Result<Option<JobLock>, Local> {
    let folder = dir.join("evaluations");
    std::fs::create_dir_all(&folder).map_err(|e| Local(format!("{}: {e}", folder.display())))?;
    let p = folder.join(format!("{key}.lock"));
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&p)
        .map_err(|e| Local(format!("{}: {e}", p.display())))?;
    match f.try_lock() {
        Ok(()) => Ok(Some(JobLock(f))),
        Err(std::fs::TryLockError::WouldBlock) => Ok(None),
        Err(std::fs::TryLockError::Error(e)) => Err(Local(format!("{}: {e}", p.display()))),
    }
}

/// The record kept under `key`, if any (an unreadable one is ignored, with a warning).
pub fn load(dir: &Path, key: &str) -> Option<Record> {
    let p = path(dir, key);
    let bytes = std::fs::read(&p).ok()?;
    let v = match parse(&bytes) {
        Ok(v) => v,
        Err(e) => {
            eprintln!("ignoring {}: not JSON ({e})", p.display());
            return None;
        }
    };
    let s = |k: &str| v.get(k).and_then(Value::as_str).map(str::to_owned);
    Some(Record {
        job: s("job")?,
        base: s("base")?,
        tier: s("tier")?,
        verdict_id: s("verdict_id")?,
        secret: s("secret")?,
    })
}

/// Writes the record under `key` whole or not at all, readable by its owner only (it
/// holds the verdict's secret).
pub fn save(dir: &Path, key: &str, r: &Record) -> Result<(), Local> {
    let p = path(dir, key);
    let text = Value::object()
        .with("job", r.job.as_str())
        .with("base", r.base.as_str())
        .with("tier", r.tier.as_str())
        .with("verdict_id", r.verdict_id.as_str())
        .with("secret", r.secret.as_str())
        .to_canonical_string();
    crate::commands::held::write_private_atomically(&p, text.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_as_written_and_only_its_owner_reads_it() {
        let dir = std::env::temp_dir().join(format!("umpire-record-{}", std::process::id()));
        let r = Record {
            job: "eip155:1:0x0000000000000000000000000000000000000001:7".into(),
            base: "http://127.0.0.1:8080".into(),
            tier: "basic".into(),
            verdict_id: "vrd_1".into(),
            secret: "sec_1".into(),
        };
        assert_eq!(load(&dir, "erc8183-k"), None);
        assert!(save(&dir, "erc8183-k", &r).is_ok(), "saved");
        assert_eq!(load(&dir, "erc8183-k"), Some(r));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(path(&dir, "erc8183-k"))
                .expect("file")
                .permissions()
                .mode();
            assert_eq!(mode & 0o777, 0o600);
        }
        std::fs::write(path(&dir, "erc8183-bad"), b"not json").expect("write");
        assert_eq!(load(&dir, "erc8183-bad"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
