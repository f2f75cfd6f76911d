//! Loading the guard for a service: its pin read, or made on first use where that is
//! safe, and never over plain http elsewhere unless the operator allows it.

use std::sync::Mutex;

use umpire_core::json::Value;

use super::budget::Spent;
use super::pin::{Pin, pin_path, pinnable_on_first_use, trustworthy_transport};
use super::{Guard, GuardArgs};
use crate::commands::Local;
use crate::commands::client::Api;

impl Guard {
    /// The guard for payments to `api`'s service: its pin, read, or made on first use
    /// where that is safe.
    pub async fn load(api: &Api, args: &GuardArgs) -> Result<Guard, Local> {
        if !trustworthy_transport(api.base()) && !args.allow_http {
            return Err(Local(format!(
                "{} is plain http on another machine: anyone on the way could rewrite what it asks to be paid. Use https, or pass --allow-http if this network is yours",
                api.base()
            )));
        }
        let path = args
            .pin_file
            .clone()
            .unwrap_or_else(|| pin_path(api.base()));
        let pin = match Pin::read(&path)? {
            Some(pin) => pin,
            None if args.pin_file.is_some() => {
                return Err(Local(format!("{}: no such pin file", path.display())));
            }
            None if trustworthy_transport(api.base()) => {
                let (doc, quote) = Pin::fetch(api, None).await?;
                if !pinnable_on_first_use(api.base(), &doc, &quote) {
                    return Err(Local(format!(
                        "{} serves documents issued by {}: not pinned on first use. If that is the service you mean, pay it at its own address, or run `umpire pin --base {} --key-document FILE` with its key document from a source you trust",
                        api.base(),
                        doc.get("issuer")
                            .and_then(Value::as_str)
                            .unwrap_or("nobody"),
                        api.base()
                    )));
                }
                let pin = Pin::write(api.base(), &doc, &quote)?;
                eprintln!(
                    "first payment to {}: pinned its key {} and prices in {} (check the key against one you trust; `umpire pin` renews the pin)",
                    api.base(),
                    pin.describe_keys(),
                    pin.path.display()
                );
                pin
            }
            None => {
                return Err(Local(format!(
                    "no pin for {} and it is not reached over https: run `umpire pin --base {} --key-document FILE` with Umpire's key document from a source you trust",
                    api.base(),
                    api.base()
                )));
            }
        };
        Ok(Guard {
            pin,
            max_amount: args.max_amount.clone(),
            budget: args.budget,
            spent: Mutex::new(Spent::default()),
        })
    }
}
