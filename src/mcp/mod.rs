//! MCP adapter (docs/mcp.md): the same use cases as `/v1`, as tools for LLM agent
//! sessions, over Streamable HTTP (`/mcp`, `/mcp/readonly`) and stdio (`plangate
//! mcp`). Thin like `http/`: parse the arguments, call the [`Service`], shape a
//! compact answer; refusals become tool errors carrying the REST problem `code`.
//!
//! The official SDK (`rmcp`) does the protocol. Over HTTP it runs stateless with
//! JSON responses: no session, so any replica answers any request, and a
//! `tools/call` needs no `initialize` before it on its connection.

mod args;
mod http;
mod stdio;
mod tools;

use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, Implementation, InitializeResult, ListToolsResult,
    PaginatedRequestParams, ServerCapabilities, Tool,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer};
use tracing::Instrument;

use crate::config::Settings;
use crate::service::{Caller, Service};

pub use http::router;
pub use stdio::run_stdio;
pub use tools::ToolName;

/// Which tools a connection sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Surface {
    /// All the tools.
    Full,
    /// Only the tools that change nothing (`/mcp/readonly`, `plangate mcp --read-only`).
    ReadOnly,
}

impl Surface {
    fn offers(self, tool: ToolName) -> bool {
        self == Surface::Full || tool.is_read_only()
    }
}

/// Where callers come from, which decides who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    /// Behind the `/v1` bearer middleware, which puts a [`Caller`] on the request.
    Http,
    /// The local user of `plangate mcp`, who owns the database: unrestricted.
    Stdio,
}

/// One MCP server: the service, the tool surface and the transport.
#[derive(Clone)]
pub struct PlangateMcp {
    service: Service,
    surface: Surface,
    transport: Transport,
    /// Longest `refine_status` wait: 60 s, less under an HTTP request timeout.
    max_wait: std::time::Duration,
}

const INSTRUCTIONS: &str = "plangate gates planner task lists (a DAG of tasks with reads/writes) \
and dispatches them in waves, plans track loops and refines plans with L0 agents. Typical flow: \
validate_task_list, create_task_list, then loop ready_tasks / set_task_status (naming each task \
by its task_id with the task_list_id, or by its server `id`) until project_status shows nothing \
left. Errors are tool errors whose JSON \
carries a stable `code`.";

impl PlangateMcp {
    fn new(service: Service, surface: Surface, transport: Transport, settings: &Settings) -> Self {
        let cap = tools::MAX_WAIT;
        let max_wait = match transport {
            // Leave a second for the answer before the request timeout (408) hits.
            Transport::Http => cap.min(
                settings
                    .request_timeout
                    .saturating_sub(std::time::Duration::from_secs(1)),
            ),
            Transport::Stdio => cap,
        };
        PlangateMcp {
            service,
            surface,
            transport,
            max_wait,
        }
    }

    fn caller(&self, context: &RequestContext<RoleServer>) -> Result<Caller, ErrorData> {
        match self.transport {
            Transport::Stdio => Ok(Caller::unrestricted()),
            Transport::Http => context
                .extensions
                .get::<axum::http::request::Parts>()
                .and_then(|parts| parts.extensions.get::<Caller>())
                .cloned()
                .ok_or_else(|| {
                    tracing::error!(
                        "no Caller on an MCP request: the auth middleware is not installed"
                    );
                    ErrorData::internal_error("internal error; see the server log", None)
                }),
        }
    }

    /// A write tool called on the read-only surface: say so, and where writes go.
    fn read_only_refusal(&self, tool: ToolName) -> ErrorData {
        let (endpoint, writes_go_to) = match self.transport {
            Transport::Http => ("/mcp/readonly is a read-only endpoint", "/mcp"),
            Transport::Stdio => (
                "this server runs read-only (plangate mcp --read-only)",
                "plangate mcp (without --read-only)",
            ),
        };
        ErrorData::invalid_params(
            format!(
                "{tool} changes data, and {endpoint}: call {tool} on {writes_go_to}",
                tool = tool.as_str()
            ),
            Some(serde_json::json!({
                "code": "read_only_endpoint",
                "tool": tool.as_str(),
                "writes_go_to": writes_go_to,
            })),
        )
    }

    fn tools(&self) -> Vec<Tool> {
        ToolName::ALL
            .into_iter()
            .filter(|tool| self.surface.offers(*tool))
            .map(ToolName::describe)
            .collect()
    }
}

impl ServerHandler for PlangateMcp {
    fn get_info(&self) -> InitializeResult {
        InitializeResult::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("plangate", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, ErrorData> {
        Ok(ListToolsResult::with_all_items(self.tools()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        // An unknown tool is a protocol error (invalid params), as the MCP spec says;
        // so is a tool the read-only surface hides, but one that says where it is.
        let tool = ToolName::parse(&request.name).ok_or_else(|| {
            ErrorData::invalid_params(format!("unknown tool: {}", request.name), None)
        })?;
        if !self.surface.offers(tool) {
            return Err(self.read_only_refusal(tool));
        }
        let caller = self.caller(&context)?;
        let arguments = request.arguments.unwrap_or_default();
        let span = tool_span(tool, &context);
        let result = tools::call(&self.service, &caller, tool, arguments, self.max_wait)
            .instrument(span.clone())
            .await;
        if result.is_error == Some(true) && crate::telemetry::traces_on() {
            span.record("otel.status_code", "ERROR");
        }
        Ok(result.into())
    }
}

/// The `traceparent` of the HTTP request an MCP message came in, put on the
/// request by `http.rs` when traces are on.
#[derive(Debug, Clone)]
struct RequestTrace(String);

/// The span of one tool call (docs/observability.md): only when traces are on, a
/// child of the `/mcp` request's span (the current one, or the one the request
/// carries when the SDK runs the call elsewhere).
fn tool_span(tool: ToolName, context: &RequestContext<RoleServer>) -> tracing::Span {
    if !crate::telemetry::traces_on() {
        return tracing::Span::none();
    }
    let span = tracing::info_span!(
        "mcp_tool_call",
        otel.name = format!("tools/call {}", tool.as_str()),
        otel.status_code = tracing::field::Empty,
        gen_ai.tool.name = tool.as_str(),
        mcp.method.name = "tools/call",
        plangate.project_id = tracing::field::Empty,
    );
    let carried = context
        .extensions
        .get::<axum::http::request::Parts>()
        .and_then(|parts| parts.extensions.get::<RequestTrace>());
    if let Some(RequestTrace(traceparent)) = carried {
        crate::telemetry::follow(&span, Some(traceparent), None);
    }
    span
}
