//! json_path expressions: parsing never panics, and a parsed path resolves against a
//! small document without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use umpire_core::json::parse_str;
use umpire_core::jsonpath::JsonPath;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(path) = JsonPath::parse(text) {
        let doc = parse_str(r#"{"a":[1,{"b":null,"c":"x"}],"d":{"e":{"f":[[],{}]}},"":0}"#)
            .expect("document");
        let _ = path.resolve(&doc);
    }
});
