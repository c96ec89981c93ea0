//! Pure rules of the seeds: no I/O, no HTTP, no database. Shared by CLI and server.

pub mod dispatch;
