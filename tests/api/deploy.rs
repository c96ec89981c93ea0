//! The deployment files (docker/) agree with the code and with the operations spec.
//!
//! No server and no Docker: the files are read and parsed (YAML with serde_norway),
//! and the settings they name are checked against the `env = "…"` attributes of
//! the command tree (src/cli/args.rs, src/config/serve_args.rs), so renaming a setting without updating the manifests fails here
//! instead of silently running a pod on a default.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Variables plangate reads that are not clap attributes of the command tree.
const EXTRA_ENV: &[&str] = &["DATABASE_URL", "RUST_LOG"];
/// The drain default of `Settings::merge` when nothing sets it.
const DEFAULT_SHUTDOWN_GRACE_SECS: u64 = 25;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(rel: &str) -> String {
    let path = root().join(rel);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Parse YAML (merge keys `<<:` applied, as Compose does) into JSON values, which
/// are easier to walk.
fn yaml(path: &Path) -> Value {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    let mut value: serde_norway::Value = serde_norway::from_str(&text)
        .unwrap_or_else(|e| panic!("{} is not valid YAML: {e}", path.display()));
    value
        .apply_merge()
        .unwrap_or_else(|e| panic!("{}: bad merge key: {e}", path.display()));
    serde_json::to_value(value)
        .unwrap_or_else(|e| panic!("{}: not representable as JSON: {e}", path.display()))
}

/// The files of the command tree: its subcommands and the server's flags.
const COMMAND_TREE: [&str; 2] = ["src/cli/args.rs", "src/config/serve_args.rs"];

/// The environment variables plangate reads: every `env = "NAME"` in [`COMMAND_TREE`]
/// plus [`EXTRA_ENV`].
fn known_env() -> BTreeSet<String> {
    let source = COMMAND_TREE.map(read).join("\n");
    let mut names: BTreeSet<String> = EXTRA_ENV.iter().map(|s| (*s).to_owned()).collect();
    let mut rest = source.as_str();
    while let Some(at) = rest.find("env = \"") {
        rest = &rest[at + "env = \"".len()..];
        let end = rest
            .find('"')
            .expect("unterminated env attribute in the command tree");
        names.insert(rest[..end].to_owned());
        rest = &rest[end..];
    }
    assert!(
        names.contains("PLANGATE_BIND") && names.contains("PLANGATE_SHUTDOWN_GRACE_SECS"),
        "could not extract the env names from {COMMAND_TREE:?}: {names:?}"
    );
    names
}

fn assert_known(names: impl IntoIterator<Item = String>, file: &str, known: &BTreeSet<String>) {
    for name in names {
        assert!(
            known.contains(&name),
            "{file} sets {name}, which plangate does not read (known: {known:?})"
        );
    }
}

/// The Kubernetes objects in docker/k8s/, by kind (one object per file).
fn manifests() -> BTreeMap<String, (String, Value)> {
    let dir = root().join("docker/k8s");
    let mut by_kind = BTreeMap::new();
    for entry in std::fs::read_dir(&dir).expect("docker/k8s/ exists") {
        let path = entry.expect("readable directory entry").path();
        if path.extension().and_then(|e| e.to_str()) != Some("yaml") {
            continue;
        }
        let doc = yaml(&path);
        let kind = doc["kind"]
            .as_str()
            .unwrap_or_else(|| panic!("{} has no kind", path.display()))
            .to_owned();
        let file = path
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        if let Some((other, _)) = by_kind.insert(kind.clone(), (file.clone(), doc)) {
            panic!("two {kind} objects ({other} and {file}): one object per kind expected");
        }
    }
    for kind in [
        "Deployment",
        "Service",
        "PodDisruptionBudget",
        "ConfigMap",
        "Secret",
    ] {
        assert!(by_kind.contains_key(kind), "docker/k8s/ has no {kind}");
    }
    by_kind
}

fn object<'a>(all: &'a BTreeMap<String, (String, Value)>, kind: &str) -> &'a Value {
    &all[kind].1
}

fn str_map(value: &Value) -> BTreeMap<String, String> {
    value
        .as_object()
        .map(|m| {
            m.iter()
                .map(|(k, v)| {
                    let text = match v {
                        Value::String(s) => s.clone(),
                        other => other.to_string(),
                    };
                    (k.clone(), text)
                })
                .collect()
        })
        .unwrap_or_default()
}

fn array(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}

fn the_container(deployment: &Value) -> &Value {
    let containers = array(&deployment["spec"]["template"]["spec"]["containers"]);
    containers
        .iter()
        .find(|c| c["name"] == "plangate")
        .expect("the Deployment has a container named plangate")
}

/// `matchLabels` of `selector` are all carried by `labels`.
fn selects(selector: &Value, labels: &Value) -> bool {
    let selector = str_map(selector);
    let labels = str_map(labels);
    !selector.is_empty() && selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn deployment_is_replicated_probed_bounded_and_locked_down() {
    let all = manifests();
    let deployment = object(&all, "Deployment");
    let spec = &deployment["spec"];
    assert!(
        spec["replicas"].as_u64().unwrap_or(0) >= 2,
        "replicas must be >= 2"
    );
    assert!(
        selects(
            &spec["selector"]["matchLabels"],
            &spec["template"]["metadata"]["labels"]
        ),
        "the Deployment's selector must match its pod labels"
    );

    let pod = &spec["template"]["spec"];
    let container = the_container(deployment);
    let port_names: Vec<&Value> = array(&container["ports"])
        .iter()
        .map(|p| &p["name"])
        .collect();
    let container_ports: Vec<u64> = array(&container["ports"])
        .iter()
        .filter_map(|p| p["containerPort"].as_u64())
        .collect();
    assert!(
        container_ports.contains(&8080),
        "the container must expose 8080"
    );

    for (probe, path) in [("readinessProbe", "/readyz"), ("livenessProbe", "/healthz")] {
        let get = &container[probe]["httpGet"];
        assert_eq!(get["path"], path, "{probe} must GET {path}");
        let port = &get["port"];
        assert!(
            port_names.contains(&port)
                || port.as_u64().is_some_and(|p| container_ports.contains(&p)),
            "{probe} must target a container port, not {port}"
        );
    }

    for part in ["requests", "limits"] {
        for resource in ["cpu", "memory"] {
            assert!(
                container["resources"][part][resource].is_string(),
                "resources.{part}.{resource} must be set"
            );
        }
    }

    let pod_security = &pod["securityContext"];
    let security = &container["securityContext"];
    assert!(
        pod_security["runAsNonRoot"] == true || security["runAsNonRoot"] == true,
        "runAsNonRoot must be true"
    );
    assert_ne!(pod_security["runAsUser"], 0, "runAsUser must not be root");
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert!(
        array(&security["capabilities"]["drop"]).contains(&Value::from("ALL")),
        "capabilities must drop ALL"
    );
}

#[test]
fn termination_grace_outlasts_the_drain() {
    let all = manifests();
    let deployment = object(&all, "Deployment");
    let container = the_container(deployment);
    let termination = deployment["spec"]["template"]["spec"]["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds is set");

    // Every place that sets the drain time must stay below the kill deadline; the
    // container's own env wins over envFrom, as in Kubernetes.
    let from_config_map = str_map(&object(&all, "ConfigMap")["data"])
        .get("PLANGATE_SHUTDOWN_GRACE_SECS")
        .map(|v| v.parse::<u64>().expect("a number of seconds"));
    let from_env = array(&container["env"])
        .iter()
        .find(|e| e["name"] == "PLANGATE_SHUTDOWN_GRACE_SECS")
        .map(|e| {
            e["value"]
                .as_str()
                .expect("PLANGATE_SHUTDOWN_GRACE_SECS is a literal value")
                .parse::<u64>()
                .expect("a number of seconds")
        });
    assert!(
        from_env.is_some() || from_config_map.is_some(),
        "PLANGATE_SHUTDOWN_GRACE_SECS must be set explicitly next to terminationGracePeriodSeconds"
    );
    let grace = from_env
        .or(from_config_map)
        .unwrap_or(DEFAULT_SHUTDOWN_GRACE_SECS);
    for value in [from_env, from_config_map].into_iter().flatten() {
        assert!(
            termination > value,
            "terminationGracePeriodSeconds ({termination}) must exceed PLANGATE_SHUTDOWN_GRACE_SECS ({value})"
        );
    }

    // A preStop `sleep N` runs inside the same deadline, before SIGTERM.
    let pre_stop = array(&container["lifecycle"]["preStop"]["exec"]["command"]);
    let pre_stop_secs = match pre_stop {
        [cmd, secs] if cmd == "sleep" => secs
            .as_str()
            .and_then(|s| s.parse::<u64>().ok())
            .unwrap_or(0),
        _ => 0,
    };
    assert!(
        termination > pre_stop_secs + grace,
        "terminationGracePeriodSeconds ({termination}) must exceed preStop ({pre_stop_secs} s) + grace ({grace} s)"
    );
}

#[test]
fn secrets_come_from_the_secret_and_config_from_the_config_map() {
    let all = manifests();
    let container = the_container(object(&all, "Deployment"));
    let secret = object(&all, "Secret");
    let secret_name = &secret["metadata"]["name"];
    let secret_keys = str_map(&secret["stringData"]);
    let config_map = object(&all, "ConfigMap");

    for name in ["DATABASE_URL", "PLANGATE_API_TOKENS"] {
        let entry = array(&container["env"]).iter().find(|e| e["name"] == name);
        let from_key = entry.map(|e| &e["valueFrom"]["secretKeyRef"]);
        let ok = match from_key {
            Some(key_ref) if key_ref.is_object() => {
                assert_eq!(
                    &key_ref["name"], secret_name,
                    "{name}: secretKeyRef names another Secret"
                );
                let key = key_ref["key"].as_str().unwrap_or_default();
                assert!(
                    secret_keys.contains_key(key),
                    "{name}: the example Secret has no key {key}"
                );
                true
            }
            _ => array(&container["envFrom"]).iter().any(|source| {
                &source["secretRef"]["name"] == secret_name && secret_keys.contains_key(name)
            }),
        };
        assert!(
            ok,
            "{name} must come from the Secret (secretKeyRef or secretRef)"
        );
        assert!(
            entry.is_none_or(|e| e.get("value").is_none()),
            "{name} must not be a literal value in the Deployment"
        );
        assert!(
            !str_map(&config_map["data"]).contains_key(name),
            "{name} is a secret and must not be in the ConfigMap"
        );
    }

    // The example carries placeholders, never something that looks usable.
    for (key, value) in &secret_keys {
        assert!(
            value.contains("CHANGE-ME"),
            "secret.example.yaml: {key} must be an obvious placeholder"
        );
    }

    assert!(
        array(&container["envFrom"])
            .iter()
            .any(|source| source["configMapRef"]["name"] == config_map["metadata"]["name"]),
        "the Deployment must take its settings from the ConfigMap (envFrom)"
    );
    let data = str_map(&config_map["data"]);
    assert_eq!(
        data.get("PLANGATE_LOG_FORMAT").map(String::as_str),
        Some("json")
    );
    let bind = data
        .get("PLANGATE_BIND")
        .expect("the ConfigMap sets PLANGATE_BIND");
    assert!(
        bind.starts_with("0.0.0.0:"),
        "PLANGATE_BIND must listen on every interface, not {bind}"
    );
}

#[test]
fn service_and_pdb_point_at_the_deployment() {
    let all = manifests();
    let deployment = object(&all, "Deployment");
    let pod_labels = &deployment["spec"]["template"]["metadata"]["labels"];
    let container = the_container(deployment);

    let service = object(&all, "Service");
    assert_eq!(service["spec"]["type"], "ClusterIP");
    assert!(
        selects(&service["spec"]["selector"], pod_labels),
        "the Service must select the pods"
    );
    let ports = array(&service["spec"]["ports"]);
    let port = ports
        .iter()
        .find(|p| p["port"] == 80)
        .expect("the Service listens on 80");
    let target = &port["targetPort"];
    let target_ok = array(&container["ports"])
        .iter()
        .any(|p| &p["name"] == target || &p["containerPort"] == target);
    assert!(
        target_ok,
        "the Service's targetPort {target} is not a container port"
    );
    let bind = str_map(&object(&all, "ConfigMap")["data"])["PLANGATE_BIND"].clone();
    let bound_port: u64 = bind
        .rsplit(':')
        .next()
        .and_then(|p| p.parse().ok())
        .expect("a port");
    assert!(
        array(&container["ports"])
            .iter()
            .any(|p| p["containerPort"] == bound_port),
        "PLANGATE_BIND's port {bound_port} must be the container port"
    );

    let pdb = object(&all, "PodDisruptionBudget");
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert!(
        selects(&pdb["spec"]["selector"]["matchLabels"], pod_labels),
        "the PodDisruptionBudget must select the Deployment's pods"
    );
}

#[test]
fn every_variable_named_is_one_plangate_reads() {
    let known = known_env();
    let all = manifests();
    let (file, config_map) = &all["ConfigMap"];
    assert_known(str_map(&config_map["data"]).into_keys(), file, &known);
    let (file, deployment) = &all["Deployment"];
    let names = array(&the_container(deployment)["env"])
        .iter()
        .map(|e| e["name"].as_str().unwrap_or_default().to_owned());
    assert_known(names, file, &known);
    // The Secret's keys become variables too (by secretKeyRef or secretRef).
    let (file, secret) = &all["Secret"];
    assert_known(str_map(&secret["stringData"]).into_keys(), file, &known);

    let compose = yaml(&root().join("docker/compose.yaml"));
    for (name, service) in compose["services"].as_object().expect("compose services") {
        if name.starts_with("plangate") {
            assert_known(
                str_map(&service["environment"]).into_keys(),
                "docker/compose.yaml",
                &known,
            );
        }
    }

    let env: Vec<String> = dockerfile()
        .iter()
        .filter(|(instruction, _)| instruction == "ENV")
        .flat_map(|(_, args)| {
            args.split_whitespace()
                .filter_map(|pair| pair.split_once('=').map(|(k, _)| k.to_owned()))
                .collect::<Vec<_>>()
        })
        .collect();
    let runtime_env: Vec<String> = env
        .into_iter()
        .filter(|n| !n.starts_with("SQLX_") && !n.starts_with("CARGO_"))
        .collect();
    assert_known(runtime_env, "docker/Dockerfile", &known);
}

/// docker/Dockerfile as (INSTRUCTION, arguments) with continuations joined and
/// comments dropped.
fn dockerfile() -> Vec<(String, String)> {
    let text = read("docker/Dockerfile");
    let mut out = Vec::new();
    let mut current = String::new();
    for line in text.lines() {
        let trimmed = line.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && current.is_empty()) {
            continue;
        }
        match trimmed.strip_suffix('\\') {
            Some(part) => {
                current.push_str(part);
                current.push(' ');
            }
            None => {
                current.push_str(trimmed);
                let (instruction, args) = current
                    .split_once(char::is_whitespace)
                    .unwrap_or((current.as_str(), ""));
                out.push((instruction.to_uppercase(), args.trim().to_owned()));
                current.clear();
            }
        }
    }
    out
}

#[test]
fn dockerfile_is_multi_stage_non_root_and_health_checked() {
    let instructions = dockerfile();
    let all = |name: &str| -> Vec<&str> {
        instructions
            .iter()
            .filter(|(i, _)| i == name)
            .map(|(_, a)| a.as_str())
            .collect()
    };
    assert!(all("FROM").len() >= 2, "a multi-stage build needs two FROM");

    let user = *all("USER").last().expect("the image sets USER");
    let name = user.split(':').next().unwrap_or_default();
    assert!(
        name != "root" && name != "0",
        "the runtime USER must not be root, not {user}"
    );
    // The last USER must come after the last FROM, i.e. apply to the runtime stage.
    let last = |name: &str| instructions.iter().rposition(|(i, _)| i == name);
    assert!(
        last("USER") > last("FROM"),
        "USER must be set in the runtime stage"
    );

    // The binary probes /healthz itself (`plangate health`, following PLANGATE_BIND):
    // the runtime image needs no HTTP client.
    let health = all("HEALTHCHECK");
    assert!(
        health
            .last()
            .is_some_and(|h| h.contains(r#"["/usr/local/bin/plangate", "health"]"#)),
        "HEALTHCHECK must run `plangate health`, not {health:?}"
    );
    let runtime_from = instructions
        .iter()
        .rposition(|(i, _)| i == "FROM")
        .expect("a runtime stage");
    for (instruction, args) in &instructions[runtime_from..] {
        assert!(
            !(instruction == "RUN" && args.contains("curl")),
            "the runtime stage installs curl again: {args}"
        );
    }
    assert_eq!(all("STOPSIGNAL"), ["SIGTERM"]);
    assert!(
        all("EXPOSE")
            .iter()
            .any(|e| e.split_whitespace().any(|p| p == "8080" || p == "8080/tcp"))
    );

    let env = all("ENV").join(" ");
    assert!(
        env.contains("PLANGATE_BIND=0.0.0.0:8080"),
        "ENV must bind 0.0.0.0:8080"
    );
    assert!(
        env.contains("DATABASE_URL=sqlite:///data/"),
        "the SQLite default must live in /data"
    );
    assert!(
        env.contains("SQLX_OFFLINE=true"),
        "the build must not need a database"
    );
    assert!(
        all("VOLUME").iter().any(|v| v.contains("/data")),
        "/data must be a volume"
    );
}

#[test]
fn compose_runs_postgres_and_two_replicas() {
    let compose = yaml(&root().join("docker/compose.yaml"));
    let services = compose["services"]
        .as_object()
        .expect("compose has services");
    let postgres = services.get("postgres").expect("a postgres service");
    let image = postgres["image"].as_str().unwrap_or_default();
    assert!(
        image.starts_with("postgres:15"),
        "Postgres 15 expected, not {image}"
    );
    assert!(
        postgres["healthcheck"]["test"].is_array(),
        "postgres needs a healthcheck"
    );
    assert!(
        array(&postgres["volumes"])
            .iter()
            .any(|v| v.as_str().is_some_and(|v| {
                let source = v.split(':').next().unwrap_or_default();
                compose["volumes"].get(source).is_some()
            })),
        "postgres data must be on a named volume"
    );

    let replicas: Vec<(&String, &Value)> = services
        .iter()
        .filter(|(name, service)| {
            *name != "postgres"
                && (service["image"]
                    .as_str()
                    .is_some_and(|i| i.starts_with("plangate"))
                    || service["build"].is_object())
        })
        .collect();
    assert_eq!(replicas.len(), 2, "two plangate replicas expected");
    let mut host_ports = BTreeSet::new();
    for (name, service) in replicas {
        let env = str_map(&service["environment"]);
        let url = env
            .get("DATABASE_URL")
            .map(String::as_str)
            .unwrap_or_default();
        assert!(
            url.starts_with("postgres://"),
            "{name}: DATABASE_URL must be Postgres, not {url:?}"
        );
        assert_eq!(
            service["depends_on"]["postgres"]["condition"], "service_healthy",
            "{name} must wait for a healthy postgres"
        );
        for port in array(&service["ports"]) {
            let mapping = port.as_str().expect("ports as \"HOST:CONTAINER\"");
            let (host, container) = mapping.rsplit_once(':').expect("HOST:CONTAINER");
            assert_eq!(container, "8080", "{name}: the container listens on 8080");
            assert!(
                host_ports.insert(host.to_owned()),
                "{name}: host port {host} is used twice"
            );
        }
        let stop = service["stop_grace_period"]
            .as_str()
            .and_then(|s| s.strip_suffix('s'));
        let stop: u64 = stop
            .and_then(|s| s.parse().ok())
            .expect("stop_grace_period in seconds, e.g. 40s");
        let grace = env
            .get("PLANGATE_SHUTDOWN_GRACE_SECS")
            .and_then(|g| g.parse().ok())
            .unwrap_or(DEFAULT_SHUTDOWN_GRACE_SECS);
        assert!(
            stop > grace,
            "{name}: stop_grace_period ({stop} s) must exceed the drain ({grace} s)"
        );
    }
    assert_eq!(
        host_ports,
        BTreeSet::from(["8081".to_owned(), "8082".to_owned()])
    );
}

/// docker/security.flags: the `podman run` flags of the container test, comments and
/// blank lines dropped.
fn security_flags() -> BTreeSet<String> {
    read("docker/security.flags")
        .lines()
        .map(|l| l.split('#').next().unwrap_or_default().trim())
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// `256Mi` → `256m` (the tmpfs size unit), only for whole MiB.
fn mebibytes(quantity: &str) -> String {
    let mib = quantity
        .strip_suffix("Mi")
        .and_then(|n| n.parse::<u64>().ok())
        .or_else(|| {
            quantity
                .strip_suffix("Gi")
                .and_then(|n| n.parse::<u64>().ok())
                .map(|g| g * 1024)
        })
        .unwrap_or_else(|| panic!("a size in Mi or Gi expected, not {quantity}"));
    format!("{mib}m")
}

/// The flags the Deployment's security settings call for, derived field by field
/// (the mapping is documented in docker/security.flags). Every field it reads must
/// be present, so removing one from the manifest fails here too.
fn flags_from_deployment(deployment: &Value) -> BTreeSet<String> {
    let pod = &deployment["spec"]["template"]["spec"];
    let pod_security = &pod["securityContext"];
    let container = the_container(deployment);
    let security = &container["securityContext"];
    let mut flags = BTreeSet::new();

    let uid = pod_security["runAsUser"].as_u64().expect("runAsUser");
    let gid = pod_security["runAsGroup"].as_u64().expect("runAsGroup");
    assert_eq!(pod_security["runAsNonRoot"], true, "runAsNonRoot");
    assert_ne!(uid, 0, "runAsNonRoot with runAsUser 0");
    flags.insert(format!("--user={uid}:{gid}"));
    let fs_group = pod_security["fsGroup"].as_u64().expect("fsGroup");
    flags.insert(format!("--group-add={fs_group}"));
    // The engines' default seccomp profile is RuntimeDefault: no flag.
    assert_eq!(pod_security["seccompProfile"]["type"], "RuntimeDefault");

    assert_eq!(security["allowPrivilegeEscalation"], false);
    flags.insert("--security-opt=no-new-privileges".to_owned());
    assert_eq!(security["privileged"], false, "privileged: false (no flag)");
    assert_eq!(security["readOnlyRootFilesystem"], true);
    flags.insert("--read-only".to_owned());
    // Writable only where a volume is mounted, as in Kubernetes.
    flags.insert("--read-only-tmpfs=false".to_owned());
    for dropped in array(&security["capabilities"]["drop"]) {
        flags.insert(format!(
            "--cap-drop={}",
            dropped.as_str().expect("capability names")
        ));
    }
    for added in array(&security["capabilities"]["add"]) {
        flags.insert(format!(
            "--cap-add={}",
            added.as_str().expect("capability names")
        ));
    }

    // Every volume mount: an emptyDir becomes a tmpfs of its size limit.
    let volumes = array(&pod["volumes"]);
    for mount in array(&container["volumeMounts"]) {
        let volume = volumes
            .iter()
            .find(|v| v["name"] == mount["name"])
            .unwrap_or_else(|| panic!("volumeMount {} names no volume", mount["name"]));
        let size = volume["emptyDir"]["sizeLimit"].as_str().unwrap_or_else(|| {
            panic!(
                "volume {} must be an emptyDir with a sizeLimit",
                volume["name"]
            )
        });
        let path = mount["mountPath"].as_str().expect("mountPath");
        flags.insert(format!(
            "--tmpfs={path}:rw,size={},mode=1777",
            mebibytes(size)
        ));
    }

    let grace = pod["terminationGracePeriodSeconds"]
        .as_u64()
        .expect("terminationGracePeriodSeconds");
    flags.insert(format!("--stop-timeout={grace}"));
    flags
}

#[test]
fn container_test_flags_are_the_manifest_security_settings() {
    let all = manifests();
    let expected = flags_from_deployment(object(&all, "Deployment"));
    let actual = security_flags();
    let missing: Vec<&String> = expected.difference(&actual).collect();
    let extra: Vec<&String> = actual.difference(&expected).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "docker/security.flags and docker/k8s/deployment.yaml disagree: \
         missing from the flags {missing:?}, not in the manifest {extra:?}"
    );
    // The container test really uses the file (and no other security flag).
    let script = read(".ci/container.sh");
    assert!(
        script.contains("docker/security.flags"),
        ".ci/container.sh must read docker/security.flags"
    );
    for flag in [
        "--privileged",
        "--cap-add",
        "seccomp=unconfined",
        "--user=0",
        "--user=root",
    ] {
        assert!(
            !script.contains(flag),
            ".ci/container.sh adds {flag} beside docker/security.flags"
        );
    }
}

/// The Dockerfile's dependency layer builds a placeholder crate, and cargo refuses a
/// manifest whose declared targets have no source file: every `[[bench]]` of
/// Cargo.toml needs its stub there, or the image stops building.
#[test]
fn dockerfile_stubs_every_declared_bench() {
    let manifest: toml::Value = toml::from_str(&read("Cargo.toml")).expect("Cargo.toml parses");
    let benches: Vec<String> = manifest
        .get("bench")
        .and_then(toml::Value::as_array)
        .map(|list| {
            list.iter()
                .filter_map(|b| b.get("name").and_then(toml::Value::as_str))
                .map(|name| format!("benches/{name}.rs"))
                .collect()
        })
        .unwrap_or_default();
    assert!(!benches.is_empty(), "Cargo.toml declares benches");
    let stub_layer = dockerfile()
        .into_iter()
        .find(|(instruction, args)| instruction == "RUN" && args.contains("fn main() {}"))
        .map(|(_, args)| args)
        .expect("the dependency layer's RUN");
    for bench in &benches {
        assert!(
            stub_layer.split_whitespace().any(|word| word == bench),
            "docker/Dockerfile's dependency layer has no stub for {bench}"
        );
    }
}
