//! `umpire status` and `umpire find`: free reads of verdicts.

use std::process::ExitCode;

use reqwest::Method;
use umpire_core::urlenc::component;

use super::Local;
use super::client::{Api, free};

/// A verdict by id, with the secret its purchase returned.
pub async fn status(api: &Api, id: &str, secret: &str) -> Result<ExitCode, Local> {
    let path = format!("/v1/verdicts/{}", component(id));
    free(
        api,
        Method::GET,
        &path,
        &[("authorization", format!("Bearer {secret}"))],
        None,
    )
    .await
}

/// The verdicts bought for a spec with a webhook.
pub async fn find(api: &Api, spec_hash: &str, webhook: &str) -> Result<ExitCode, Local> {
    let path = format!(
        "/v1/find?spec_hash={}&webhook={}",
        component(spec_hash),
        component(webhook)
    );
    free(api, Method::GET, &path, &[], None).await
}
