//! Where the copies of inline task text live while their job runs (docs/jobs.md,
//! "Task files"). The text is the client's, often private: no other user of the
//! host may read it, and none may plant or swap the files an L0 is pointed at.
//!
//! ```text
//! PLANGATE_TASK_DIR/            0700, owned by the server's user (checked at start)
//!   <worker_id>.lock            held (flock) by the live server of that worker id
//!   <worker_id>/                0700, this server's copies
//!     <job_id>.md               0600, removed when the job's run ends
//! ```
//!
//! Several servers of one user on one host (replicas, tests) share the directory:
//! each writes only into its own subdirectory and sweeps, at start, only the
//! subdirectories whose lock no living process holds — a SIGKILLed server's
//! leftovers. A lock is released by the kernel when its holder dies, however it
//! dies, so a running job's file is never swept, however long it runs.

use std::fs::{DirBuilder, File, OpenOptions};
use std::io::Write as _;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

use uuid::Uuid;

/// This server's private task-file directory; removed (with its lock) on drop.
#[derive(Debug)]
pub struct TaskDir {
    own: PathBuf,
    lock_path: PathBuf,
    /// Held for the life of the server: the kernel drops the lock when it dies.
    _lock: File,
}

impl TaskDir {
    /// Checks (or creates) `root` as a private directory of this user, sweeps what
    /// dead servers left in it, and makes this server's subdirectory. The error
    /// names the directory, what is wrong and what to do.
    pub fn open(root: &Path, worker_id: Uuid) -> Result<TaskDir, String> {
        private_dir(root)?;
        sweep(root);
        let lock_path = root.join(format!("{worker_id}.lock"));
        let lock = create_private(&lock_path)?;
        if !try_lock(&lock) {
            return Err(format!("cannot lock {}", lock_path.display()));
        }
        // The lock exists before the directory: a directory without a lock file is
        // always a dead server's (see `sweep`).
        let own = root.join(worker_id.to_string());
        DirBuilder::new()
            .mode(0o700)
            .create(&own)
            .map_err(|e| format!("cannot create {}: {e}", own.display()))?;
        Ok(TaskDir {
            own,
            lock_path,
            _lock: lock,
        })
    }

    /// Writes a job's task text to a new file only this user can read; returns
    /// its path.
    pub fn write(&self, job_id: Uuid, text: &str) -> Result<PathBuf, String> {
        let path = self.own.join(format!("{job_id}.md"));
        // A copy left by an earlier run of the job in this process is replaced.
        let _ = std::fs::remove_file(&path);
        let mut file = create_private(&path)?;
        file.write_all(text.as_bytes())
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
        Ok(path)
    }

    /// This server's subdirectory.
    pub fn path(&self) -> &Path {
        &self.own
    }
}

impl Drop for TaskDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.own);
        let _ = std::fs::remove_file(&self.lock_path);
    }
}

/// A new file only this user can read or write; never through a symlink.
fn create_private(path: &Path) -> Result<File, String> {
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| format!("cannot create {}: {e}", path.display()))
}

/// `root` exists as a directory (created 0700 when missing), is no symlink, is
/// owned by this user and open to no one else (a group or other bit is removed).
fn private_dir(root: &Path) -> Result<(), String> {
    let shown = root.display();
    let what_to_do = "remove it, or set PLANGATE_TASK_DIR to a directory of this user";
    if let Some(parent) = root.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    match DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {shown}: {e}")),
    }
    let meta = std::fs::symlink_metadata(root).map_err(|e| format!("cannot read {shown}: {e}"))?;
    if meta.file_type().is_symlink() {
        let target = std::fs::read_link(root)
            .map(|t| t.display().to_string())
            .unwrap_or_else(|_| "?".to_owned());
        return Err(format!(
            "{shown} is a symlink (to {target}), not a directory of its own: {what_to_do}"
        ));
    }
    if !meta.is_dir() {
        return Err(format!("{shown} is not a directory: {what_to_do}"));
    }
    // SAFETY: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        return Err(format!(
            "{shown} is owned by uid {}, not by this server's user (uid {me}): other users \
             could read or replace the task files in it; {what_to_do}",
            meta.uid()
        ));
    }
    let mode = meta.mode() & 0o7777;
    if mode & 0o077 != 0 {
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700))
            .map_err(|e| format!("{shown} has mode {mode:o} and cannot be made 0700: {e}"))?;
        tracing::warn!(dir = %shown, was = format!("{mode:o}"), "task-file directory was open to others: made 0700");
    }
    Ok(())
}

/// Removes what servers that are gone left in `root`: the subdirectory of each
/// lock file nobody holds (and the lock), subdirectories without a lock file and
/// any other file. Best effort: what cannot be removed stays.
fn sweep(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    let mut dirs = Vec::new();
    let mut locks = Vec::new();
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else {
            continue;
        };
        if kind.is_dir() {
            dirs.push(path);
        } else if path.extension().is_some_and(|e| e == "lock") && kind.is_file() {
            locks.push(path);
        } else {
            let _ = std::fs::remove_file(&path);
        }
    }
    let mut swept = 0;
    for lock_path in &locks {
        let Ok(file) = OpenOptions::new()
            .write(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(lock_path)
        else {
            continue;
        };
        if try_lock(&file) {
            let _ = std::fs::remove_dir_all(lock_path.with_extension(""));
            let _ = std::fs::remove_file(lock_path);
            swept += 1;
        }
    }
    for dir in dirs {
        if !dir.with_extension("lock").exists() {
            let _ = std::fs::remove_dir_all(&dir);
            swept += 1;
        }
    }
    if swept > 0 {
        tracing::info!(dir = %root.display(), swept, "removed the task files of servers that are gone");
    }
}

/// An exclusive lock on `file`, without waiting: false when another open file
/// (another server) holds it.
fn try_lock(file: &File) -> bool {
    // SAFETY: flock on an fd we own.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}
