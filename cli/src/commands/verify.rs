//! `umpire verify`: a signed document checked offline against a key document (a file,
//! a URL, or the local key).

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use umpire_core::json::{Value, parse};
use umpire_core::signer::{PublicKey, Signer, keys_from_document};
use umpire_core::spec::parse_deliverable;
use umpire_server::datadir::{default_data_dir, load_signer};

use super::{fail, read_json};

async fn load_keys(key: Option<&str>, data_dir: Option<PathBuf>) -> Result<Vec<PublicKey>, String> {
    let doc = match key {
        Some(k) if k.starts_with("http://") || k.starts_with("https://") => {
            let body = fetch_key_document(k).await?;
            parse(&body).map_err(|e| format!("{k}: {e}"))?
        }
        Some(k) => read_json(Path::new(k))?,
        None => {
            let dir = data_dir.unwrap_or_else(default_data_dir);
            let signer = load_signer(&dir).map_err(|e| {
                format!("no --key given and no local key to default to ({e}); pass --key FILE or --key https://…/.well-known/umpire-key.json")
            })?;
            return Ok(vec![PublicKey::of(&signer as &dyn Signer)]);
        }
    };
    let keys = keys_from_document(&doc);
    if keys.is_empty() {
        return Err("the key document lists no usable keys".into());
    }
    Ok(keys)
}

async fn fetch_key_document(url: &str) -> Result<Vec<u8>, String> {
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(15))
        .build()
        .map_err(|e| e.to_string())?;
    let resp = client
        .get(url)
        .send()
        .await
        .map_err(|e| format!("{url}: {e}"))?;
    if !resp.status().is_success() {
        return Err(format!("{url}: HTTP {}", resp.status()));
    }
    resp.bytes()
        .await
        .map(|b| b.to_vec())
        .map_err(|e| format!("{url}: {e}"))
}

pub async fn run(
    doc: &Path,
    key: Option<&str>,
    deliverable: Option<&Path>,
    data_dir: Option<PathBuf>,
) -> ExitCode {
    let doc = match read_json(doc) {
        Ok(d) => d,
        Err(e) => return fail(2, &e),
    };
    // `umpire buy` and `umpire reputation --json` print the whole answer: verify the
    // signed document inside it.
    let doc = if doc.get("signature").is_none() {
        match doc.get("document").or_else(|| doc.get("report")) {
            Some(inner) if inner.get("signature").is_some() => inner.clone(),
            _ => doc,
        }
    } else {
        doc
    };
    let keys = match load_keys(key, data_dir).await {
        Ok(k) => k,
        Err(e) => return fail(2, &e),
    };
    let deliverable = match deliverable.map(read_json).transpose() {
        Ok(None) => None,
        Ok(Some(v)) => match parse_deliverable(&v, "deliverable") {
            Ok(d) => Some(d),
            Err(p) => return fail(2, &format!("deliverable: {}", p[0].message)),
        },
        Err(e) => return fail(2, &e),
    };
    let steps = umpire_core::document::verify(&doc, &keys, deliverable.as_ref());
    for s in &steps {
        println!(
            "{} {:<17} {}",
            if s.ok { "ok  " } else { "FAIL" },
            s.name,
            s.detail
        );
    }
    if steps.iter().all(|s| s.ok) && steps.iter().any(|s| s.name == "ed25519") {
        if let Some(v) = doc.get("verdict").and_then(Value::as_str) {
            println!("verified: verdict {v}");
        } else {
            println!("verified");
        }
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}
