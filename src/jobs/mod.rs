//! Durable background jobs (docs/spec/jobs.md): the refine engine ([`engine`]), the worker
//! pool with its claim loop, heartbeat, reaper and retention ([`worker`]), the
//! stored requests and confined paths
//! ([`request`]) and result files ([`output`]).

pub mod engine;
pub mod output;
pub mod request;
pub mod runs;
pub mod worker;

pub use worker::{JobsHub, start};
