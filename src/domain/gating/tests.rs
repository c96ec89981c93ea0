//! Gate-by-gate tests: each code has a failing and a passing case.

use serde_json::{Value, json};

use super::*;
use crate::domain::assert_contains;

/// A well-formed task; tests override fields with `with`.
fn task(id: &str, group: i64, depends_on: &[&str]) -> Value {
    json!({
        "task_id": id,
        "assigned_persona": format!("persona-{id}"),
        "parallel_group": group,
        "depends_on": depends_on,
        "reads": [],
        "writes": [],
        "description": format!("Do {id}."),
    })
}

fn with(mut task: Value, field: &str, value: Value) -> Value {
    if let Some(object) = task.as_object_mut() {
        object.insert(field.to_owned(), value);
    }
    task
}

fn without(mut task: Value, field: &str) -> Value {
    if let Some(object) = task.as_object_mut() {
        object.shift_remove(field);
    }
    task
}

fn check(tasks: &[Value]) -> Validation {
    check_with_files(tasks, &[])
}

fn check_with_files(tasks: &[Value], existing: &[&str]) -> Validation {
    let list = Value::Array(tasks.to_vec());
    let existing: Vec<String> = existing.iter().map(|path| path.to_string()).collect();
    let from_value = validate(TaskListSource::Tasks(&list), &existing);
    // The streaming text path must agree with the `Value` path on every input.
    let from_text = validate(TaskListSource::Json(&list.to_string()), &existing);
    assert_eq!(from_value, from_text, "Value and text paths disagree");
    from_value
}

fn codes(validation: &Validation) -> Vec<Code> {
    validation.errors.iter().map(|error| error.code).collect()
}

fn only_error(validation: &Validation) -> &Violation {
    assert_eq!(validation.errors.len(), 1, "{:#?}", validation.errors);
    &validation.errors[0]
}

fn assert_valid(validation: &Validation) {
    assert!(validation.is_valid(), "{:#?}", validation.errors);
    assert_eq!(validation.outcome, Outcome::Valid);
}

const EXAMPLE_PLANNER_OUTPUT: &str = r#"Here is the task list. I first drafted it without reviewers:

```json
[{"task_id": "t-1", "assigned_persona": "backend-engineer-1", "parallel_group": 1, "depends_on": [], "reads": [], "writes": ["src/auth/cache.py"], "description": "draft"}]
```

Final version (this one wins, it is the last json block):

```json
[
  {"task_id": "t-1", "assigned_persona": "backend-engineer-1", "parallel_group": 1, "depends_on": [], "reads": ["src/http/client.py"], "writes": ["src/auth/cache.py"], "description": "Implement the per-tenant token cache."},
  {"task_id": "t-2", "assigned_persona": "backend-engineer-2", "parallel_group": 1, "depends_on": [], "reads": [], "writes": ["src/http/retry.py"], "description": "Implement retry middleware."},
  {"task_id": "t-3", "assigned_persona": "backend-engineer-1", "parallel_group": 2, "depends_on": ["t-1", "t-2"], "reads": ["src/auth/cache.py", "src/http/retry.py"], "writes": ["src/http/client.py"], "description": "Wire cache and retries into the client."},
  {"task_id": "t-4", "assigned_persona": "code-reviewer-1", "parallel_group": 3, "depends_on": ["t-3"], "reviews": "t-3", "reads": ["src/http/client.py"], "writes": [], "description": "Review the client wiring."}
]
```

```python
# a usage sketch the planner added; not part of the list
client.get("/tenants")
```
"#;

fn example_existing_files() -> Vec<String> {
    ["src/http/client.py", "src/tenancy/model.py", "README.md"]
        .map(String::from)
        .to_vec()
}

// ---- §1 input and §2 synthesis failures -------------------------------------------

#[test]
fn example_planner_output_is_valid_and_last_json_block_wins_over_python() {
    let validation = validate(
        TaskListSource::PlannerOutput(EXAMPLE_PLANNER_OUTPUT),
        &example_existing_files(),
    );
    assert_valid(&validation);
    assert_eq!(validation.tasks.len(), 4);
    assert_eq!(
        validation.waves,
        vec![vec!["t-1", "t-2"], vec!["t-3"], vec!["t-4"]]
    );
    assert_eq!(validation.tasks[3].reviews.as_deref(), Some("t-3"));
    assert!(validation.warnings.is_empty());
    assert_eq!(validation.reprompt(), "");
}

#[test]
fn without_existing_files_the_example_fails_exactly_one_read() {
    let validation = validate(TaskListSource::PlannerOutput(EXAMPLE_PLANNER_OUTPUT), &[]);
    let error = only_error(&validation);
    assert_eq!(error.code, Code::UnsatisfiedRead);
    assert_eq!(error.path.as_deref(), Some("src/http/client.py"));
    assert_eq!(error.task_ids, ["t-1"]);
    // The same-path writer t-3 is in a later wave, so it does not satisfy the read.
    assert_contains(&error.message, "'t-3' is in parallel_group 2");
}

fn synthesis_message(source: TaskListSource<'_>) -> String {
    let validation = validate(source, &[]);
    assert_eq!(validation.outcome, Outcome::SynthesisFailure);
    assert!(validation.waves.is_empty() && validation.tasks.is_empty());
    let error = only_error(&validation);
    assert_eq!(error.code, Code::SynthesisFailure);
    error.message.clone()
}

#[test]
fn synthesis_failure_messages_keep_the_spec_wording() {
    for (source, message) in [
        (
            TaskListSource::PlannerOutput(""),
            "synthesis produced empty output",
        ),
        (
            TaskListSource::PlannerOutput(" \r\n "),
            "synthesis produced empty output",
        ),
        (
            TaskListSource::PlannerOutput("[{\"task_id\": }]"),
            "synthesis output is not valid JSON: expected value at line 1 column 14",
        ),
        (
            TaskListSource::Json("[1] x"),
            "synthesis output is not valid JSON: trailing characters at line 1 column 5",
        ),
    ] {
        assert_eq!(synthesis_message(source), message);
    }
    for (value, json_type) in [
        (json!({"tasks": []}), "object"),
        (json!("t-1"), "string"),
        (json!(3), "number"),
        (json!(null), "null"),
        (json!(false), "boolean"),
        (json!([]), "empty array"),
    ] {
        let message = format!("synthesis output is not a non-empty task list (got {json_type})");
        assert_eq!(synthesis_message(TaskListSource::Tasks(&value)), message);
        let text = value.to_string();
        assert_eq!(synthesis_message(TaskListSource::Json(&text)), message);
    }
}

#[test]
fn non_object_entry_names_its_index() {
    let list = json!([task("t-1", 1, &[]), "t-2", 3]);
    let validation = validate(TaskListSource::Tasks(&list), &[]);
    let error = only_error(&validation);
    assert_eq!(
        error.message,
        "synthesis task list contains a non-object entry (index 1: got string 't-2')"
    );
    assert_eq!(error.index, Some(1));
    assert_eq!(validation.outcome, Outcome::SynthesisFailure);
}

#[test]
fn deep_nesting_neither_overflows_the_stack_nor_is_kept() {
    // serde_json skips unused values without recursion, so a deeply nested entry is
    // simply a non-object entry...
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    assert_eq!(
        synthesis_message(TaskListSource::PlannerOutput(&deep)),
        "synthesis task list contains a non-object entry (index 0: got an array)"
    );
    // ...while a value that is kept (an unknown field) hits the recursion limit.
    let deep_field = format!(
        "[{{\"task_id\": \"t\", \"x\": {}{}}}]",
        "[".repeat(10_000),
        "]".repeat(10_000)
    );
    let message = synthesis_message(TaskListSource::Json(&deep_field));
    assert!(
        message
            .starts_with("synthesis output is not valid JSON: recursion limit exceeded at line 1"),
        "{message}"
    );
}

#[test]
fn planner_output_without_fence_is_parsed_whole_and_crlf_fences_work() {
    let list = Value::Array(vec![task("t-1", 1, &[])]).to_string();
    assert_valid(&validate(TaskListSource::PlannerOutput(&list), &[]));
    let crlf = format!("Plan:\r\n~~~ JSON extra words\r\n{list}\r\n~~~\r\n");
    assert_valid(&validate(TaskListSource::PlannerOutput(&crlf), &[]));
}

// ---- gate 0: shapes --------------------------------------------------------------------

#[test]
fn missing_task_id_is_reported_not_a_crash_and_other_gates_still_run() {
    let validation = check(&[
        without(task("t-1", 1, &[]), "task_id"),
        task("t-2", 1, &["t-9"]),
    ]);
    assert_eq!(
        codes(&validation),
        [Code::MissingField, Code::OrphanDependency]
    );
    let error = &validation.errors[0];
    assert_eq!(
        error.message,
        "TaskShapeError: task at index 0 is missing required field 'task_id'; add it as a \
         non-empty string of at most 256 bytes without control characters"
    );
    assert_eq!(
        (error.index, error.field.as_deref()),
        (Some(0), Some("task_id"))
    );
    assert!(error.task_ids.is_empty());
    // The malformed task is left out of `tasks` and `waves`.
    assert_eq!(validation.tasks.len(), 1);
    assert_eq!(validation.waves, vec![vec!["t-2"]]);
}

#[test]
fn task_id_of_every_wrong_json_type_is_invalid_field() {
    for (value, found) in [
        (json!(7), "number 7"),
        (json!(null), "null"),
        (json!(true), "boolean true"),
        (json!(["t-1"]), "an array"),
        (json!({"id": "t-1"}), "an object"),
        (json!(""), "an empty string"),
    ] {
        let validation = check(&[with(task("t-1", 1, &[]), "task_id", value)]);
        let error = only_error(&validation);
        assert_eq!(error.code, Code::InvalidField);
        assert_eq!(
            error.message,
            format!(
                "TaskShapeError: task at index 0 has an invalid 'task_id': expected a non-empty \
                 string of at most 256 bytes without control characters, got {found}"
            )
        );
    }
}

#[test]
fn ids_with_nul_or_control_characters_are_invalid_and_shown_escaped() {
    let validation = check(&[task("a\0b", 1, &[]), task("c\u{1b}[31m", 1, &[])]);
    assert_eq!(codes(&validation), [Code::InvalidField, Code::InvalidField]);
    let message = &validation.errors[0].message;
    assert!(
        message.ends_with("got string 'a\\x00b', which contains control characters"),
        "{message}"
    );
    assert!(validation.errors[1].message.contains("'c\\x1b[31m'"));
    for error in &validation.errors {
        assert!(
            !error.message.chars().any(char::is_control),
            "{:?}",
            error.message
        );
    }
    assert!(!validation.reprompt().trim_end().contains('\0'));
}

#[test]
fn a_ten_kilobyte_id_is_invalid_and_not_echoed_in_full() {
    let huge = "x".repeat(10 * 1024);
    let validation = check(&[task(&huge, 1, &[]), task("t-2", 1, &[&huge])]);
    assert_eq!(codes(&validation), [Code::InvalidField, Code::InvalidField]);
    for error in &validation.errors {
        assert!(error.message.len() < 700, "{}", error.message.len());
        assert_contains(&error.message, "(10240 bytes), longer than 256 bytes");
    }
    assert_eq!(validation.errors[1].field.as_deref(), Some("depends_on"));
    // 256 bytes is still fine.
    assert_valid(&check(&[task(&"y".repeat(256), 1, &[])]));
}

#[test]
fn assigned_persona_and_description_rules() {
    let cases = [
        (
            without(task("t", 1, &[]), "assigned_persona"),
            Code::MissingField,
            "assigned_persona",
        ),
        (
            with(task("t", 1, &[]), "assigned_persona", json!("")),
            Code::InvalidField,
            "assigned_persona",
        ),
        (
            with(task("t", 1, &[]), "assigned_persona", json!(3)),
            Code::InvalidField,
            "assigned_persona",
        ),
        (
            without(task("t", 1, &[]), "description"),
            Code::MissingField,
            "description",
        ),
        (
            with(task("t", 1, &[]), "description", json!(null)),
            Code::InvalidField,
            "description",
        ),
        (
            with(task("t", 1, &[]), "description", json!(["x"])),
            Code::InvalidField,
            "description",
        ),
    ];
    for (bad_task, code, field) in cases {
        let validation = check(&[bad_task]);
        let error = only_error(&validation);
        assert_eq!((error.code, error.field.as_deref()), (code, Some(field)));
        assert_eq!(error.task_ids, ["t"]);
        assert!(
            error
                .message
                .starts_with("TaskShapeError: task 't' (index 0) "),
            "{}",
            error.message
        );
    }
    // An empty description is allowed.
    assert_valid(&check(&[with(task("t", 1, &[]), "description", json!(""))]));
}

#[test]
fn every_wrong_json_type_in_every_field_is_reported_with_what_was_found() {
    let wrong_values = [
        (json!(null), "null"),
        (json!(false), "boolean false"),
        (json!(12), "number 12"),
        (json!(-0.5), "number -0.5"),
        (json!("s"), "string 's'"),
        (json!(["s"]), "an array"),
        (json!({"k": "v"}), "an object"),
    ];
    let string_fields = ["task_id", "assigned_persona", "description"];
    let list_fields = ["depends_on", "reads", "writes"];
    for field in string_fields.iter().chain(&list_fields) {
        for (value, found) in &wrong_values {
            let is_list = list_fields.contains(field);
            let accepted = (is_list && value.is_array()) || (!is_list && value.is_string());
            let validation = check(&[with(task("t", 1, &[]), field, value.clone())]);
            if accepted {
                // The list ["s"] has an orphan dependency or an unsatisfied read; the
                // string "s" renames the task: either way no shape error.
                assert!(
                    validation
                        .errors
                        .iter()
                        .all(|e| e.field.as_deref() != Some(*field)
                            || !matches!(e.code, Code::InvalidField | Code::MissingField)),
                    "{field} = {value}: {:#?}",
                    validation.errors
                );
                continue;
            }
            let error = only_error(&validation);
            assert_eq!(error.code, Code::InvalidField, "{field} = {value}");
            assert_eq!(error.field.as_deref(), Some(*field));
            assert!(
                error.message.ends_with(&format!("got {found}")),
                "{}",
                error.message
            );
        }
    }
    // `reviews` has its own gate: every non-string (but null) is invalid_reviews.
    for (value, found) in &wrong_values[1..] {
        if value.is_string() {
            continue;
        }
        let validation = check(&[
            task("impl", 1, &[]),
            with(task("t", 2, &["impl"]), "reviews", value.clone()),
        ]);
        let error = only_error(&validation);
        assert_eq!(error.code, Code::InvalidReviews, "{value}");
        assert_contains(&error.message, &format!("(got {found})"));
    }
}

#[test]
fn list_fields_must_be_arrays_of_strings() {
    for field in ["depends_on", "reads", "writes"] {
        for (value, found) in [
            (json!("a"), "got string 'a'".to_owned()),
            (json!(null), "got null".to_owned()),
            (json!({"a": 1}), "got an object".to_owned()),
            (
                json!(["a", 1, null]),
                "got number 1 at position 1 (and 1 more invalid entries)".to_owned(),
            ),
            (json!([["a"]]), "got an array at position 0".to_owned()),
        ] {
            let validation = check(&[with(task("t", 1, &[]), field, value)]);
            let error = only_error(&validation);
            assert_eq!(error.code, Code::InvalidField);
            assert_eq!(error.field.as_deref(), Some(field));
            assert!(
                error.message.ends_with(&found),
                "{field}: {}",
                error.message
            );
        }
        // Absent means empty.
        assert_valid(&check(&[without(task("t", 1, &[]), field)]));
    }
    // An empty string where an id is required is invalid_field.
    let validation = check(&[task("t", 1, &[""])]);
    assert!(
        only_error(&validation)
            .message
            .ends_with("got an empty string at position 0")
    );
}

#[test]
fn parallel_group_must_be_an_integer_of_at_least_one() {
    let cases = [
        (
            Some(json!(null)),
            "task 't' has null parallel_group; every task must declare an integer wave (>= 1)",
        ),
        (
            None,
            "task 't' has no parallel_group; every task must declare an integer wave (>= 1)",
        ),
        (
            Some(json!(0)),
            "task 't' parallel_group must be an int >= 1, got 0",
        ),
        (
            Some(json!(-1)),
            "task 't' parallel_group must be an int >= 1, got -1",
        ),
        (
            Some(json!(true)),
            "task 't' parallel_group must be an int >= 1, got true",
        ),
        (
            Some(json!(1.5)),
            "task 't' parallel_group must be an int >= 1, got 1.5",
        ),
        (
            Some(json!(2.0)),
            "task 't' parallel_group must be an int >= 1, got 2.0",
        ),
        (
            Some(json!("2")),
            "task 't' parallel_group must be an int >= 1, got '2'",
        ),
        (
            Some(json!([2])),
            "task 't' parallel_group must be an int >= 1, got an array",
        ),
        (
            Some(json!(u64::MAX)),
            "task 't' parallel_group must be an int >= 1, got 18446744073709551615",
        ),
    ];
    for (value, expected) in cases {
        let bad = match value {
            Some(value) => with(task("t", 1, &[]), "parallel_group", value),
            None => without(task("t", 1, &[]), "parallel_group"),
        };
        let validation = check(&[bad]);
        let error = only_error(&validation);
        assert_eq!(error.code, Code::InvalidParallelGroup);
        assert_eq!(error.message, format!("PlannerDagInvalid: {expected}"));
        assert_eq!(
            (error.index, error.field.as_deref()),
            (Some(0), Some("parallel_group"))
        );
        assert!(validation.waves.is_empty());
    }
    // Without a usable id the task is named by index.
    let validation = check(&[with(
        without(task("t", 1, &[]), "task_id"),
        "parallel_group",
        json!(null),
    )]);
    assert_eq!(
        validation.errors[1].message,
        "PlannerDagInvalid: task at index 0 has null parallel_group; every task must declare an \
         integer wave (>= 1)"
    );
    assert_valid(&check(&[task("t", 1, &[]), task("u", i64::MAX, &[])]));
}

#[test]
fn duplicate_task_ids_name_both_indexes_and_resolve_to_the_first() {
    let validation = check(&[
        task("t-1", 1, &[]),
        task("t-2", 2, &["t-1"]),
        task("t-1", 5, &[]),
        task("t-1", 7, &[]),
    ]);
    assert_eq!(
        codes(&validation),
        [Code::DuplicateTaskId, Code::DuplicateTaskId]
    );
    let error = &validation.errors[0];
    assert_eq!(
        error.message,
        "TaskShapeError: task_id 't-1' is used by the tasks at index 0 and index 2; task ids \
         must be unique — rename one of them"
    );
    assert_eq!(
        (error.index, error.task_ids.as_slice()),
        (Some(2), &["t-1".to_owned()][..])
    );
    assert!(validation.errors[1].message.contains("index 0 and index 3"));
    // t-2 depends on the first t-1 (wave 1), so no wave_order error; the reference
    // validator reported a bogus empty cycle here.
    assert_eq!(validation.waves, vec![vec!["t-1"], vec!["t-2"]]);
}

#[test]
fn unknown_fields_are_kept_in_input_order() {
    let text = r#"[{"zeta": 1, "task_id": "t", "assigned_persona": "p", "alpha": {"b": [2]},
        "parallel_group": 1, "description": "", "mid": null}]"#;
    let validation = validate(TaskListSource::Json(text), &[]);
    assert_valid(&validation);
    let extra = &validation.tasks[0].extra;
    assert_eq!(extra.keys().collect::<Vec<_>>(), ["zeta", "alpha", "mid"]);
    assert_eq!(extra["alpha"], json!({"b": [2]}));
    let serialized = serde_json::to_value(&validation.tasks[0]).unwrap_or_default();
    assert_eq!(serialized["zeta"], json!(1));
    assert!(serialized.get("reviews").is_none());
}

#[test]
fn a_repeated_key_keeps_its_last_value_on_both_paths() {
    let text = r#"[{"task_id": "a", "task_id": "b", "assigned_persona": "p", "parallel_group": 1,
        "description": "", "x": 1, "x": 2}]"#;
    let from_text = validate(TaskListSource::Json(text), &[]);
    let value: Value = serde_json::from_str(text).unwrap_or_default();
    let from_value = validate(TaskListSource::Tasks(&value), &[]);
    assert_eq!(from_text, from_value);
    assert_eq!(from_text.tasks[0].task_id, "b");
    assert_eq!(from_text.tasks[0].extra["x"], json!(2));
}

#[test]
fn gate_zero_orders_by_task_then_field() {
    let validation = check(&[
        task("ok", 1, &[]),
        with(
            with(task("t-1", 1, &[]), "writes", json!(3)),
            "assigned_persona",
            json!(null),
        ),
        with(
            without(task("t-2", 1, &[]), "task_id"),
            "parallel_group",
            json!(0),
        ),
        task("ok", 1, &[]),
    ]);
    let summary: Vec<(Option<usize>, Option<&str>)> = validation
        .errors
        .iter()
        .map(|error| (error.index, error.field.as_deref()))
        .collect();
    assert_eq!(
        summary,
        [
            (Some(1), Some("assigned_persona")),
            (Some(1), Some("writes")),
            (Some(2), Some("task_id")),
            (Some(2), Some("parallel_group")),
            (Some(3), Some("task_id")),
        ]
    );
}

#[test]
fn a_task_with_a_bad_field_still_takes_part_in_the_other_gates() {
    // Bad `writes`, but its depends_on and reads are still checked.
    let validation = check(&[with(
        with(task("t-1", 1, &["ghost"]), "writes", json!("x")),
        "reads",
        json!(["nope"]),
    )]);
    assert_eq!(
        codes(&validation),
        [
            Code::InvalidField,
            Code::OrphanDependency,
            Code::UnsatisfiedRead
        ]
    );
}

// ---- gate 1: orphan dependencies ----------------------------------------------------

#[test]
fn orphan_dependency() {
    let validation = check(&[task("t-1", 1, &[]), task("t-2", 2, &["t-1", "t-9", "t-9"])]);
    let error = only_error(&validation);
    assert_eq!(
        error.message,
        "OrphanDepsError: task 't-2' depends_on 't-9' which is not in the task list; remove it \
         from depends_on or add the missing task"
    );
    assert_eq!(error.task_ids, ["t-2", "t-9"]);
    assert_eq!(validation.warnings.len(), 1);
    assert_eq!(validation.warnings[0].code, Code::DuplicateDependency);
    assert_valid(&check(&[task("t-1", 1, &[]), task("t-2", 2, &["t-1"])]));
}

// ---- gate 2: cycles -----------------------------------------------------------------

#[test]
fn cycle_with_a_tail_reports_only_the_cycle() {
    let validation = check(&[
        task("d", 5, &["a"]),
        task("a", 1, &["b"]),
        task("b", 2, &["c"]),
        task("c", 3, &["a"]),
    ]);
    let error = only_error(&validation);
    assert_eq!(error.code, Code::Cycle);
    assert_eq!(
        error.message,
        "CycleError: dependency graph contains a cycle: a -> b -> c -> a (each task depends_on \
         the next); remove depends_on entries until no task depends on itself"
    );
    assert_eq!(error.cycle, Some(vec!["a".into(), "b".into(), "c".into()]));
    assert_eq!(error.task_ids, ["a", "b", "c"]);
}

#[test]
fn cycle_starts_at_the_naturally_smallest_id() {
    let validation = check(&[
        task("t-10", 1, &["t-9"]),
        task("t-9", 1, &["t-2"]),
        task("t-2", 1, &["t-10"]),
    ]);
    let error = only_error(&validation);
    assert_eq!(
        error.cycle,
        Some(vec!["t-2".into(), "t-10".into(), "t-9".into()])
    );
    assert_contains(&error.message, "t-2 -> t-10 -> t-9 -> t-2");
}

#[test]
fn self_dependency_is_a_cycle_of_one() {
    let validation = check(&[task("t-1", 1, &["t-1"])]);
    let error = only_error(&validation);
    assert_eq!(
        error.message,
        "CycleError: dependency graph contains a cycle: t-1 -> t-1 (task 't-1' depends_on \
         itself); remove it from its own depends_on"
    );
    assert_eq!(error.cycle, Some(vec!["t-1".to_owned()]));
}

#[test]
fn one_error_per_component_and_per_self_loop_in_task_order() {
    let validation = check(&[
        task("x", 1, &["y"]),
        task("a", 1, &["a", "b"]),
        task("b", 1, &["a"]),
        task("y", 1, &["x"]),
    ]);
    let cycles: Vec<Vec<String>> = validation
        .errors
        .iter()
        .filter_map(|e| e.cycle.clone())
        .collect();
    assert_eq!(codes(&validation), [Code::Cycle, Code::Cycle, Code::Cycle]);
    assert_eq!(cycles, [vec!["x", "y"], vec!["a", "b"], vec!["a"]]);
}

#[test]
fn tangled_component_is_walked_through_every_member() {
    // a -> b -> a and b -> c -> b: one component {a, b, c}, no simple cycle covers it.
    let validation = check(&[
        task("a", 1, &["b"]),
        task("b", 1, &["a", "c"]),
        task("c", 1, &["b"]),
    ]);
    let error = only_error(&validation);
    assert_eq!(error.task_ids, ["a", "b", "c"]);
    assert_eq!(
        error.cycle,
        Some(vec!["a".into(), "b".into(), "c".into(), "b".into()])
    );
    assert_eq!(
        error.message,
        "CycleError: dependency graph contains a cycle: a -> b -> c -> b -> a (each task \
         depends_on the next; no simple cycle covers these 3 tasks, so the walk passes some \
         twice); remove depends_on entries until no task depends on itself"
    );
}

#[test]
fn a_chord_does_not_hide_part_of_the_cycle() {
    // a -> b -> c -> a plus the chord a -> c: the report names b too.
    let validation = check(&[
        task("a", 1, &["b", "c"]),
        task("b", 1, &["c"]),
        task("c", 1, &["a"]),
    ]);
    let error = only_error(&validation);
    assert_eq!(error.task_ids, ["a", "b", "c"]);
    assert_eq!(error.cycle, Some(vec!["a".into(), "b".into(), "c".into()]));
    assert_contains(&error.message, "a -> b -> c -> a");
}

#[test]
fn edges_inside_a_cycle_are_not_wave_order_errors_but_edges_into_it_are() {
    let validation = check(&[
        task("a", 2, &["b"]),
        task("b", 2, &["a"]),
        task("tail", 1, &["a"]),
    ]);
    assert_eq!(codes(&validation), [Code::Cycle, Code::WaveOrder]);
    assert_eq!(validation.errors[1].task_ids, ["tail", "a"]);
}

// ---- gate 3: wave order -------------------------------------------------------------

#[test]
fn dependency_in_the_same_or_a_later_wave_is_wave_order() {
    let validation = check(&[
        task("t-1", 2, &[]),
        task("t-2", 2, &["t-1"]),
        task("t-3", 1, &["t-1", "t-1", "t-2"]),
    ]);
    assert_eq!(
        codes(&validation),
        [Code::WaveOrder, Code::WaveOrder, Code::WaveOrder]
    );
    let first = &validation.errors[0];
    assert_eq!(
        first.message,
        "WaveOrderError: task 't-2' (parallel_group 2) depends_on 't-1' (parallel_group 2), but a \
         task's parallel_group must be strictly greater than that of every task it depends on; \
         move 't-2' to parallel_group 3 or later"
    );
    assert_eq!((first.wave, first.index), (Some(2), Some(1)));
    // One error per edge: the repeated t-1 entry is a warning, not a second error.
    assert_eq!(validation.errors[1].task_ids, ["t-3", "t-1"]);
    assert_eq!(validation.errors[2].task_ids, ["t-3", "t-2"]);
    assert_eq!(validation.warnings.len(), 1);
    assert_valid(&check(&[task("t-1", 1, &[]), task("t-2", 3, &["t-1"])]));
}

// ---- gate 4: write contention -------------------------------------------------------

#[test]
fn first_writer_in_a_wave_owns_the_file() {
    let writes = |id: &str, group: i64, files: Value| with(task(id, group, &[]), "writes", files);
    let validation = check(&[
        writes("t-1", 1, json!(["src/a.py"])),
        writes("t-2", 1, json!(["./src/a.py", "src/b.py"])),
        writes("t-3", 1, json!(["src/a.py", "src/a.py"])),
        writes("t-4", 2, json!(["src/a.py"])),
        writes("t-5", 1, json!(["src/b.py"])),
    ]);
    assert_eq!(codes(&validation), [Code::WriteContention; 3]);
    let first = &validation.errors[0];
    assert_eq!(
        first.message,
        "FileContentionError: wave 1: tasks 't-1' and 't-2' both write file 'src/a.py' — \
         concurrent writes would race. Move one to a different parallel_group."
    );
    assert_eq!(
        (first.path.as_deref(), first.wave),
        (Some("src/a.py"), Some(1))
    );
    assert_eq!(validation.errors[1].task_ids, ["t-1", "t-3"]);
    assert_eq!(validation.errors[2].task_ids, ["t-2", "t-5"]);
    assert_valid(&check(&[
        writes("t-1", 1, json!(["a"])),
        writes("t-2", 2, json!(["a"])),
    ]));
}

// ---- gate 5: reads ------------------------------------------------------------------

#[test]
fn reads_need_an_existing_file_or_a_strictly_earlier_writer() {
    let reads = |id: &str, group: i64, files: Value| with(task(id, group, &[]), "reads", files);
    let writer = with(task("w", 2, &[]), "writes", json!(["gen.py"]));
    let validation = check_with_files(
        &[
            writer,
            reads("same-wave", 2, json!(["gen.py"])),
            reads("earlier", 1, json!(["./gen.py"])),
            reads(
                "later",
                3,
                json!(["gen.py", "./README.md", "ghost.py", "ghost.py"]),
            ),
        ],
        &["./README.md"],
    );
    assert_eq!(codes(&validation), [Code::UnsatisfiedRead; 3]);
    let paths: Vec<(&str, &str)> = validation
        .errors
        .iter()
        .map(|e| {
            (
                e.task_ids[0].as_str(),
                e.path.as_deref().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(
        paths,
        [
            ("same-wave", "gen.py"),
            ("earlier", "gen.py"),
            ("later", "ghost.py")
        ]
    );
    assert_eq!(
        validation.errors[2].message,
        "UnsatisfiableReadsError: task 'later' (parallel_group 3) reads 'ghost.py', which is not \
         in existing_files and no task writes it; move the task after a writer of the file, add \
         a task that writes it in an earlier parallel_group, or drop the read"
    );
    assert!(
        validation.errors[0]
            .message
            .contains("(a same-wave writer does not count)")
    );
}

#[test]
fn a_read_written_only_by_a_task_with_a_bad_wave_is_not_judged() {
    let validation = check(&[
        with(task("w", 1, &[]), "writes", json!(["gen.py"])),
        with(
            with(task("x", 1, &[]), "writes", json!(["x.py"])),
            "parallel_group",
            json!("1"),
        ),
        with(task("r", 2, &[]), "reads", json!(["gen.py", "x.py"])),
    ]);
    assert_eq!(codes(&validation), [Code::InvalidParallelGroup]);
}

// ---- gates 6 and 7: reviews ---------------------------------------------------------

fn review(id: &str, group: i64, reviewed: Value, persona: &str) -> Value {
    let depends_on: Vec<&str> = reviewed
        .as_str()
        .filter(|id| !id.is_empty())
        .into_iter()
        .collect();
    with(
        with(task(id, group, &depends_on), "reviews", reviewed),
        "assigned_persona",
        json!(persona),
    )
}

#[test]
fn reviews_must_name_another_task_of_another_persona() {
    let implement = with(task("impl", 1, &[]), "assigned_persona", json!("be-1"));
    let validation = check(&[
        implement.clone(),
        review("bad-type", 2, json!(3), "rv"),
        review("empty", 2, json!(""), "rv"),
        with(task("self", 2, &[]), "reviews", json!("self")),
        review("orphan", 2, json!("nobody"), "rv"),
        review("same", 2, json!("impl"), "be-1"),
        review("fine", 2, json!("impl"), "rv"),
        with(task("null", 2, &[]), "reviews", json!(null)),
    ]);
    assert_eq!(
        codes(&validation),
        [
            Code::OrphanDependency, // orphan's depends_on names "nobody" too
            Code::InvalidReviews,
            Code::InvalidReviews,
            Code::SelfReview,
            Code::OrphanReviews,
            Code::ReviewerNotDisjoint,
        ]
    );
    let messages: Vec<&str> = validation.errors[1..]
        .iter()
        .map(|e| e.message.as_str())
        .collect();
    assert_eq!(
        messages[0],
        "PlannerDagInvalid: reviewer-disjointness: task 'bad-type' has an invalid reviews value \
         (got number 3); reviews must be the task_id of the implement task it reviews — or omit \
         it on tasks that review nothing"
    );
    assert!(messages[1].contains("(got an empty string)"));
    assert!(messages[2].starts_with("PlannerDagInvalid: self-review: task 'self' reviews itself"));
    assert!(
        messages[3]
            .starts_with("PlannerDagInvalid: orphan-reviews: task 'orphan' reviews 'nobody'")
    );
    assert_eq!(
        messages[4],
        "PlannerDagInvalid: reviewer-disjointness: review task 'same' and the task it reviews, \
         'impl', share assigned_persona 'be-1'; a persona cannot review its own work — assign \
         the review to a different persona"
    );
    assert_eq!(validation.errors[5].task_ids, ["same", "impl"]);
}

#[test]
fn implement_tasks_may_share_a_persona() {
    let shared = |id: &str| with(task(id, 1, &[]), "assigned_persona", json!("be-1"));
    assert_valid(&check(&[shared("a"), shared("b")]));
}

#[test]
fn review_must_run_in_a_strictly_later_wave() {
    let implement = task("impl", 2, &[]);
    let validation = check(&[
        implement,
        with(task("rv", 2, &[]), "reviews", json!("impl")),
    ]);
    let error = only_error(&validation);
    assert_eq!(error.code, Code::ReviewNotAfter);
    assert_eq!(
        error.message,
        "PlannerDagInvalid: reviewer-disjointness: review task 'rv' (parallel_group 2) reviews \
         'impl' (parallel_group 2) but does not run after it; move 'rv' to parallel_group 3 or \
         later and make it depend_on 'impl'"
    );
    assert_eq!(validation.warnings[0].code, Code::ReviewWithoutDependency);
    // Already depending on it: the advice is only to move.
    let validation = check(&[
        task("impl", 2, &[]),
        with(task("rv", 1, &["impl"]), "reviews", json!("impl")),
    ]);
    let advice = validation
        .errors
        .iter()
        .find(|e| e.code == Code::ReviewNotAfter)
        .map(|e| e.message.as_str());
    assert_eq!(
        advice,
        Some(
            "PlannerDagInvalid: reviewer-disjointness: review task 'rv' (parallel_group 1) reviews \
             'impl' (parallel_group 2) but does not run after it; move 'rv' to parallel_group 3 or \
             later"
        )
    );
}

// ---- warnings -----------------------------------------------------------------------

#[test]
fn warnings_do_not_fail_the_gate() {
    let validation = check(&[
        task("impl", 1, &[]),
        task("other", 1, &[]),
        with(
            task("rv", 2, &["other", "other", "other"]),
            "reviews",
            json!("impl"),
        ),
    ]);
    assert_valid(&validation);
    let warnings: Vec<(Code, &str)> = validation
        .warnings
        .iter()
        .map(|w| (w.code, w.message.as_str()))
        .collect();
    assert_eq!(
        warnings,
        [
            (
                Code::ReviewWithoutDependency,
                "PlannerDagWarning: review task 'rv' reviews 'impl' but does not depends_on it; \
                 add 'impl' to its depends_on so the review runs after the work"
            ),
            (
                Code::DuplicateDependency,
                "PlannerDagWarning: task 'rv' lists 'other' more than once in depends_on; list \
                 each dependency once"
            ),
        ]
    );
}

// ---- ordering, waves and report -----------------------------------------------------

#[test]
fn errors_come_in_gate_order_then_task_order() {
    let validation = check(&[
        with(task("rv", 1, &["impl"]), "reviews", json!("impl")),
        with(task("impl", 1, &["ghost"]), "reads", json!(["nowhere"])),
        with(task("w1", 1, &[]), "writes", json!(["f"])),
        with(task("w2", 1, &[]), "writes", json!(["f"])),
        task("loop", 1, &["loop"]),
        task("dup", 1, &[]),
        task("dup", 1, &[]),
        with(task("pg", 1, &[]), "parallel_group", json!(null)),
    ]);
    assert_eq!(
        codes(&validation),
        [
            Code::DuplicateTaskId,
            Code::InvalidParallelGroup,
            Code::OrphanDependency,
            Code::Cycle,
            Code::WaveOrder,
            Code::WriteContention,
            Code::UnsatisfiedRead,
            Code::ReviewNotAfter,
        ]
    );
    let reprompt = validation.reprompt();
    assert_eq!(reprompt.lines().count(), validation.errors.len());
    assert_eq!(
        reprompt.lines().next(),
        Some(validation.errors[0].message.as_str())
    );
}

#[test]
fn waves_group_ids_by_ascending_wave_in_task_order() {
    let validation = check(&[
        task("c", 10, &["a"]),
        task("a", 2, &[]),
        task("b", 2, &[]),
        task("d", 10, &["b"]),
    ]);
    assert_valid(&validation);
    assert_eq!(validation.waves, vec![vec!["a", "b"], vec!["c", "d"]]);
    // Tasks stay in input order.
    let ids: Vec<&str> = validation
        .tasks
        .iter()
        .map(|t| t.task_id.as_str())
        .collect();
    assert_eq!(ids, ["c", "a", "b", "d"]);
}

#[test]
fn report_serializes_codes_snake_case_and_skips_absent_fields() {
    let validation = check(&[task("t-1", 1, &["t-1"])]);
    let report = serde_json::to_value(validation.report()).unwrap_or_default();
    assert_eq!(
        report,
        json!({
            "valid": false,
            "errors": [{
                "code": "cycle",
                "message": validation.errors[0].message,
                "task_ids": ["t-1"],
                "cycle": ["t-1"],
            }],
            "warnings": [],
            "error_count": 1,
            "warning_count": 0,
            "error_counts": {"cycle": 1},
            "truncated": false,
            "waves": [["t-1"]],
        })
    );
    assert_eq!(validation.clone().into_report(), validation.report());
    let round_trip: ValidationReport =
        serde_json::from_value(report).unwrap_or_else(|_| validation.report());
    assert_eq!(round_trip, validation.report());
}

/// A capped report keeps the first errors and the counts of all; the capped
/// re-prompt ends with one line naming what was left out.
#[test]
fn capped_reports_keep_the_first_errors_and_count_all() {
    let tasks: Vec<_> = (0..5)
        .map(|i| task(&format!("t{i}"), 1, &[&format!("ghost{i}")]))
        .collect();
    let validation = check(&tasks);
    let report = validation.report_within(2);
    assert_eq!(report.errors.len(), 2);
    assert_eq!((report.error_count, report.truncated), (5, true));
    assert_eq!(report, validation.report().capped(2));
    let reprompt = validation.reprompt_within(2);
    let lines: Vec<&str> = reprompt.lines().collect();
    assert_eq!(lines.len(), 3, "{reprompt}");
    assert!(lines[2].starts_with("... and 3 more errors not listed (3 orphan_dependency)."));
    assert_eq!(validation.reprompt_within(5), validation.reprompt());
}

#[test]
fn every_code_has_its_class_prefix() {
    let expected = [
        (Code::MissingField, "TaskShapeError"),
        (Code::InvalidField, "TaskShapeError"),
        (Code::DuplicateTaskId, "TaskShapeError"),
        (Code::InvalidParallelGroup, "PlannerDagInvalid"),
        (Code::OrphanDependency, "OrphanDepsError"),
        (Code::Cycle, "CycleError"),
        (Code::WaveOrder, "WaveOrderError"),
        (Code::WriteContention, "FileContentionError"),
        (Code::UnsatisfiedRead, "UnsatisfiableReadsError"),
        (Code::InvalidReviews, "PlannerDagInvalid"),
        (Code::SelfReview, "PlannerDagInvalid"),
        (Code::OrphanReviews, "PlannerDagInvalid"),
        (Code::ReviewerNotDisjoint, "PlannerDagInvalid"),
        (Code::ReviewNotAfter, "PlannerDagInvalid"),
    ];
    for (code, class) in expected {
        assert_eq!(code.class_name(), Some(class));
        let serialized = serde_json::to_value(code).unwrap_or_default();
        assert_eq!(serialized, json!(code.as_str()));
    }
    assert_eq!(Code::SynthesisFailure.class_name(), None);
}

// ---- scale: shapes that would expose quadratic work ---------------------------------

#[test]
fn wide_wave_and_long_chain_stay_linear() {
    // 50,000 writers in one wave (distinct files) plus a 20,000-task dependency chain.
    let mut tasks: Vec<Value> = (0..50_000)
        .map(|i| {
            with(
                task(&format!("w-{i}"), 1, &[]),
                "writes",
                json!([format!("f/{i}")]),
            )
        })
        .collect();
    tasks.extend((0..20_000).map(|i| {
        let previous = if i == 0 {
            "w-0".to_owned()
        } else {
            format!("c-{}", i - 1)
        };
        task(&format!("c-{i}"), i + 2, &[&previous])
    }));
    let list = Value::Array(tasks);
    let validation = validate(TaskListSource::Tasks(&list), &[]);
    assert_valid(&validation);
    assert_eq!(validation.waves.len(), 20_001);

    // The same 50,000 writers on one file: one error each, all naming the owner.
    let same_file: Vec<Value> = (0..50_000)
        .map(|i| with(task(&format!("w-{i}"), 1, &[]), "writes", json!(["f"])))
        .collect();
    let validation = validate(TaskListSource::Tasks(&Value::Array(same_file)), &[]);
    assert_eq!(validation.errors.len(), 49_999);
    assert!(validation.errors.iter().all(|e| e.task_ids[0] == "w-0"));
}

#[test]
fn a_hundred_thousand_task_ring_is_one_cycle() {
    let n = 100_000;
    let tasks: Vec<Value> = (0..n)
        .map(|i| task(&format!("t-{i}"), 1, &[&format!("t-{}", (i + 1) % n)]))
        .collect();
    let validation = validate(TaskListSource::Tasks(&Value::Array(tasks)), &[]);
    let error = only_error(&validation);
    assert_eq!(error.cycle.as_ref().map(Vec::len), Some(n));
    assert!(error.message.ends_with("t-99999 -> t-0 (each task depends_on the next); remove depends_on entries until no task depends on itself"));
}
