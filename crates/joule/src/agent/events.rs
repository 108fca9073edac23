//! The agent's JSON-lines event log: one object per line with `ts_ms` and `event`.

use anyhow::Context;
use joule_core::clock;
use joule_core::private_fs::{self, Access};
use std::io::Write;
use std::path::Path;

pub struct Events(Box<dyn Write + Send>);

impl Events {
    /// Appends to `path` (created 0600 with its directory, 0700, and as private as the journal:
    /// `joule_core::private_fs`), or writes to stdout for `-`.
    pub fn open(path: &Path) -> anyhow::Result<Self> {
        if path.as_os_str() == "-" {
            return Ok(Events(Box::new(std::io::stdout())));
        }
        let f = private_fs::open_private(path, Access::Append).with_context(|| format!("while opening event log {}", path.display()))?;
        Ok(Events(Box::new(f)))
    }

    pub fn emit(&mut self, event: &str, fields: serde_json::Value) {
        let mut obj = serde_json::json!({ "ts_ms": clock::now_ms(), "event": event });
        if let (Some(o), serde_json::Value::Object(f)) = (obj.as_object_mut(), fields) {
            o.extend(f);
        }
        let _ = writeln!(self.0, "{obj}");
        let _ = self.0.flush();
    }
}
