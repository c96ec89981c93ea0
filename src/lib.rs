//! plangate: deterministic, durable planning for LLM-agent orchestrators.
//!
//! One module per layer; `app` composes them. Layers and their allowed arrows:
//! `docs/architecture.md` (checked by `tests/api/arrows.rs`).

// The release build computes the layout of `app::serve_mcp_stdio`'s future (the MCP
// service with its instrumented tool handlers) past the default query depth of 128.
#![recursion_limit = "256"]

pub mod agents;
pub mod app;
pub mod cli;
pub mod config;
pub mod db;
pub mod domain;
pub mod http;
pub mod jobs;
pub mod mcp;
pub mod service;
pub mod state;
pub mod telemetry;
pub mod ui;
