//! What travels: the request and response types every handler takes and gives, and the
//! caller's address as the platform saw it.

use std::net::IpAddr;

use bytes::Bytes;

pub type Request = http::Request<Bytes>;
pub type Response = http::Response<Bytes>;

/// The caller's address as the platform saw it (API Gateway's `sourceIp`, or the
/// socket peer locally); never taken from a client-supplied header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClientIp(pub IpAddr);

impl ClientIp {
    /// The address the transport attached to the request, if any.
    pub fn of(req: &Request) -> Option<ClientIp> {
        req.extensions().get::<ClientIp>().copied()
    }
}
