//! Reading what a call cost from what the agent returned (docs/jobs.md, "Usage,
//! cost and budgets"): the Anthropic Messages `usage`, the OpenAI Chat
//! Completions `usage`, and the JSON envelope `claude -p --output-format json`
//! prints. A field that is absent (or not a number) stays `None`.

use serde_json::Value;

use crate::domain::usage::{L0Usage, UsageSource};

fn count(v: Option<&Value>) -> Option<i64> {
    v.and_then(Value::as_i64).filter(|n| *n >= 0)
}

/// The model the response names, else the profile's.
fn response_model(value: &Value, fallback: &str) -> Option<String> {
    let named = value
        .get("model")
        .and_then(Value::as_str)
        .filter(|m| !m.is_empty());
    Some(named.unwrap_or(fallback).to_owned())
}

/// `usage: {input_tokens, output_tokens, cache_creation_input_tokens,
/// cache_read_input_tokens}` of a Messages response; `None` without a `usage`.
pub(crate) fn anthropic_usage(value: &Value, profile_model: &str) -> Option<L0Usage> {
    let u = value.get("usage").filter(|u| u.is_object())?;
    Some(L0Usage {
        input_tokens: count(u.get("input_tokens")),
        output_tokens: count(u.get("output_tokens")),
        cache_read_input_tokens: count(u.get("cache_read_input_tokens")),
        cache_creation_input_tokens: count(u.get("cache_creation_input_tokens")),
        cost_usd: None,
        model: response_model(value, profile_model),
        source: UsageSource::Reported,
    })
}

/// `usage: {prompt_tokens, completion_tokens, prompt_tokens_details.cached_tokens}`
/// of a Chat Completions response. `prompt_tokens` includes the cached part, so
/// `input_tokens` is the rest (as with Anthropic, where they are separate).
pub(crate) fn openai_usage(value: &Value, profile_model: &str) -> Option<L0Usage> {
    let u = value.get("usage").filter(|u| u.is_object())?;
    let prompt = count(u.get("prompt_tokens"));
    let cached = count(
        u.get("prompt_tokens_details")
            .and_then(|d| d.get("cached_tokens")),
    );
    Some(L0Usage {
        input_tokens: prompt.map(|p| (p - cached.unwrap_or(0)).max(0)),
        output_tokens: count(u.get("completion_tokens")),
        cache_read_input_tokens: cached,
        cache_creation_input_tokens: None,
        cost_usd: None,
        model: response_model(value, profile_model),
        source: UsageSource::Reported,
    })
}

/// A `claude -p --output-format json` result envelope.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Envelope {
    /// The answer text (`result`).
    pub result: String,
    /// `is_error: true`: the agent failed (its `result` says why).
    pub is_error: bool,
    pub usage: L0Usage,
}

/// Parses stdout as a claude-json envelope; `Err` says why it is not one.
pub(crate) fn claude_json(stdout: &str, profile_model: Option<&str>) -> Result<Envelope, String> {
    let value: Value = serde_json::from_str(stdout.trim())
        .map_err(|e| format!("stdout is not a JSON envelope ({e})"))?;
    // `--output-format json` prints one object; `stream-json` ends with one too,
    // but that is not this format.
    if !value.is_object() {
        return Err("stdout is not a JSON object".into());
    }
    if let Some(kind) = value.get("type").and_then(Value::as_str)
        && kind != "result"
    {
        return Err(format!("the envelope's type is {kind:?}, not \"result\""));
    }
    let is_error = value
        .get("is_error")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    let result = match value.get("result") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) if is_error => String::new(),
        _ => return Err("the envelope has no \"result\" string".into()),
    };
    let u = value.get("usage").filter(|u| u.is_object());
    let field = |name: &str| count(u.and_then(|u| u.get(name)));
    let cost_usd = value
        .get("total_cost_usd")
        .or_else(|| value.get("cost_usd"))
        .and_then(Value::as_f64)
        .filter(|c| c.is_finite() && *c >= 0.0);
    // `modelUsage` is keyed by model; more than one model can answer (a small one
    // for side tasks): the label is the one that cost most.
    let model = value
        .get("model")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .or_else(|| {
            let models = value.get("modelUsage")?.as_object()?;
            models
                .iter()
                .max_by(|a, b| {
                    let cost = |v: &Value| v.get("costUSD").and_then(Value::as_f64).unwrap_or(0.0);
                    cost(a.1).total_cmp(&cost(b.1))
                })
                .map(|(m, _)| m.clone())
        })
        .or_else(|| profile_model.map(str::to_owned));
    let usage = L0Usage {
        input_tokens: field("input_tokens"),
        output_tokens: field("output_tokens"),
        cache_read_input_tokens: field("cache_read_input_tokens"),
        cache_creation_input_tokens: field("cache_creation_input_tokens"),
        cost_usd,
        model,
        source: if cost_usd.is_some() || u.is_some() {
            UsageSource::Reported
        } else {
            UsageSource::Unknown
        },
    };
    Ok(Envelope {
        result,
        is_error,
        usage,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn anthropic_usage_fields() {
        let v = json!({"model": "claude-x", "usage": {"input_tokens": 10, "output_tokens": 5,
            "cache_creation_input_tokens": 3, "cache_read_input_tokens": 7}});
        let u = anthropic_usage(&v, "profile").unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_creation_input_tokens,
                u.cache_read_input_tokens
            ),
            (Some(10), Some(5), Some(3), Some(7))
        );
        assert_eq!(u.model.as_deref(), Some("claude-x"));
        assert!(anthropic_usage(&json!({}), "p").is_none());
        let partial = anthropic_usage(&json!({"usage": {"output_tokens": "many"}}), "p").unwrap();
        assert_eq!(partial.output_tokens, None);
        assert_eq!(partial.model.as_deref(), Some("p"));
    }

    #[test]
    fn openai_cached_tokens_are_split_out() {
        let v = json!({"usage": {"prompt_tokens": 100, "completion_tokens": 20,
            "prompt_tokens_details": {"cached_tokens": 30}}});
        let u = openai_usage(&v, "gpt").unwrap();
        assert_eq!(
            (
                u.input_tokens,
                u.output_tokens,
                u.cache_read_input_tokens,
                u.cache_creation_input_tokens
            ),
            (Some(70), Some(20), Some(30), None)
        );
    }

    #[test]
    fn claude_json_envelopes() {
        let e = claude_json(
            r#"{"type":"result","subtype":"success","is_error":false,"result":"hi",
                "total_cost_usd":0.0123,"duration_ms":5,"num_turns":1,
                "usage":{"input_tokens":3,"output_tokens":4,"cache_read_input_tokens":5,"cache_creation_input_tokens":6},
                "modelUsage":{"small":{"costUSD":0.001},"big":{"costUSD":0.01}}}"#,
            None,
        )
        .unwrap();
        assert_eq!(e.result, "hi");
        assert!(!e.is_error);
        assert_eq!(e.usage.cost_usd, Some(0.0123));
        assert_eq!(e.usage.model.as_deref(), Some("big"));
        assert_eq!(e.usage.cache_creation_input_tokens, Some(6));

        let no_cost = claude_json(
            r#"{"type":"result","result":"x","usage":{"input_tokens":1,"output_tokens":2}}"#,
            Some("m"),
        )
        .unwrap();
        assert_eq!(no_cost.usage.cost_usd, None);
        assert_eq!(no_cost.usage.model.as_deref(), Some("m"));
        assert_eq!(no_cost.usage.source, UsageSource::Reported);

        let err =
            claude_json(r#"{"type":"result","is_error":true,"result":"boom"}"#, None).unwrap();
        assert!(err.is_error);
        assert!(claude_json("not json", None).is_err());
        assert!(claude_json("[1]", None).is_err());
        assert!(claude_json(r#"{"type":"assistant","result":"x"}"#, None).is_err());
        assert!(claude_json(r#"{"result": 3}"#, None).is_err());
    }
}
