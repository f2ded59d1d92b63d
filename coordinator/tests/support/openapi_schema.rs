//! Checks a JSON value against the subset of OpenAPI 3.1 schemas the
//! generated document uses: `$ref`, `allOf` (serde's `flatten`), `oneOf`
//! (enums, and `null` beside a `$ref` for an `Option`), `enum`, `type` as a
//! name or a list (`["integer", "null"]`), `required`, `properties`,
//! `additionalProperties` and `items`.

use serde_json::{json, Value};

/// The schema `schema` points to, following `$ref`s.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema.get("$ref").and_then(Value::as_str) {
        Some(r) => {
            let name = r.strip_prefix("#/components/schemas/").unwrap();
            let target = &doc["components"]["schemas"][name];
            assert!(target.is_object(), "dangling $ref {r}");
            resolve(doc, target)
        }
        None => schema,
    }
}

/// The type names a schema allows; empty: any.
fn types(schema: &Value) -> Vec<&str> {
    match &schema["type"] {
        Value::String(t) => vec![t.as_str()],
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).collect(),
        _ => Vec::new(),
    }
}

fn is_of(v: &Value, t: &str) -> bool {
    match t {
        "object" => v.is_object(),
        "array" => v.is_array(),
        "string" => v.is_string(),
        "integer" => v.is_u64() || v.is_i64(),
        "number" => v.is_number(),
        "boolean" => v.is_boolean(),
        "null" => v.is_null(),
        _ => true,
    }
}

/// One object schema with the properties and requirements of `allOf`'s parts.
fn merged(doc: &Value, parts: &[Value]) -> Value {
    let mut out = json!({"type": "object", "properties": {}, "required": []});
    for part in parts {
        let part = resolve(doc, part);
        for (k, p) in part["properties"].as_object().into_iter().flatten() {
            out["properties"][k] = p.clone();
        }
        for r in part["required"].as_array().into_iter().flatten() {
            out["required"].as_array_mut().unwrap().push(r.clone());
        }
    }
    out
}

/// Checks `v` against `schema`; pushes what does not match, with where.
pub fn check(doc: &Value, schema: &Value, v: &Value, at: &str, problems: &mut Vec<String>) {
    let schema = resolve(doc, schema);
    if let Some(all) = schema.get("allOf").and_then(Value::as_array) {
        return check(doc, &merged(doc, all), v, at, problems);
    }
    if let Some(any) = schema.get("oneOf").and_then(Value::as_array) {
        let fits = any.iter().any(|s| {
            let mut p = Vec::new();
            check(doc, s, v, at, &mut p);
            p.is_empty()
        });
        if !fits {
            problems.push(format!("{at}: {v} matches none of oneOf"));
        }
        return;
    }
    if let Some(values) = schema.get("enum").and_then(Value::as_array) {
        if !values.contains(v) {
            problems.push(format!("{at}: {v} not in {values:?}"));
        }
    }
    let allowed = types(schema);
    if !allowed.is_empty() && !allowed.iter().any(|t| is_of(v, t)) {
        problems.push(format!("{at}: {v} is not of type {allowed:?}"));
        return;
    }
    if let Some(obj) = v.as_object() {
        for r in schema["required"].as_array().into_iter().flatten() {
            let r = r.as_str().unwrap();
            if !obj.contains_key(r) {
                problems.push(format!("{at}: required field {r:?} missing"));
            }
        }
        let props = schema["properties"].as_object();
        for (k, x) in obj {
            let at = format!("{at}.{k}");
            match (
                props.and_then(|p| p.get(k)),
                &schema["additionalProperties"],
            ) {
                (Some(s), _) => check(doc, s, x, &at, problems),
                (None, s) if s.is_object() => check(doc, s, x, &at, problems),
                (None, _) if props.is_some() => {
                    problems.push(format!("{at}: field is not documented"))
                }
                (None, _) => {}
            }
        }
    }
    if let Some(items) = v.as_array() {
        for (i, x) in items.iter().enumerate() {
            check(doc, &schema["items"], x, &format!("{at}[{i}]"), problems);
        }
    }
}
