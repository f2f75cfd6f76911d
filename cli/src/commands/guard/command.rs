//! `umpire pin`: pins a service's key document and prices by hand, saying what changed
//! since the last pin.

use std::process::ExitCode;

use super::pin::{Pin, pin_path, trustworthy_transport};
use crate::commands::client::Api;
use crate::commands::{Local, Remote, remote_call};

/// Pin the service's key and prices: from then on every payment's 402 must carry
/// offers signed by this key, at no more than these prices, or nothing is signed
/// (docs/client.md). Run it again to accept a new key or new prices.
#[derive(clap::Args)]
pub struct PinCmd {
    /// The key document to pin, a file or URL, taken from a source you trust.
    /// Default: BASE/.well-known/umpire-key.json.
    #[arg(long)]
    key_document: Option<String>,
    #[command(flatten)]
    remote: Remote,
}

impl PinCmd {
    pub async fn run(self) -> ExitCode {
        let key_document = self.key_document;
        remote_call(self.remote, |api| async move {
            pin(&api, key_document.as_deref()).await
        })
        .await
    }
}

/// `umpire pin`: pins the service's key document and prices, saying what changed.
pub async fn pin(api: &Api, key_document: Option<&str>) -> Result<ExitCode, Local> {
    if key_document.is_none() && !trustworthy_transport(api.base()) {
        return Err(Local(format!(
            "{} is plain http on another machine: a key read from it could be anyone's. Pass --key-document FILE (or URL) with Umpire's key document from a source you trust",
            api.base()
        )));
    }
    let path = pin_path(api.base());
    let before = Pin::read(&path).ok().flatten();
    let (doc, quote) = Pin::fetch(api, key_document).await?;
    let pin = Pin::write(api.base(), &doc, &quote)?;
    match before {
        Some(old) if old.describe_keys() != pin.describe_keys() => eprintln!(
            "the pinned key changed: was {}, now {}",
            old.describe_keys(),
            pin.describe_keys()
        ),
        Some(old) if old.quote != pin.quote => eprintln!("the pinned prices or rails changed"),
        Some(_) => eprintln!("unchanged"),
        None => {}
    }
    eprintln!(
        "pinned {}: key {}; prices and rails from {}/v1/quote",
        pin.path.display(),
        pin.describe_keys(),
        api.base()
    );
    println!("{}", pin.path.display());
    Ok(ExitCode::SUCCESS)
}
