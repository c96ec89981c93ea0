//! Durable background jobs (docs/spec/jobs.md): the refine engine ([`engine`]), the worker
//! pool with its claim loop, heartbeat, reaper and retention ([`worker`]), the
//! stored requests and confined paths
//! ([`request`]), result files ([`output`]) and private task-text copies
//! ([`task_files`]), the span of each L0 call ([`l0_span`]) and the webhook
//! delivery worker ([`webhooks`]).

pub mod engine;
pub mod l0_span;
pub mod output;
pub mod request;
pub mod runs;
pub mod task_files;
pub mod webhooks;
pub mod worker;

pub use worker::{JobsHub, start};
