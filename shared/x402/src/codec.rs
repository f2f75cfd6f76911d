//! Headers carry standard base64 (with padding) of UTF-8 JSON.

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Payment headers larger than this are refused before decoding.
pub const MAX_HEADER_BYTES: usize = 16 * 1024;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodecError {
    #[error("the payment header is larger than {MAX_HEADER_BYTES} bytes")]
    TooLarge,
    #[error("the payment header is not base64")]
    NotBase64,
    #[error("the payment header is not the expected JSON: {0}")]
    BadJson(String),
}

pub fn encode_header<T: Serialize>(value: &T) -> String {
    // Our own types always serialize.
    STANDARD.encode(serde_json::to_vec(value).unwrap_or_default())
}

/// Decodes base64 JSON, tolerating the unpadded and URL-safe variants some clients send.
pub fn decode_header<T: DeserializeOwned>(raw: &str) -> Result<T, CodecError> {
    let raw = raw.trim();
    if raw.len() > MAX_HEADER_BYTES {
        return Err(CodecError::TooLarge);
    }
    let bytes = [STANDARD, STANDARD_NO_PAD, URL_SAFE, URL_SAFE_NO_PAD]
        .iter()
        .find_map(|e| e.decode(raw).ok())
        .ok_or(CodecError::NotBase64)?;
    serde_json::from_slice(&bytes).map_err(|e| CodecError::BadJson(e.to_string()))
}
