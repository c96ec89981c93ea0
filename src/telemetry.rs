//! Logging via tracing (human-readable on a terminal, JSON lines otherwise), and
//! traces over OTLP/HTTP when an endpoint is configured (docs/observability.md).
//!
//! Traces off (no endpoint, `OTEL_SDK_DISABLED=true`, `OTEL_TRACES_EXPORTER=none`)
//! installs exactly the logging subscriber of before: no OpenTelemetry layer, and
//! the helpers below return at once on one atomic load. Traces on adds the
//! OpenTelemetry layer, whose spans are those of the logs: the layers name their
//! OpenTelemetry attributes (`otel.name`, `gen_ai.*`, …) as tracing fields left
//! empty, recorded only when [`traces_on`].

use std::collections::HashMap;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, Ordering};

use opentelemetry::propagation::TextMapPropagator;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::util::SubscriberInitExt;

use crate::config::LogFormat;

/// Whether the OpenTelemetry layer is installed in this process.
static TRACES_ON: AtomicBool = AtomicBool::new(false);

/// The one protocol built in (docs/observability.md, "Traces").
const HTTP_PROTOBUF: &str = "http/protobuf";

/// Why traces could not be set up; the server refuses to start.
#[derive(Debug, thiserror::Error)]
pub enum TelemetryError {
    #[error(
        "{name}={value:?} is not supported: plangate exports traces over OTLP/HTTP only; \
         set it to \"http/protobuf\" or unset it (docs/observability.md)"
    )]
    Protocol { name: &'static str, value: String },
    #[error(
        "OTEL_TRACES_EXPORTER={0:?} is not supported: use \"otlp\" or \"none\" (docs/observability.md)"
    )]
    Exporter(String),
    #[error("cannot build the OTLP exporter: {0}")]
    Build(String),
}

/// What the `OTEL_*` variables ask for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TraceSwitch {
    Off,
    /// Export over OTLP/HTTP; the SDK reads the endpoint, headers, timeout and
    /// sampler from the same variables. `service_name` is set when the variables
    /// name none.
    Otlp {
        default_service_name: bool,
    },
}

impl TraceSwitch {
    /// Reads the switch from `lookup` (the environment in [`init`]).
    pub fn from_env(lookup: impl Fn(&str) -> Option<String>) -> Result<Self, TelemetryError> {
        let set = |name: &str| lookup(name).filter(|v| !v.trim().is_empty());
        let endpoint = set("OTEL_EXPORTER_OTLP_ENDPOINT").is_some()
            || set("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT").is_some();
        let disabled =
            set("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true"));
        match set("OTEL_TRACES_EXPORTER").map(|v| v.trim().to_ascii_lowercase()) {
            Some(v) if v == "none" => return Ok(TraceSwitch::Off),
            Some(v) if v != "otlp" && endpoint && !disabled => {
                return Err(TelemetryError::Exporter(v));
            }
            _ => {}
        }
        if !endpoint || disabled {
            return Ok(TraceSwitch::Off);
        }
        // The traces' own variable wins over the general one, as in the SDK.
        for name in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(value) = set(name) {
                if value.trim() != HTTP_PROTOBUF {
                    return Err(TelemetryError::Protocol { name, value });
                }
                break;
            }
        }
        let named = set("OTEL_SERVICE_NAME").is_some()
            || set("OTEL_RESOURCE_ATTRIBUTES").is_some_and(|attrs| {
                attrs
                    .split(',')
                    .any(|kv| kv.trim().starts_with("service.name="))
            });
        Ok(TraceSwitch::Otlp {
            default_service_name: !named,
        })
    }
}

/// Holds the tracer provider while traces are on; [`Telemetry::shutdown`] sends
/// what is still batched (at the end of `serve` and `plangate mcp`).
#[must_use = "dropping it without shutdown loses the last spans"]
pub struct Telemetry {
    provider: Option<SdkTracerProvider>,
}

impl Telemetry {
    /// Flushes the spans still batched and stops the exporter.
    pub fn shutdown(mut self) {
        self.flush();
    }

    fn flush(&mut self) {
        if let Some(provider) = self.provider.take()
            && let Err(e) = provider.shutdown()
        {
            tracing::warn!(error = %e, "flushing the last spans failed");
        }
    }
}

impl Drop for Telemetry {
    fn drop(&mut self) {
        self.flush();
    }
}

/// Install the global subscriber once. `RUST_LOG` refines the default filter.
/// Traces are added when the `OTEL_*` variables ask for them; a protocol other
/// than `http/protobuf` is refused.
pub fn init(format: LogFormat) -> Result<Telemetry, TelemetryError> {
    let switch = TraceSwitch::from_env(|name| std::env::var(name).ok())?;
    match switch {
        TraceSwitch::Off => {
            init_logs_only(format);
            Ok(Telemetry { provider: None })
        }
        TraceSwitch::Otlp {
            default_service_name,
        } => init_with_traces(format, default_service_name),
    }
}

fn log_filter() -> EnvFilter {
    EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,tower_http=info"))
}

/// The subscriber of a process without traces, unchanged by them.
fn init_logs_only(format: LogFormat) {
    let builder = tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .with_writer(std::io::stderr);
    // try_init: a second call (tests, embedding) keeps the first subscriber.
    let _ = match format {
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(true)
            .try_init(),
        // No colour codes when stderr is a file or a pipe.
        LogFormat::Pretty => builder
            .with_ansi(std::io::stderr().is_terminal())
            .try_init(),
    };
}

fn init_with_traces(
    format: LogFormat,
    default_service_name: bool,
) -> Result<Telemetry, TelemetryError> {
    use opentelemetry_otlp::{Protocol, WithExportConfig};
    use tracing_subscriber::Layer as _;

    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .build()
        .map_err(|e| TelemetryError::Build(e.to_string()))?;
    let mut resource = opentelemetry_sdk::Resource::builder();
    if default_service_name {
        resource = resource.with_service_name("plangate");
    }
    // The sampler comes from OTEL_TRACES_SAMPLER(_ARG), read by the SDK's defaults.
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource.build())
        .build();
    let tracer = provider.tracer("plangate");
    // Only plangate's own spans: a library's (sqlx, hyper) would flood the trace.
    let ours =
        tracing_subscriber::filter::Targets::new().with_target("plangate", tracing::Level::INFO);
    let otel = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_location(false)
        .with_threads(false)
        .with_tracked_inactivity(false)
        .with_filter(ours);
    let registry = tracing_subscriber::registry().with(otel);
    let fmt = tracing_subscriber::fmt::layer().with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Json => {
            let json = fmt
                .json()
                .flatten_event(true)
                .with_current_span(true)
                .map_event_format(|inner| TraceIds { inner });
            registry.with(json.with_filter(log_filter())).try_init()
        }
        LogFormat::Pretty => registry
            .with(
                fmt.with_ansi(std::io::stderr().is_terminal())
                    .with_filter(log_filter()),
            )
            .try_init(),
    };
    // A second call (tests, embedding) keeps the first subscriber, and its switch.
    if installed.is_ok() {
        TRACES_ON.store(true, Ordering::Release);
    }
    Ok(Telemetry {
        provider: Some(provider),
    })
}

/// Whether spans go out over OTLP: the adapters record their OpenTelemetry
/// attributes only then.
#[inline]
pub fn traces_on() -> bool {
    TRACES_ON.load(Ordering::Relaxed)
}

/// The W3C `traceparent` of the current span (`00-<trace>-<span>-<flags>`), or
/// `None` when traces are off or the span is not recorded.
pub fn current_traceparent() -> Option<String> {
    if !traces_on() {
        return None;
    }
    traceparent_of(&tracing::Span::current())
}

/// The W3C `traceparent` of `span`, as [`current_traceparent`].
pub fn traceparent_of(span: &tracing::Span) -> Option<String> {
    if !traces_on() {
        return None;
    }
    let cx = span.context();
    let otel = cx.span();
    let sc = otel.span_context();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8()
        )
    })
}

/// Makes `span` (just created, not yet entered) a child of the remote span that
/// `traceparent` (and `tracestate`) name: a caller's headers, or the request
/// stored with a job. A missing or malformed value leaves the span a root.
pub fn follow(span: &tracing::Span, traceparent: Option<&str>, tracestate: Option<&str>) {
    if !traces_on() {
        return;
    }
    let Some(traceparent) = traceparent else {
        return;
    };
    let mut carrier = HashMap::with_capacity(2);
    carrier.insert("traceparent".to_owned(), sampled_flag_only(traceparent));
    if let Some(state) = tracestate {
        carrier.insert("tracestate".to_owned(), state.to_owned());
    }
    let cx = TraceContextPropagator::new().extract(&carrier);
    if cx.span().span_context().is_valid() {
        let _ = span.set_parent(cx);
    }
}

/// `traceparent` with its trace flags cut to `sampled` (01), the one flag a child
/// inherits. W3C Trace Context Level 2 callers (the OpenTelemetry Python SDK among
/// them) also set `random` (02), so send `-03`; opentelemetry_sdk 0.31 refuses any
/// version-00 flags above 02 and the caller's trace would be cut (docs/observability.md,
/// "Seeing a refine job in Phoenix"). Anything not shaped like a traceparent passes
/// unchanged, for the propagator to refuse.
fn sampled_flag_only(traceparent: &str) -> String {
    let trimmed = traceparent.trim();
    if let Some((head, flags)) = trimmed.rsplit_once('-')
        && head.starts_with("00-")
        && flags.len() == 2
        && let Ok(bits) = u8::from_str_radix(flags, 16)
    {
        return format!("{head}-{:02x}", bits & 0x01);
    }
    trimmed.to_owned()
}

/// Sets an attribute whose key is only known at run time (`plangate.violations.<code>`)
/// on `span`, when traces are on.
pub fn set_attribute(span: &tracing::Span, key: String, value: i64) {
    if traces_on() {
        span.set_attribute(key, value);
    }
}

/// The JSON log line with `trace_id` and `span_id` of the span it was written in,
/// when that span is traced (docs/observability.md, "Context in and out").
struct TraceIds<F> {
    inner: F,
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for TraceIds<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let ids = ctx.lookup_current().and_then(|span| {
            let extensions = span.extensions();
            let data = extensions.get::<tracing_opentelemetry::OtelData>()?;
            Some((data.trace_id()?, data.span_id()?))
        });
        let Some((trace_id, span_id)) = ids else {
            return self.inner.format_event(ctx, writer, event);
        };
        let mut line = String::new();
        self.inner.format_event(
            ctx,
            tracing_subscriber::fmt::format::Writer::new(&mut line),
            event,
        )?;
        // The JSON formatter writes one object: the ids go first in it.
        match line.strip_prefix('{') {
            Some(rest) => write!(
                writer,
                "{{\"trace_id\":\"{trace_id}\",\"span_id\":\"{span_id}\",{rest}"
            ),
            None => writer.write_str(&line),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn level_two_flags_keep_the_sampled_bit_only() {
        let id = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331";
        assert_eq!(
            super::sampled_flag_only(&format!("{id}-03")),
            format!("{id}-01")
        );
        assert_eq!(
            super::sampled_flag_only(&format!("{id}-02")),
            format!("{id}-00")
        );
        assert_eq!(
            super::sampled_flag_only(&format!("{id}-01")),
            format!("{id}-01")
        );
        for unchanged in [
            "",
            "garbage",
            "01-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-03",
            "00-x-y-zz",
        ] {
            assert_eq!(super::sampled_flag_only(unchanged), unchanged);
        }
    }

    use super::*;

    fn switch(vars: &[(&str, &str)]) -> Result<TraceSwitch, TelemetryError> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect();
        TraceSwitch::from_env(|name| vars.get(name).cloned())
    }

    #[test]
    fn off_without_an_endpoint() {
        assert_eq!(switch(&[]).unwrap(), TraceSwitch::Off);
        assert_eq!(
            switch(&[
                ("OTEL_SERVICE_NAME", "x"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
            ])
            .unwrap(),
            TraceSwitch::Off,
            "no endpoint: nothing else is looked at"
        );
    }

    #[test]
    fn on_with_either_endpoint_and_a_default_service_name() {
        for name in [
            "OTEL_EXPORTER_OTLP_ENDPOINT",
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        ] {
            assert_eq!(
                switch(&[(name, "http://127.0.0.1:4318")]).unwrap(),
                TraceSwitch::Otlp {
                    default_service_name: true
                }
            );
        }
        let named = switch(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x"),
            ("OTEL_RESOURCE_ATTRIBUTES", "a=b, service.name=mine"),
        ])
        .unwrap();
        assert_eq!(
            named,
            TraceSwitch::Otlp {
                default_service_name: false
            }
        );
    }

    #[test]
    fn disabled_or_exporter_none_wins_over_an_endpoint() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x");
        for off in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_SDK_DISABLED", "TRUE"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            assert_eq!(
                switch(&[endpoint, off]).unwrap(),
                TraceSwitch::Off,
                "{off:?}"
            );
        }
        assert!(matches!(
            switch(&[endpoint, ("OTEL_SDK_DISABLED", "false")]).unwrap(),
            TraceSwitch::Otlp { .. }
        ));
    }

    #[test]
    fn other_protocols_and_exporters_are_refused_by_name() {
        let endpoint = ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://x");
        let e = switch(&[endpoint, ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")]).unwrap_err();
        assert!(
            e.to_string()
                .contains("OTEL_EXPORTER_OTLP_PROTOCOL=\"grpc\""),
            "{e}"
        );
        let e = switch(&[
            endpoint,
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"),
            ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
        ])
        .unwrap_err();
        assert!(
            e.to_string().contains("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL"),
            "{e}"
        );
        assert!(
            switch(&[
                endpoint,
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/protobuf"),
                ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
            ])
            .is_ok(),
            "the traces' own variable wins"
        );
        let e = switch(&[endpoint, ("OTEL_TRACES_EXPORTER", "zipkin")]).unwrap_err();
        assert!(e.to_string().contains("zipkin"), "{e}");
    }
}
