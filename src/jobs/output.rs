//! Result files (docs/spec/refine.md §6): `{dir}/refine_contexts/{phase_id}_result.json`,
//! written atomically (temp file in the same directory, fsync, rename) so a reader
//! never sees half a file and a crash never leaves one.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// Writes the result and returns its absolute path. `phase_id` is a validated id
/// (`[A-Za-z0-9_-]+`), so the file name cannot leave the directory.
pub fn write_result(dir: &Path, phase_id: &str, result: &Value) -> std::io::Result<PathBuf> {
    let target_dir = dir.join("refine_contexts");
    write_json_atomic(&target_dir, &format!("{phase_id}_result.json"), result)
}

/// Writes `value` as pretty JSON to `dir/name` atomically; returns the absolute path.
pub fn write_json_atomic(dir: &Path, name: &str, value: &Value) -> std::io::Result<PathBuf> {
    std::fs::create_dir_all(dir)?;
    let dir = dir.canonicalize()?;
    let target = dir.join(name);
    let temp = dir.join(format!(".{name}.{}.tmp", uuid::Uuid::new_v4().simple()));
    let mut text = serde_json::to_vec_pretty(value).map_err(std::io::Error::other)?;
    text.push(b'\n');
    let written = (|| {
        let mut file = std::fs::File::create(&temp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        std::fs::rename(&temp, &target)
    })();
    if written.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    written.map(|()| target)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writes_atomically_and_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let first = write_result(dir.path(), "P1", &serde_json::json!({"a": 1})).unwrap();
        assert!(first.is_absolute());
        assert!(first.ends_with("refine_contexts/P1_result.json"));
        write_result(dir.path(), "P1", &serde_json::json!({"a": 2})).unwrap();
        let text = std::fs::read_to_string(&first).unwrap();
        assert_eq!(serde_json::from_str::<Value>(&text).unwrap()["a"], 2);
        let leftovers = std::fs::read_dir(first.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "no temp file is left behind");
    }
}
