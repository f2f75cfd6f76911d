//! What a 402 declares besides its price, in the x402 extensions agents and facilitators
//! read: `bazaar` (how to call the route: method, input schema and example, output
//! example; facilitators catalog it and agents search the catalog) and
//! `payment-identifier` (a client may put its idempotency id inside the payment).
//!
//! Every schema and example comes from `/openapi.json` (one source of truth): the
//! request body schema with its `$ref`s inlined, the per-tier request example, the
//! response example. The shapes follow `@x402/extensions` (`declareDiscoveryExtension`
//! as its resource-server extension enriches it with the method); its own validator
//! and extractor check them in the tests.

use std::sync::{Mutex, OnceLock};

use serde_json::{Map, Value, json};

/// The extension keys, as the x402 specification names them.
pub const BAZAAR: &str = "bazaar";
pub const PAYMENT_IDENTIFIER: &str = "payment-identifier";

/// The payment-identifier extension's id: 16 to 128 characters of `[A-Za-z0-9_-]`
/// (the extension's own rule, which also fits our Idempotency-Key's 16–128).
pub const PAYMENT_ID_MIN: usize = 16;
pub const PAYMENT_ID_MAX: usize = 128;

/// How catalogs name us, and the tags agents find us by (Bazaar's limits: ≤ 32
/// printable ASCII characters each, at most 5 tags).
pub const SERVICE_NAME: &str = "Umpire";
pub const TAGS: &[&str] = &[
    "verification",
    "evaluator",
    "escrow",
    "reputation",
    "signed",
];

const DRAFT_2020_12: &str = "https://json-schema.org/draft/2020-12/schema";

/// What a paid route sells, as discovery describes it: the catalog's description and
/// where its operation is written in `/openapi.json`. Each product supplies its own;
/// checkout reads the OpenAPI document by these keys and knows no product by name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// The searchable description of the resource (the catalog's `description`).
    pub description: String,
    /// The operation's path in the OpenAPI document, e.g. `/v1/verdicts/{tier}`.
    pub openapi_path: &'static str,
    /// How it is called: a JSON body (`POST`, with the named request example) or a
    /// query (`GET`).
    pub input: Input,
    /// The status of its success answer, e.g. `"201"`.
    pub success_status: &'static str,
}

/// How a paid operation takes its input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Input {
    /// `POST` with a JSON body; the request example of this name.
    Body { example: &'static str },
    /// `GET` with query parameters (their examples and schemas from the document).
    Query,
}

/// The OpenAPI document, parsed once.
fn openapi() -> &'static Value {
    static DOC: OnceLock<Value> = OnceLock::new();
    DOC.get_or_init(|| {
        serde_json::from_str(crate::plumbing::protocol::OPENAPI).unwrap_or(Value::Null)
    })
}

/// `v` with every `{"$ref":"#/components/schemas/X"}` replaced by that schema
/// (recursively; a cycle stops at a small depth, the contract's schemas have none).
fn inline_refs(v: &Value, depth: u8) -> Value {
    match v {
        Value::Object(obj) => {
            if let Some(Value::String(r)) = obj.get("$ref")
                && let Some(name) = r.strip_prefix("#/components/schemas/")
                && depth < 8
            {
                let target = &openapi()["components"]["schemas"][name];
                return inline_refs(target, depth + 1);
            }
            Value::Object(
                obj.iter()
                    .map(|(k, v)| (k.clone(), inline_refs(v, depth)))
                    .collect(),
            )
        }
        Value::Array(items) => Value::Array(items.iter().map(|v| inline_refs(v, depth)).collect()),
        other => other.clone(),
    }
}

fn operation(listing: &Listing) -> &'static Value {
    let method = match listing.input {
        Input::Body { .. } => "post",
        Input::Query => "get",
    };
    &openapi()["paths"][listing.openapi_path][method]
}

/// The request body schema of a paid POST, `$ref`s inlined.
pub fn body_schema(listing: &Listing) -> Value {
    inline_refs(
        &operation(listing)["requestBody"]["content"]["application/json"]["schema"],
        0,
    )
}

/// The request body example a paid POST names.
pub fn body_example(listing: &Listing, example: &str) -> Value {
    operation(listing)["requestBody"]["content"]["application/json"]["examples"][example]["value"]
        .clone()
}

/// The success answer's status, example and schema.
fn output(listing: &Listing) -> (Value, Value) {
    let media =
        &operation(listing)["responses"][listing.success_status]["content"]["application/json"];
    (media["example"].clone(), inline_refs(&media["schema"], 0))
}

/// The query parameters of a paid GET: their example values and their schema.
fn query(listing: &Listing) -> (Map<String, Value>, Value) {
    let mut example = Map::new();
    let mut properties = Map::new();
    let mut required = Vec::new();
    let params = operation(listing)["parameters"].as_array();
    for p in params.into_iter().flatten() {
        if p["in"] != "query" {
            continue;
        }
        let Some(name) = p["name"].as_str() else {
            continue;
        };
        example.insert(name.to_owned(), p["example"].clone());
        properties.insert(name.to_owned(), p["schema"].clone());
        if p["required"] == true {
            required.push(Value::from(name));
        }
    }
    (
        example,
        json!({"type": "object", "properties": properties, "required": required}),
    )
}

/// The `bazaar` declaration of a paid route, as `@x402/extensions` builds and enriches
/// it: `info` (what to send, what comes back) and `schema` (a JSON Schema of `info`).
pub fn bazaar(listing: &Listing) -> Value {
    let (output_example, output_schema) = output(listing);
    let output_info = json!({"type": "json", "example": output_example});
    let mut example_schema = json!({"type": "object"});
    if let (Value::Object(target), Value::Object(source)) = (&mut example_schema, output_schema) {
        target.extend(source);
    }
    let output_schema = json!({
        "type": "object",
        "properties": {"type": {"type": "string"}, "example": example_schema},
        "required": ["type"]
    });
    let (info_input, input_schema) = match listing.input {
        Input::Body { example } => (
            json!({"type": "http", "method": "POST", "bodyType": "json", "body": body_example(listing, example)}),
            json!({
                "type": "object",
                "properties": {
                    "type": {"type": "string", "const": "http"},
                    "method": {"type": "string", "enum": ["POST"]},
                    "bodyType": {"type": "string", "enum": ["json", "form-data", "text"]},
                    "body": body_schema(listing)
                },
                "required": ["type", "method", "bodyType", "body"],
                "additionalProperties": false
            }),
        ),
        Input::Query => {
            let (example, schema) = query(listing);
            (
                json!({"type": "http", "method": "GET", "queryParams": example}),
                json!({
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "const": "http"},
                        "method": {"type": "string", "enum": ["GET"]},
                        "queryParams": schema
                    },
                    "required": ["type", "method"],
                    "additionalProperties": false
                }),
            )
        }
    };
    json!({
        "info": {"input": info_input, "output": output_info},
        "schema": {
            "$schema": DRAFT_2020_12,
            "type": "object",
            "properties": {"input": input_schema, "output": output_schema},
            "required": ["input"]
        }
    })
}

/// The `payment-identifier` declaration: optional (the Idempotency-Key header does the
/// same), with the extension's own schema.
pub fn payment_identifier() -> Value {
    json!({
        "info": {"required": false},
        "schema": {
            "$schema": DRAFT_2020_12,
            "type": "object",
            "properties": {
                "required": {"type": "boolean"},
                "id": {
                    "type": "string",
                    "minLength": PAYMENT_ID_MIN,
                    "maxLength": PAYMENT_ID_MAX,
                    "pattern": "^[a-zA-Z0-9_-]+$"
                }
            },
            "required": ["required"]
        }
    })
}

/// Everything a paid route's 402 declares in `extensions`, built once per listing (a
/// process sells a handful) and cloned into each 402.
pub fn extensions(listing: &Listing) -> Map<String, Value> {
    static CACHE: Mutex<Vec<(Listing, Map<String, Value>)>> = Mutex::new(Vec::new());
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((_, m)) = cache.iter().find(|(l, _)| l == listing) {
        return m.clone();
    }
    let mut m = Map::new();
    m.insert(BAZAAR.into(), bazaar(listing));
    m.insert(PAYMENT_IDENTIFIER.into(), payment_identifier());
    cache.push((listing.clone(), m.clone()));
    m
}

/// Why a payment's `payment-identifier` cannot be used.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadPaymentId(pub String);

/// The id a v2 payment carries in `extensions["payment-identifier"].info.id`, if any;
/// checked against the extension's rule.
pub fn payment_id(raw_payment: &Value) -> Result<Option<String>, BadPaymentId> {
    let Some(ext) = raw_payment
        .get("extensions")
        .and_then(|e| e.get(PAYMENT_IDENTIFIER))
    else {
        return Ok(None);
    };
    let Some(id) = ext.get("info").and_then(|i| i.get("id")) else {
        return Ok(None);
    };
    let Some(id) = id.as_str() else {
        return Err(BadPaymentId(
            "extensions.payment-identifier.info.id must be a string".into(),
        ));
    };
    let ok_chars = id
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if !(PAYMENT_ID_MIN..=PAYMENT_ID_MAX).contains(&id.len()) || !ok_chars {
        return Err(BadPaymentId(format!(
            "extensions.payment-identifier.info.id must be {PAYMENT_ID_MIN} to {PAYMENT_ID_MAX} characters of A-Z, a-z, 0-9, '-' and '_' (got {} characters)",
            id.chars().count()
        )));
    }
    Ok(Some(id.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_reads_its_operation_from_the_openapi_document() {
        let post = Listing {
            description: "d".into(),
            openapi_path: "/v1/verdicts/{tier}",
            input: Input::Body { example: "basic" },
            success_status: "201",
        };
        let raw = &openapi()["paths"]["/v1/verdicts/{tier}"]["post"]["requestBody"]["content"]["application/json"];
        assert_eq!(body_schema(&post), inline_refs(&raw["schema"], 0));
        assert_eq!(
            body_example(&post, "basic"),
            raw["examples"]["basic"]["value"]
        );
        assert!(body_example(&post, "basic")["spec"]["checks"].is_array());
        let b = bazaar(&post);
        assert_eq!(b["info"]["input"]["method"], "POST");
        assert_eq!(
            b["info"]["output"]["example"],
            openapi()["paths"]["/v1/verdicts/{tier}"]["post"]["responses"]["201"]["content"]["application/json"]
                ["example"]
        );
        let get = Listing {
            openapi_path: "/v1/reputation",
            input: Input::Query,
            success_status: "200",
            ..post
        };
        assert_eq!(bazaar(&get)["info"]["input"]["method"], "GET");
        // A listing naming no operation has nothing to declare but does not panic.
        let missing = Listing {
            openapi_path: "/v1/nothing",
            ..get
        };
        assert!(bazaar(&missing)["info"]["input"]["queryParams"].is_object());
    }

    #[test]
    fn payment_ids_follow_the_extension_rule() {
        let with = |id: Value| json!({"extensions": {"payment-identifier": {"info": {"required": false, "id": id}}}});
        assert_eq!(
            payment_id(&with(json!("pay_0123456789abcdef"))),
            Ok(Some("pay_0123456789abcdef".into()))
        );
        assert_eq!(payment_id(&json!({"x402Version": 2})), Ok(None));
        assert_eq!(
            payment_id(
                &json!({"extensions": {"payment-identifier": {"info": {"required": false}}}})
            ),
            Ok(None)
        );
        assert!(payment_id(&with(json!("short"))).is_err());
        assert!(payment_id(&with(json!("a".repeat(129)))).is_err());
        assert!(payment_id(&with(json!("pay_0123456789abcdef!"))).is_err());
        assert!(payment_id(&with(json!("pay_0123456789abcdéf"))).is_err());
        assert!(payment_id(&with(json!(12345678901234567u64))).is_err());
    }
}
