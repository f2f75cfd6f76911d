//! The free routes: health, the key document, the quote, validation, the OpenAPI
//! document, the verify page, a verdict's status and the sworn finder.

pub mod denied;
pub mod handlers;
pub mod lookup;
pub mod siwx;
