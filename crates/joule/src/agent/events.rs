//! The agent's JSON-lines event log: one object per line with `ts_ms` and `event`. A file log
//! is capped: past `agent.event_log_max_bytes` it is renamed to `<name>.1` (replacing the
//! previous one) and a new one is started, so it never holds more than twice the cap.

use anyhow::Context;
use joule_core::clock;
use joule_core::private_fs::{self, Access};
use std::fs::File;
use std::io::Write;
use std::os::fd::{AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

pub struct Events(Sink);

enum Sink {
    Stdout(std::io::Stdout),
    File(Rotating),
}

/// A log file in a judged private directory, rotated at `max_bytes`.
struct Rotating {
    dir_fd: OwnedFd,
    dir: PathBuf,
    name: String,
    file: File,
    bytes: u64,
    max_bytes: u64,
}

impl Rotating {
    /// Moves the full log to `<name>.1` and starts a new one, both relative to the directory
    /// judged at open; on failure the old file keeps growing and the error is logged.
    fn rotate(&mut self) {
        let old = format!("{}.1", self.name);
        let renamed = nix::fcntl::renameat(Some(self.dir_fd.as_raw_fd()), self.name.as_str(), Some(self.dir_fd.as_raw_fd()), old.as_str());
        match renamed
            .map_err(std::io::Error::from)
            .and_then(|()| private_fs::open_in(&self.dir_fd, &self.dir, &self.name, Access::Append).map_err(std::io::Error::other))
        {
            Ok(f) => (self.file, self.bytes) = (f, 0),
            Err(e) => tracing::warn!("could not rotate the event log {}/{}: {e}", self.dir.display(), self.name),
        }
    }
}

impl Events {
    /// Appends to `path` (created 0600 with its directory, 0700, and as private as the journal:
    /// `joule_core::private_fs`), capped at `max_bytes`, or writes to stdout for `-`.
    pub fn open(path: &Path, max_bytes: u64) -> anyhow::Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(Events(Sink::Stdout(std::io::stdout())));
        }
        let what = || format!("while opening event log {}", path.display());
        let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
            anyhow::bail!("event log {} is not a file path", path.display());
        };
        let dir_fd = private_fs::private_dir(dir).with_context(what)?;
        let file = private_fs::open_in(&dir_fd, dir, name, Access::Append).with_context(what)?;
        let bytes = file.metadata().map(|m| m.len()).unwrap_or(0);
        let mut r = Rotating { dir_fd, dir: dir.to_path_buf(), name: name.to_string(), file, bytes, max_bytes };
        if r.bytes >= max_bytes {
            r.rotate();
        }
        Ok(Events(Sink::File(r)))
    }

    pub fn emit(&mut self, event: &str, fields: serde_json::Value) {
        let mut obj = serde_json::json!({ "ts_ms": clock::now_ms(), "event": event });
        if let (Some(o), serde_json::Value::Object(f)) = (obj.as_object_mut(), fields) {
            o.extend(f);
        }
        let line = format!("{obj}\n");
        match &mut self.0 {
            Sink::Stdout(out) => {
                let _ = out.write_all(line.as_bytes());
                let _ = out.flush();
            }
            Sink::File(r) => {
                if r.bytes + line.len() as u64 > r.max_bytes && r.bytes > 0 {
                    r.rotate();
                }
                if r.file.write_all(line.as_bytes()).is_ok() {
                    r.bytes += line.len() as u64;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Written past the cap: the log and its one predecessor, each within the cap, every line
    /// whole, the newest events in the live file.
    #[test]
    fn the_event_log_rotates_at_its_cap_and_keeps_one_old_file() {
        let dir = tempfile::tempdir().unwrap();
        let log_dir = dir.path().join("run");
        let path = log_dir.join("events.jsonl");
        let mut ev = Events::open(&path, 4096).unwrap();
        for i in 0..1000 {
            ev.emit("tick", serde_json::json!({ "i": i, "pad": "x".repeat(40) }));
        }
        let live = std::fs::read_to_string(&path).unwrap();
        let old = std::fs::read_to_string(log_dir.join("events.jsonl.1")).unwrap();
        assert!(live.len() <= 4096 && old.len() <= 4096, "{} and {} bytes", live.len(), old.len());
        assert!(old.len() > 3000, "the rotated file was full: {} bytes", old.len());
        let last: serde_json::Value = serde_json::from_str(live.lines().last().unwrap()).unwrap();
        assert_eq!(last["i"], 999);
        for l in live.lines().chain(old.lines()) {
            serde_json::from_str::<serde_json::Value>(l).unwrap();
        }
        let files = std::fs::read_dir(&log_dir).unwrap().count();
        assert_eq!(files, 2, "one live file and one old one");
        // Reopened over the cap (a restart): rotated before the first event.
        drop(ev);
        std::fs::write(&path, "x".repeat(5000)).unwrap();
        let mut ev = Events::open(&path, 4096).unwrap();
        ev.emit("start", serde_json::json!({}));
        let fresh = std::fs::read_to_string(&path).unwrap();
        let first: serde_json::Value = serde_json::from_str(fresh.lines().next().unwrap()).unwrap();
        assert_eq!((first["event"].as_str(), fresh.lines().count()), (Some("start"), 1), "a fresh file after a restart over the cap");
    }
}
