//! `umpire serve`: every route in one process on a plain HTTP/1.1 listener.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;
use umpire_core::product::MAX_BODY_BYTES;
use umpire_core::{ApiError, ErrorCode};

use crate::{AppState, ClientIp, handle, respond};

/// Serves until `shutdown` resolves; connections in progress finish on their own.
pub async fn serve(
    listener: TcpListener,
    state: Arc<AppState>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                // Out of file descriptors and the like: keep serving the others.
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => return Ok(()),
        };
        let _ = stream.set_nodelay(true);
        let state = state.clone();
        tokio::spawn(async move {
            let service = service_fn(move |req| {
                let state = state.clone();
                async move { Ok::<_, std::convert::Infallible>(serve_one(&state, req, peer).await) }
            });
            let _ = http1::Builder::new()
                .keep_alive(true)
                .serve_connection(TokioIo::new(stream), service)
                .await;
        });
    }
}

async fn serve_one(
    state: &AppState,
    req: http::Request<Incoming>,
    peer: SocketAddr,
) -> http::Response<Full<Bytes>> {
    let started = Instant::now();
    let (mut parts, body) = req.into_parts();
    let method = parts.method.clone();
    let path = parts.uri.path().to_owned();
    let response = match Limited::new(body, MAX_BODY_BYTES).collect().await {
        Ok(collected) => {
            parts.extensions.insert(ClientIp(peer.ip()));
            let req = http::Request::from_parts(parts, collected.to_bytes());
            handle(state, req).await
        }
        Err(e)
            if e.downcast_ref::<http_body_util::LengthLimitError>()
                .is_some() =>
        {
            respond::error(&ApiError::new(
                ErrorCode::PayloadTooLarge,
                format!("the request body is larger than {MAX_BODY_BYTES} bytes"),
                "Send at most 1 MiB; deliverable text is capped at 200 KB.",
            ))
        }
        Err(e) => respond::error(&ApiError::new(
            ErrorCode::InvalidRequest,
            format!("the request body could not be read: {e}"),
            "Send the body in full with a correct Content-Length or chunked encoding.",
        )),
    };
    let status = response.status().as_u16();
    tracing::info!(
        target: "umpire::access",
        %method,
        path,
        status,
        micros = started.elapsed().as_micros() as u64,
        ip = %peer.ip(),
        "request"
    );
    let (parts, body) = response.into_parts();
    let mut r = http::Response::from_parts(parts, Full::new(body));
    if method == http::Method::HEAD {
        *r.body_mut() = Full::new(Bytes::new());
    }
    r
}
