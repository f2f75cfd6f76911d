//! The glue between Lambda and the shared handlers: an API Gateway (HTTP API, payload
//! v2) event becomes an `http::Request<Bytes>` for the function's one handler and its
//! answer an API Gateway response, and [`run`] is the whole life of an API function.

use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::Arc;

use bytes::Bytes;
use lambda_http::request::RequestContext;
use lambda_http::{Body, RequestExt, service_fn};
use umpire_api::plumbing::respond;
use umpire_api::{AppState, ClientIp, Route, handle_route};
use umpire_core::product::MAX_BODY_BYTES;
use umpire_core::{ApiError, ErrorCode};

use crate::cold_start::ColdStart;
use crate::fns::Function;
use crate::keys::keygen_pending;
use crate::logging::init_logging;

/// The caller's IP as API Gateway saw it (`requestContext.http.sourceIp`); headers
/// such as X-Forwarded-For are the client's to forge and are ignored.
pub fn client_ip(req: &lambda_http::Request) -> Option<ClientIp> {
    match req.request_context_ref()? {
        RequestContext::ApiGatewayV2(ctx) => ctx
            .http
            .source_ip
            .as_deref()?
            .parse::<IpAddr>()
            .ok()
            .map(ClientIp),
        #[allow(unreachable_patterns)]
        _ => None,
    }
}

/// One invocation: event in, API Gateway response out. Never fails: every problem
/// becomes an error body. Routed at run time: tests drive every route through it;
/// deployed binaries use [`invoke_function`], which links only their own handler.
pub async fn invoke(
    state: &AppState,
    route: Route,
    req: lambda_http::Request,
) -> lambda_http::Response<Body> {
    convert(req, |r| handle_route(state, route, r)).await
}

/// [`invoke`] for the one function `F`.
pub async fn invoke_function<F: Function>(
    state: &F::State,
    req: lambda_http::Request,
) -> lambda_http::Response<Body> {
    convert(req, |r| F::handle(state, r)).await
}

async fn convert<Fut>(
    req: lambda_http::Request,
    handle: impl FnOnce(umpire_api::Request) -> Fut,
) -> lambda_http::Response<Body>
where
    Fut: std::future::Future<Output = umpire_api::Response>,
{
    let ip = client_ip(&req);
    let (mut parts, body) = req.into_parts();
    let bytes = match body {
        Body::Empty => Bytes::new(),
        Body::Text(t) => Bytes::from(t),
        Body::Binary(b) => Bytes::from(b),
        #[allow(unreachable_patterns)]
        _ => Bytes::new(),
    };
    let response = if bytes.len() > MAX_BODY_BYTES {
        respond::error(&ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
            "Send at most 1 MiB; deliverable text is capped at 200 KB.",
        ))
    } else {
        if let Some(ip) = ip {
            parts.extensions.insert(ip);
        }
        handle(http::Request::from_parts(parts, bytes)).await
    };
    // Our own failure (refusals are 4xx/503): counted against this version, which a
    // rollout rolls back on.
    if response.status() == http::StatusCode::INTERNAL_SERVER_ERROR {
        umpire_api::plumbing::metrics::record_for_version(
            umpire_api::plumbing::metrics::Metric::Internal5xx,
        );
    }
    let (parts, body) = response.into_parts();
    let body = match String::from_utf8(body.to_vec()) {
        Ok(text) if text.is_empty() => Body::Empty,
        Ok(text) => Body::Text(text),
        Err(e) => Body::Binary(e.into_bytes()),
    };
    lambda_http::Response::from_parts(parts, body)
}

/// The whole life of an API function: log setup, cold start, then serve events.
pub async fn run<F: Function>() -> Result<(), lambda_http::Error> {
    init_logging();
    if keygen_pending::<F>(&|name| std::env::var(name).ok()) {
        // What the keyed cold start would refuse (a switch no deploy may carry, a
        // configuration it could not run with, a window under a minute among them) is
        // refused here too, named, not only after `umpire keygen`.
        crate::vars::refuse_local_switches(F::ROLE, &|name| std::env::var(name).ok())?;
        umpire_api::Config::from_env()?;
        tracing::warn!(
            "no signing key yet: every request is refused until `umpire keygen` is deployed"
        );
        return lambda_http::run(service_fn(|req: lambda_http::Request| async move {
            umpire_api::plumbing::metrics::record(umpire_api::plumbing::metrics::Metric::NotKeyed);
            let refusal = umpire_api::routes::free::not_keyed();
            Ok::<_, Infallible>(convert(req, |_| async move { respond::error(&refusal) }).await)
        }))
        .await;
    }
    let state = Arc::new(F::State::cold_start::<F>().await?);
    lambda_http::run(service_fn(move |req| {
        let state = state.clone();
        async move { Ok::<_, Infallible>(invoke_function::<F>(&state, req).await) }
    }))
    .await
}
