//! The AWS SDK's requests sent through reqwest.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use aws_smithy_runtime_api::client::http::{
    HttpClient, HttpConnector, HttpConnectorFuture, HttpConnectorSettings, SharedHttpConnector,
};
use aws_smithy_runtime_api::client::orchestrator::HttpRequest;
use aws_smithy_runtime_api::client::result::ConnectorError;
use aws_smithy_runtime_api::client::runtime_components::RuntimeComponents;
use aws_smithy_types::body::SdkBody;
use aws_smithy_types::retry::ErrorKind;

/// An [`HttpClient`] for the AWS SDK over reqwest, HTTP/1.1 with rustls. The SDK asks
/// for a connector per set of timeouts; one reqwest client (one connection pool) is
/// kept for each.
#[derive(Debug, Default, Clone)]
pub struct ReqwestHttpClient {
    connectors: Arc<Mutex<Vec<(Timeouts, SharedHttpConnector)>>>,
}

/// (connect, read), as the SDK's connector settings give them.
pub type Timeouts = (Option<Duration>, Option<Duration>);

impl ReqwestHttpClient {
    /// A client whose connector for `timeouts` (connect, read) is built now: the TLS
    /// set-up (the platform's roots) happens at cold start, not in the first request.
    pub fn prepared(timeouts: Timeouts) -> ReqwestHttpClient {
        let client = ReqwestHttpClient::default();
        client.connector_for(timeouts);
        client
    }

    /// The connector for `timeouts`, built the first time they are asked for.
    fn connector_for(&self, timeouts: Timeouts) -> SharedHttpConnector {
        let mut connectors = self
            .connectors
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some((_, connector)) = connectors.iter().find(|(t, _)| *t == timeouts) {
            return connector.clone();
        }
        let connector = SharedHttpConnector::new(Connector::new(timeouts));
        connectors.push((timeouts, connector.clone()));
        connector
    }
}

impl HttpClient for ReqwestHttpClient {
    fn http_connector(
        &self,
        settings: &HttpConnectorSettings,
        _components: &RuntimeComponents,
    ) -> SharedHttpConnector {
        self.connector_for((settings.connect_timeout(), settings.read_timeout()))
    }
}

#[derive(Debug)]
struct Connector {
    client: Result<reqwest::Client, Arc<reqwest::Error>>,
}

impl Connector {
    fn new((connect, read): Timeouts) -> Connector {
        // SDK requests are signed for the endpoint they name: never follow a redirect.
        // Proxies come from HTTPS_PROXY / NO_PROXY, as the SDK's own client reads them.
        let mut builder = reqwest::Client::builder().redirect(reqwest::redirect::Policy::none());
        if let Some(connect) = connect {
            builder = builder.connect_timeout(connect);
        }
        if let Some(read) = read {
            builder = builder.read_timeout(read);
        }
        Connector {
            client: builder.build().map_err(Arc::new),
        }
    }
}

impl HttpConnector for Connector {
    fn call(&self, request: HttpRequest) -> HttpConnectorFuture {
        let client = self.client.clone();
        HttpConnectorFuture::new(async move {
            let client = client.map_err(|e| ConnectorError::other(e.into(), None))?;
            let request = to_reqwest(request)?;
            let response = client.execute(request).await.map_err(connector_error)?;
            // The body streams to the SDK, whose stalled-stream protection watches it.
            let response = http::Response::from(response).map(SdkBody::from_body_1_x);
            response
                .try_into()
                .map_err(|e| ConnectorError::other(Box::new(e), None))
        })
    }
}

/// The SDK's request as reqwest's. The body is handed over as the SDK built it (its
/// upload throughput is watched through it); its Content-Length header stays.
fn to_reqwest(request: HttpRequest) -> Result<reqwest::Request, ConnectorError> {
    let request = request
        .try_into_http1x()
        .map_err(|e| ConnectorError::user(Box::new(e)))?
        .map(reqwest::Body::wrap);
    reqwest::Request::try_from(request).map_err(|e| ConnectorError::user(Box::new(e)))
}

/// reqwest's error in the SDK's terms, classified as the SDK's own hyper client does
/// (aws-smithy-http-client's `to_connector_error`): timeouts, refused or dropped
/// connections and I/O failures are transient (the standard retry strategy tries them
/// again); a request the client itself got wrong is the caller's; an answer that is not
/// HTTP is reported as it is, not retried until the function times out.
fn connector_error(e: reqwest::Error) -> ConnectorError {
    if e.is_timeout() {
        return ConnectorError::timeout(Box::new(e));
    }
    if e.is_connect() {
        // No connection was made, so nothing was sent.
        return ConnectorError::io(Box::new(e));
    }
    let Some(hyper) = find_source::<hyper::Error>(&e) else {
        return if find_source::<std::io::Error>(&e).is_some() {
            ConnectorError::io(Box::new(e))
        } else {
            ConnectorError::other(Box::new(e), None)
        };
    };
    if hyper.is_timeout() {
        ConnectorError::timeout(Box::new(e))
    } else if hyper.is_user() {
        ConnectorError::user(Box::new(e))
    } else if hyper.is_closed()
        || hyper.is_canceled()
        || find_source::<std::io::Error>(&e).is_some()
    {
        ConnectorError::io(Box::new(e))
    } else if hyper.is_incomplete_message() {
        ConnectorError::other(Box::new(e), Some(ErrorKind::TransientError))
    } else {
        ConnectorError::other(Box::new(e), None)
    }
}

fn find_source<'a, E: std::error::Error + 'static>(
    err: &'a (dyn std::error::Error + 'static),
) -> Option<&'a E> {
    let mut next = Some(err);
    while let Some(err) = next {
        if let Some(found) = err.downcast_ref::<E>() {
            return Some(found);
        }
        next = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    /// A refused connection reaches the SDK as an I/O failure, which its standard retry
    /// strategy (set by `sdk_config_from`) tries three times in all.
    /// The SDK configured as a function's environment configures it, pointed at a
    /// port on this machine.
    fn local_config(port: u16) -> crate::SdkConfig {
        crate::sdk_config_from(&|name| match name {
            "AWS_REGION" => Some("us-east-1".into()),
            "AWS_ACCESS_KEY_ID" | "AWS_SECRET_ACCESS_KEY" => Some("test".into()),
            "AWS_ENDPOINT_URL" => Some(format!("http://127.0.0.1:{port}")),
            _ => None,
        })
        .expect("config")
    }

    #[tokio::test]
    async fn a_refused_connection_is_transient() {
        let port = {
            let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
            listener.local_addr().expect("addr").port()
        };
        let config = local_config(port);
        assert_eq!(
            config.retry_config().map(|r| r.max_attempts()),
            Some(3),
            "standard retries, as aws-config set them"
        );
        let sqs = aws_sdk_sqs::Client::new(&config);
        let err = sqs.list_queues().send().await.expect_err("nothing listens");
        match err {
            aws_sdk_sqs::error::SdkError::DispatchFailure(failure) => {
                assert!(failure.is_io(), "{failure:?}")
            }
            other => panic!("expected a dispatch failure, got {other:?}"),
        }
    }

    /// An answer that is not HTTP is reported once, not retried: only transient
    /// failures are (the SDK's own client classifies them the same way).
    #[tokio::test]
    async fn an_answer_that_is_not_http_is_not_retried() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let accepted = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = accepted.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(mut stream) = stream else { return };
                counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                let mut buf = [0u8; 4096];
                let _ = stream.read(&mut buf);
                let _ = stream.write_all(b"this is not HTTP at all\r\n\r\n");
            }
        });
        let config = local_config(port);
        let sqs = aws_sdk_sqs::Client::new(&config);
        let err = sqs.list_queues().send().await.expect_err("garbage");
        assert!(
            matches!(&err, aws_sdk_sqs::error::SdkError::DispatchFailure(f) if !f.is_io() && !f.is_timeout()),
            "{err:?}"
        );
        assert_eq!(
            accepted.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "sent once, not retried"
        );
    }

    /// A request and its answer pass through unchanged: method, path, headers, body,
    /// status.
    #[tokio::test]
    async fn carries_the_request_and_the_answer() {
        use std::io::{Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let port = listener.local_addr().expect("addr").port();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = listener.accept().expect("accept");
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            while !String::from_utf8_lossy(&seen).contains("{\"a\":1}") {
                let n = stream.read(&mut buf).expect("read");
                if n == 0 {
                    break;
                }
                seen.extend_from_slice(&buf[..n]);
            }
            stream
                .write_all(b"HTTP/1.1 418 I'm a teapot\r\nx-amzn-requestid: r1\r\ncontent-length: 5\r\n\r\nshort")
                .expect("write");
            String::from_utf8_lossy(&seen).into_owned()
        });
        let mut request = HttpRequest::new(SdkBody::from("{\"a\":1}"));
        request
            .set_uri(format!("http://127.0.0.1:{port}/path?q=1"))
            .expect("uri");
        request.headers_mut().insert("x-amz-target", "Test.Op");
        let connector = Connector::new((Some(Duration::from_secs(2)), None));
        let response = connector.call(request).await.expect("answered");
        assert_eq!(response.status().as_u16(), 418);
        assert_eq!(response.headers().get("x-amzn-requestid"), Some("r1"));
        let body = response
            .into_body()
            .collect()
            .await
            .expect("body")
            .to_bytes();
        assert_eq!(&body[..], b"short");
        let seen = server.join().expect("server").to_ascii_lowercase();
        assert!(seen.starts_with("get /path?q=1 http/1.1\r\n"), "{seen}");
        assert!(seen.contains("x-amz-target: test.op"), "{seen}");
        assert!(seen.contains("content-length: 7"), "{seen}");
    }
}
