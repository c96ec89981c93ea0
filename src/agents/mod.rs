//! L0 executors (`command`, `openai`, `anthropic`, `builtin`) that turn a prompt into
//! an answer. They never touch the database. They arrive with the refine-jobs issue.
