//! Argument checks against a tool's input schema, before the engine runs: names the schema
//! does not allow (when it is closed with `additionalProperties: false`) and values of the
//! wrong JSON type are refused, so a server never sees an argument the policy did not judge.
//!
//! Pure. Deliberately shallow: top-level properties and their `type` only; deeper schema
//! features (`anyOf`, `enum`, nested objects) are the server's business.

use serde_json::{Map, Value};

/// Why the arguments do not fit the schema (the engine's `structural-invalid-arguments`
/// reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgumentError {
    #[error("unknown argument {0:?} (the tool's schema allows no others)")]
    Unknown(String),
    #[error("argument {name:?} should be of type {schema_type}, got {got}")]
    WrongType {
        name: String,
        /// The schema's `type`, as JSON (`"string"`, `["string","null"]`).
        schema_type: String,
        got: &'static str,
    },
}

/// Returns why the arguments do not fit the schema, or `Ok` when they do (or no schema).
pub fn check_arguments(
    schema: Option<&Value>,
    args: &Map<String, Value>,
) -> Result<(), ArgumentError> {
    let Some(schema) = schema else { return Ok(()) };
    let props = schema.get("properties").and_then(Value::as_object);
    let closed = schema.get("additionalProperties") == Some(&Value::Bool(false));
    for (name, value) in args {
        match props.and_then(|p| p.get(name)) {
            None if closed => return Err(ArgumentError::Unknown(name.clone())),
            None => {}
            Some(prop) => {
                if let Some(t) = prop.get("type") {
                    if !type_fits(t, value) {
                        return Err(ArgumentError::WrongType {
                            name: name.clone(),
                            schema_type: t.to_string(),
                            got: kind(value),
                        });
                    }
                }
            }
        }
    }
    Ok(())
}

fn type_fits(t: &Value, v: &Value) -> bool {
    match t {
        Value::String(s) => one_fits(s, v),
        Value::Array(ts) => ts.iter().filter_map(Value::as_str).any(|s| one_fits(s, v)),
        // An odd schema is not ours to enforce.
        _ => true,
    }
}

fn one_fits(t: &str, v: &Value) -> bool {
    match t {
        "string" => v.is_string(),
        "number" => v.is_number(),
        "integer" => v.is_i64() || v.is_u64() || v.as_f64().is_some_and(|f| f.fract() == 0.0),
        "boolean" => v.is_boolean(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        "null" => v.is_null(),
        _ => true,
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(v: Value) -> Map<String, Value> {
        v.as_object().unwrap().clone()
    }

    #[test]
    fn closed_schema_refuses_unknown_names_open_schema_does_not() {
        let closed = json!({"type":"object","properties":{"path":{"type":"string"}},"additionalProperties":false});
        let open = json!({"type":"object","properties":{"path":{"type":"string"}}});
        let a = args(json!({"path":"/x","pathz":"/etc"}));
        assert!(check_arguments(Some(&closed), &a)
            .unwrap_err()
            .to_string()
            .contains("pathz"));
        assert!(check_arguments(Some(&open), &a).is_ok());
    }

    #[test]
    fn wrong_types_are_refused() {
        let s = json!({"properties":{"path":{"type":"string"},"n":{"type":"integer"},"m":{"type":["number","null"]}}});
        assert!(check_arguments(Some(&s), &args(json!({"path":["/a"]}))).is_err());
        assert!(check_arguments(Some(&s), &args(json!({"n":1.5}))).is_err());
        assert!(check_arguments(Some(&s), &args(json!({"n":2,"m":null,"path":"/a"}))).is_ok());
        assert!(check_arguments(None, &args(json!({"anything":1}))).is_ok());
    }
}
