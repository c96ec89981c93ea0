//! What only the whole route table can add to the OpenAPI document: the answers
//! every `/v1` operation can give from the middleware stack (401, 404 on an empty
//! path segment, 408, 500, 503), and the request schemas whose rules span fields.

use utoipa::openapi::schema::{ObjectBuilder, OneOfBuilder, Schema, SchemaType, Type};
use utoipa::openapi::{ContentBuilder, OpenApi, Ref, RefOr, ResponseBuilder};

use crate::http::problem::PROBLEM_JSON;

/// Routes that never touch the database, so never answer 503.
const STATELESS: &[&str] = &["/v1/task-lists/validate", "/v1/loop-plans/"];

pub(super) fn finish(mut openapi: OpenApi) -> OpenApi {
    add_common_responses(&mut openapi);
    for name in ["ValidateRequest", "CreateTaskListRequest"] {
        one_task_source(&mut openapi, name);
    }
    yaml_loop_plan_request(&mut openapi);
    openapi
}

fn problem(description: &str) -> RefOr<utoipa::openapi::Response> {
    ResponseBuilder::new()
        .description(description)
        .content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        )
        .build()
        .into()
}

fn add_common_responses(openapi: &mut OpenApi) {
    let unauthorized =
        problem("Missing or wrong bearer token (when PLANGATE_API_TOKENS is set; `unauthorized`)");
    let empty_segment = problem("An empty path parameter matches no route (`route_not_found`)");
    let timeout = problem("The request took longer than PLANGATE_REQUEST_TIMEOUT_SECS (`timeout`)");
    let internal = problem("A bug, logged with the request id (`internal`)");
    let unavailable =
        problem("The database is not reachable; retry shortly (`database_unavailable`)");
    for (path, item) in openapi.paths.paths.iter_mut() {
        if !path.starts_with("/v1/") {
            continue;
        }
        let stateless = STATELESS.iter().any(|p| path.starts_with(p));
        let has_path_parameter = path.contains('{');
        for operation in [
            &mut item.get,
            &mut item.put,
            &mut item.post,
            &mut item.patch,
            &mut item.delete,
        ]
        .into_iter()
        .flatten()
        {
            let responses = &mut operation.responses.responses;
            responses.insert("401".to_owned(), unauthorized.clone());
            if has_path_parameter {
                responses
                    .entry("404".to_owned())
                    .or_insert_with(|| empty_segment.clone());
            }
            responses.insert("408".to_owned(), timeout.clone());
            responses.insert("500".to_owned(), internal.clone());
            if !stateless {
                responses
                    .entry("503".to_owned())
                    .or_insert_with(|| unavailable.clone());
            }
        }
    }
}

/// `tasks` or `planner_output`, exactly one of them non-null: the object schema
/// becomes a `oneOf` of its two forms, so that every body the schema allows is one
/// the handler takes (and the other way round). `tasks` may be any JSON value: what
/// is not a list of task objects is the gate's `synthesis_failure`, not a bad request.
fn one_task_source(openapi: &mut OpenApi, name: &str) {
    let Some(components) = openapi.components.as_mut() else {
        return;
    };
    let Some(RefOr::T(Schema::Object(object))) = components.schemas.get(name).cloned() else {
        return;
    };
    let null = || {
        RefOr::T(Schema::Object(
            ObjectBuilder::new().schema_type(Type::Null).build(),
        ))
    };
    let description = |key: &str| {
        object.properties.get(key).and_then(|p| match p {
            RefOr::T(Schema::Object(o)) => o.description.clone(),
            _ => None,
        })
    };
    let mut with_tasks = object.clone();
    with_tasks.title = Some("tasks".to_owned());
    with_tasks.properties.insert(
        "tasks".to_owned(),
        ObjectBuilder::new()
            .schema_type(SchemaType::from_iter([
                Type::Array,
                Type::Object,
                Type::String,
                Type::Number,
                Type::Boolean,
            ]))
            .description(description("tasks"))
            .into(),
    );
    with_tasks
        .properties
        .insert("planner_output".to_owned(), null());
    with_tasks.required.push("tasks".to_owned());
    let mut with_text = object.clone();
    with_text.title = Some("planner_output".to_owned());
    with_text.properties.insert("tasks".to_owned(), null());
    with_text.properties.insert(
        "planner_output".to_owned(),
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(description("planner_output"))
            .into(),
    );
    with_text.required.push("planner_output".to_owned());
    let one_of = OneOfBuilder::new()
        .description(object.description.clone())
        .item(with_tasks)
        .item(with_text)
        .build();
    components
        .schemas
        .insert(name.to_owned(), RefOr::T(Schema::OneOf(one_of)));
}

/// The schemas behind `LoopPlanRequest`, read from YAML: a plain scalar where a
/// string is expected is read as its text (`id: 1.10` is `"1.10"`, `name: null` is
/// `"null"`), so there string fields take any scalar. The YAML request body points at
/// these `…Yaml` copies; the JSON body keeps the strict schemas.
const YAML_SCHEMAS: &[&str] = &[
    "LoopPlanRequest",
    "TrackInfo",
    "PhaseInfo",
    "CompletedTrack",
];

fn yaml_loop_plan_request(openapi: &mut OpenApi) {
    let Some(components) = openapi.components.as_mut() else {
        return;
    };
    for name in YAML_SCHEMAS {
        let Some(schema) = components.schemas.get(*name) else {
            continue;
        };
        let Ok(mut value) = serde_json::to_value(schema) else {
            continue;
        };
        widen_strings(&mut value);
        if let Ok(widened) = serde_json::from_value::<RefOr<Schema>>(value) {
            components.schemas.insert(format!("{name}Yaml"), widened);
        }
    }
    let Some(body) = openapi
        .paths
        .paths
        .get_mut("/v1/loop-plans/generate")
        .and_then(|item| item.post.as_mut())
        .and_then(|op| op.request_body.as_mut())
    else {
        return;
    };
    let RefOr::T(body) = body else {
        return;
    };
    if let Some(RefOr::T(yaml)) = body.content.get_mut("application/yaml") {
        yaml.schema = Some(Ref::from_schema_name("LoopPlanRequestYaml").into());
    }
}

fn widen_strings(value: &mut serde_json::Value) {
    use serde_json::{Value, json};
    match value {
        Value::Object(map) => {
            let is_string = match map.get("type") {
                Some(Value::String(t)) => t == "string",
                Some(Value::Array(types)) => types.iter().any(|t| t == "string"),
                _ => false,
            };
            if is_string {
                map.insert(
                    "type".to_owned(),
                    json!(["string", "number", "boolean", "null"]),
                );
            }
            if let Some(Value::String(target)) = map.get_mut("$ref") {
                let name = target.trim_start_matches("#/components/schemas/");
                if YAML_SCHEMAS.contains(&name) {
                    *target = format!("{target}Yaml");
                }
            }
            map.values_mut().for_each(widen_strings);
        }
        Value::Array(items) => items.iter_mut().for_each(widen_strings),
        _ => {}
    }
}
