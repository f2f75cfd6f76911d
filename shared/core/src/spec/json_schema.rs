//! The json_schema check: the deliverable's JSON against a draft 2020-12 schema.

use super::{Check, Fields, Problem, ProblemCode, wrong_type};
use crate::json::Value;
use crate::patterns::{self, RegexBudget};

pub(super) fn parse(
    f: &Fields<'_>,
    budget: &mut RegexBudget,
    problems: &mut Vec<Problem>,
) -> Option<Check> {
    let Some(schema) = f.get("schema") else {
        problems.push(Problem::new(
            f.path("schema"),
            ProblemCode::MissingField,
            "json_schema needs a schema",
            "Add \"schema\": a JSON Schema (draft 2020-12) object.",
        ));
        return None;
    };
    if !matches!(schema, Value::Object(_) | Value::Bool(_)) {
        problems.push(wrong_type(
            &f.path("schema"),
            "a JSON Schema object (or boolean)",
            schema,
        ));
        return None;
    }
    let before = problems.len();
    if let Some(Value::String(uri)) = schema.get("$schema")
        && !uri.starts_with("https://json-schema.org/draft/2020-12/schema")
    {
        problems.push(Problem::new(
            f.path("schema.$schema"),
            ProblemCode::InvalidSchema,
            format!("schemas are judged as draft 2020-12, not {uri}"),
            "Remove \"$schema\" or set it to https://json-schema.org/draft/2020-12/schema.",
        ));
    }
    let scan = patterns::scan_schema(schema, &f.path("schema"));
    for (where_, reference) in &scan.refs_into_data {
        problems.push(Problem::new(
            where_.as_str(),
            ProblemCode::InvalidSchema,
            format!("{reference:?} points into data (const, enum, default or examples), which is never a schema"),
            "Point $ref at a schema: move the definition under $defs and refer to it there.",
        ));
    }
    for (where_, pattern) in &scan.patterns {
        if let Err(r) = patterns::check_schema_pattern(pattern, budget) {
            problems.push(Problem::new(where_.as_str(), r.code, r.message, r.hint));
        }
    }
    // Every other rule of the schema, checked on the copy whose patterns are trivial:
    // its own patterns compiled above as jsonschema compiles them, without the
    // prefilter jsonschema would build for each (judging builds them, in the checker).
    if problems.len() == before
        && let Err(e) = crate::eval::compile_schema(&scan.neutralized)
    {
        problems.push(Problem::new(
            f.path("schema"),
            ProblemCode::InvalidSchema,
            format!("the schema does not compile: {e}"),
            "Fix the schema; external $ref targets are never fetched, so inline every definition under $defs.",
        ));
    }
    if problems.len() > before {
        return None;
    }
    Some(Check::JsonSchema {
        schema: schema.clone(),
    })
}
