//! plangate: deterministic, durable planning for LLM-agent orchestrators.
//!
//! One module per layer; `app` composes them. Layers and their allowed arrows:
//! `docs/architecture.md` (checked by `tests/api/arrows.rs`).

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
pub mod telemetry;
pub mod ui;
pub mod web;
