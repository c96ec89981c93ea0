//! Use cases, transport-neutral: typed input and the caller's project scope in,
//! typed output or one error out. Adapters (`http`, `mcp`, `ui`) call these.

pub mod dashboard;
