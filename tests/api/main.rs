//! The integration tests: one binary (it links once), one module per area. Every
//! test owns its server (port 0), its database (a fresh SQLite file or Postgres
//! database) and its scratch directories, so they run in parallel in one process
//! under `cargo test` as well as one process each under `cargo nextest run`.

#[macro_use]
#[path = "../common/mod.rs"]
mod common;

mod agents;
mod arrows;
mod auth;
mod bounded_answers;
mod claims;
mod claims_at_scale;
mod concurrent_writes;
mod cross_project;
mod dashboard_pages;
mod deploy;
mod gating_props;
mod health_cli;
mod ids;
mod list_events;
mod loop_plan_props;
mod loop_plans;
mod mcp;
mod names;
mod ops;
mod perimeter;
mod query_plans;
mod rate_limits;
mod refine_cli;
mod refine_crash;
mod refine_jobs;
mod refine_runs;
mod scoping;
mod shutdown;
mod stdio_tracks;
mod storable_strings;
mod task_files;
mod task_lists;
mod toolsnaps;
mod traces;
mod tracks;
mod usage;
mod webhooks;
