//! The contract's texts and protocol constants that every floor may read: the OpenAPI
//! document (one source of truth for discovery, the schema tests and `/openapi.json`)
//! and the MCP protocol versions we speak.

/// The OpenAPI 3.1 description, shipped as `/openapi.json` (a test checks
/// real responses against it, and schemathesis runs against `umpire serve` in make test).
pub const OPENAPI: &str = include_str!("../openapi.json");

/// The MCP protocol versions we answer, newest first (the first is what we announce).
pub const MCP_PROTOCOL_VERSIONS: &[&str] = &["2025-06-18", "2025-03-26", "2024-11-05"];
