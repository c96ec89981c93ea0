//! Durable background jobs (jobs.md): claim, lease, fencing, heartbeat, reaper and
//! resume. The refine engine lands here with the refine-jobs issue; nothing in the
//! server depends on it yet.
