//! The benchmark workload both benches use: a typical 10-check basic spec and a
//! 200 KB deliverable.

use umpire_core::json::parse_str;
use umpire_core::spec::Deliverable;

pub const TEN_CHECKS: &str = r###"{"checks":[
  {"type":"regex","pattern":"## Conclusion"},
  {"type":"regex","pattern":"\\bdeployed\\b","flags":"i"},
  {"type":"regex","pattern":"TODO","expect":"no_match"},
  {"type":"length","unit":"words","min":500,"max":50000},
  {"type":"length","unit":"chars","max":204800},
  {"type":"content_hash","sha256":"0000000000000000000000000000000000000000000000000000000000000000"},
  {"type":"json_schema","schema":{"type":"object","required":["title","items"],"properties":{"title":{"type":"string"},"items":{"type":"array","items":{"type":"object","properties":{"price":{"type":"number"}}}}}}},
  {"type":"json_path","path":"items[0].price","op":"lte","value":100},
  {"type":"json_path","path":"title","op":"contains","value":"Report"},
  {"type":"json_path","path":"items","op":"exists"}
]}"###;

pub fn deliverable() -> Deliverable {
    let words = "lorem ipsum dolor sit amet consectetur adipiscing elit sed do ";
    let mut text = String::new();
    while text.len() < 200 * 1024 - 40 {
        text.push_str(words);
    }
    text.push_str("\n## Conclusion\nDeployed.");
    Deliverable {
        text: Some(text),
        json: Some(
            parse_str(r#"{"title":"Quarterly Report","items":[{"price":99.5},{"price":12}]}"#)
                .expect("json"),
        ),
    }
}
