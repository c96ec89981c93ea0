//! What a refine job stores as its request, and the server-side paths it may name.
//! The HTTP layer validates a submission into a [`JobRequest`]; a worker (maybe
//! on another replica, maybe after a restart) turns it back into a [`RefineJob`].

use std::path::{Component, Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::Value;
use uuid::Uuid;

use super::engine::RefineJob;
use super::task_files::TaskDir;
use crate::domain::refine::{context_from_value, plan_from_value};

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobRequest {
    /// The phase context as submitted (unknown keys kept).
    pub context: Value,
    pub refined_plan: Option<Value>,
    /// Absolute, inside the workspace root (checked at submit).
    pub task_file_path: Option<String>,
    /// Inline task text; the worker writes it to a file the L0s are pointed at.
    pub task_text: Option<String>,
    /// Absolute, inside the output root (checked at submit).
    pub output_dir: Option<String>,
}

/// Files that live as long as one run of a job.
#[derive(Debug, Default)]
pub struct JobFiles {
    pub output_dir: Option<PathBuf>,
    task_copy: Option<PathBuf>,
}

impl Drop for JobFiles {
    fn drop(&mut self) {
        if let Some(path) = &self.task_copy {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl JobRequest {
    pub fn parse(value: &Value) -> Result<Self, String> {
        serde_json::from_value(value.clone()).map_err(|e| format!("stored request: {e}"))
    }

    pub fn to_value(&self) -> Value {
        serde_json::to_value(self).unwrap_or(Value::Null)
    }

    /// The job to run. Inline task text is copied to a private file in `task_dir`
    /// whose path the prompt carries; no `task_dir` (an executor that opens no
    /// file: `builtin`) names no file, so a job of such L0s touches no disk.
    pub fn into_job(
        self,
        job_id: Uuid,
        task_dir: Option<&TaskDir>,
    ) -> Result<(RefineJob, JobFiles), String> {
        let mut context =
            context_from_value("stored request", &self.context).map_err(|e| e.to_string())?;
        let plan = match &self.refined_plan {
            None | Some(Value::Null) => None,
            Some(v) => Some(plan_from_value("stored request", v).map_err(|e| e.to_string())?),
        };
        let mut files = JobFiles {
            output_dir: self.output_dir.map(PathBuf::from),
            task_copy: None,
        };
        let task_text = self.task_text.or_else(|| context.task_text.clone());
        let task_file = match (self.task_file_path, task_text, task_dir) {
            (Some(path), _, _) => Some(path),
            (None, Some(text), Some(task_dir)) => {
                // The prompt carries a path, never the text (docs/spec/refine.md §1).
                let path = task_dir.write(job_id, &text)?;
                files.task_copy = Some(path.clone());
                Some(path.display().to_string())
            }
            (None, _, _) => None,
        };
        // The L0 packets name the file the server resolved, not the client's spelling.
        context.task_file_path = task_file.clone();
        Ok((
            RefineJob {
                job_id,
                context,
                plan,
                task_file,
            },
            files,
        ))
    }
}

/// `requested` (absolute, or relative to `root`) resolved inside `root`. `..` is
/// refused outright; the existing part of the path is canonicalised so a symlink
/// cannot lead out of the root. `must_be_file`: the path must name a readable file.
pub fn confine(root: &Path, requested: &str, must_be_file: bool) -> Result<PathBuf, String> {
    let root = root
        .canonicalize()
        .map_err(|e| format!("the configured root {} is not usable: {e}", root.display()))?;
    let requested_path = Path::new(requested);
    if requested.is_empty() || requested.contains('\0') {
        return Err("must be a non-empty path".into());
    }
    if requested_path
        .components()
        .any(|c| matches!(c, Component::ParentDir))
    {
        return Err(format!("{requested:?} contains '..'"));
    }
    let joined = if requested_path.is_absolute() {
        requested_path.to_path_buf()
    } else {
        root.join(requested_path)
    };
    // Canonicalise the longest existing ancestor; the rest has no `..` in it.
    let mut existing = joined.as_path();
    let mut rest = Vec::new();
    let canonical = loop {
        match existing.canonicalize() {
            Ok(c) => break c,
            Err(_) => match (existing.parent(), existing.file_name()) {
                (Some(parent), Some(name)) => {
                    rest.push(name.to_owned());
                    existing = parent;
                }
                _ => return Err(format!("{requested:?} cannot be resolved")),
            },
        }
    };
    let resolved = rest.iter().rev().fold(canonical, |p, n| p.join(n));
    if !resolved.starts_with(&root) {
        return Err(format!(
            "{requested:?} is outside the configured root {}",
            root.display()
        ));
    }
    if must_be_file && !resolved.is_file() {
        return Err(format!("{requested:?} is not a readable file"));
    }
    Ok(resolved)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn confine_keeps_paths_inside_the_root() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::write(root.join("task.md"), "t").unwrap();
        std::fs::create_dir(root.join("sub")).unwrap();
        let canon = root.canonicalize().unwrap();

        assert_eq!(
            confine(root, "task.md", true).unwrap(),
            canon.join("task.md")
        );
        let abs = canon.join("task.md").display().to_string();
        assert_eq!(confine(root, &abs, true).unwrap(), canon.join("task.md"));
        assert_eq!(
            confine(root, "sub/new/dir", false).unwrap(),
            canon.join("sub/new/dir")
        );

        let refusal = |path: &str, must_exist| confine(root, path, must_exist).unwrap_err();
        assert!(refusal("../x", false).contains(".."));
        assert!(confine(root, "sub/../../x", false).is_err());
        assert!(refusal("/etc/passwd", true).contains("outside"));
        assert!(refusal("missing.md", true).contains("not a readable file"));
        assert!(confine(root, "sub", true).is_err());
        assert!(confine(root, "", false).is_err());

        #[cfg(unix)]
        {
            std::os::unix::fs::symlink("/etc", root.join("escape")).unwrap();
            assert!(refusal("escape/passwd", true).contains("outside"));
            assert!(refusal("escape/new", false).contains("outside"));
        }
    }
}
