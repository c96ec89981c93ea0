//! The span of one L0 call, after the OpenTelemetry GenAI semantic conventions
//! (`gen_ai.*`) and the OpenInference attributes Phoenix shows LLM spans by
//! (`openinference.span.kind`, `llm.*`); docs/observability.md has the table.
//! Made only when traces are on: without them an L0 gets `Span::none()`.

use crate::agents::{Cancelled, Executor, L0Run};
use crate::domain::job::L0State;
use crate::domain::refine::{L0Outcome, classify};
use crate::telemetry;

/// A child of the current span (the job's), entered by the executor's run: the
/// `traceparent` an executor sends is this span's.
pub fn l0_span(executor: &Executor, assignment_id: &str, attempt: i32) -> tracing::Span {
    if !telemetry::traces_on() {
        return tracing::Span::none();
    }
    let kind = executor.kind().as_str();
    let span = tracing::info_span!(
        "l0",
        assignment_id,
        otel.name = tracing::field::Empty,
        otel.kind = "client",
        otel.status_code = tracing::field::Empty,
        gen_ai.operation.name = "chat",
        gen_ai.provider.name = kind,
        gen_ai.system = kind,
        gen_ai.request.model = tracing::field::Empty,
        gen_ai.response.model = tracing::field::Empty,
        gen_ai.usage.input_tokens = tracing::field::Empty,
        gen_ai.usage.output_tokens = tracing::field::Empty,
        plangate.cost_usd = tracing::field::Empty,
        plangate.attempt = attempt,
        plangate.l0.outcome = tracing::field::Empty,
        plangate.l0.exit_code = tracing::field::Empty,
        openinference.span.kind = "LLM",
        llm.model_name = tracing::field::Empty,
        llm.token_count.prompt = tracing::field::Empty,
        llm.token_count.completion = tracing::field::Empty,
        llm.token_count.total = tracing::field::Empty,
    );
    if let Some(model) = executor.model() {
        span.record("otel.name", format!("chat {model}"));
        span.record("gen_ai.request.model", model);
        span.record("llm.model_name", model);
    }
    span
}

/// What the call came to, on its span: the model that answered, tokens, cost,
/// the judged outcome (as the job records it) and a command's exit code.
pub fn record_l0(
    span: &tracing::Span,
    executor: &Executor,
    assignment_id: &str,
    run: &Result<L0Run, Cancelled>,
) {
    if !telemetry::traces_on() {
        return;
    }
    let run = match run {
        Ok(run) => run,
        Err(Cancelled) => {
            span.record("plangate.l0.outcome", L0State::Cancelled.as_str());
            return;
        }
    };
    let usage = &run.usage;
    let model = usage.model.as_deref().or(executor.model());
    match model {
        Some(model) => {
            if executor.model().is_none() {
                span.record("otel.name", format!("chat {model}"));
            }
            span.record("llm.model_name", model);
        }
        None => {
            span.record("otel.name", format!("chat {}", executor.kind()));
        }
    }
    if let Some(model) = &usage.model {
        span.record("gen_ai.response.model", model.as_str());
    }
    if let Some(n) = usage.input_tokens {
        span.record("gen_ai.usage.input_tokens", n);
        span.record("llm.token_count.prompt", n);
    }
    if let Some(n) = usage.output_tokens {
        span.record("gen_ai.usage.output_tokens", n);
        span.record("llm.token_count.completion", n);
    }
    if let (Some(i), Some(o)) = (usage.input_tokens, usage.output_tokens) {
        span.record("llm.token_count.total", i.saturating_add(o));
    }
    if let Some(cost) = usage.cost_usd {
        span.record("plangate.cost_usd", cost);
    }
    if let Some(code) = run.exit_code {
        span.record("plangate.l0.exit_code", code);
    }
    let status = classify(assignment_id, &run.outcome).status();
    span.record("plangate.l0.outcome", status.as_str());
    if matches!(run.outcome, L0Outcome::Failed(_)) {
        span.record("otel.status_code", "ERROR");
    }
}
