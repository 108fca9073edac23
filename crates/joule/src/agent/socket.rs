//! The running agent's view for the machine's own root tools (`joule status`, issue 38): a Unix
//! socket `agent.sock` in the journal directory (0700, root's: only root reaches it), mode 0600.
//! Each connection gets one JSON document, [`View`]: what the loop published last (the snapshot,
//! the plan, the actuators' state, the agent's counters) and the budget it acts against; then
//! the socket closes. Nothing is read from the client, so there is no request to parse; a
//! client that does not read is dropped after [`WRITE_TIMEOUT`]. The agent removes the socket
//! when it stops; one a killed agent left refuses connections, and the next agent replaces it.
//! The client side, which checks what answers before it believes it, is `agent_client.rs`.

use crate::exporter::Shared;
use serde::Serialize;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The socket's name in the journal directory.
pub const SOCKET: &str = "agent.sock";
/// How long one client may take to read the view.
pub const WRITE_TIMEOUT: Duration = Duration::from_secs(2);

/// What the agent acts against, beside what it published.
#[derive(Debug, Clone, Default, Serialize, serde::Deserialize)]
pub struct Budget {
    /// The stage thresholds, °C, and where they came from (`config`, a trip point, built-in).
    pub thresholds_celsius: Vec<f64>,
    pub thresholds_from: String,
    /// The sensors the stage follows.
    pub sensors: Vec<String>,
    /// `thermal.power_thresholds_watts`, when a power budget is set.
    pub power_thresholds_watts: Vec<f64>,
    /// The loop's period and rest, ms.
    pub period_ms: u64,
    pub rest_period_ms: u64,
    pub pid: u32,
    pub started_unix_ms: u64,
    pub metrics_url: String,
    /// The classes as configured (what each is promised or limited to).
    pub classes: Vec<joule_core::config::ClassConfig>,
}

/// One connection's document.
#[derive(Serialize)]
struct View<'a> {
    budget: &'a Budget,
    snapshot: &'a joule_core::Snapshot,
    plan: &'a joule_core::control::Plan,
    actuators: &'a [joule_core::control::ActuatorStatus],
    agent: &'a crate::metrics::AgentStats,
    /// How long ago the loop published this, ms.
    published_ms_ago: Option<u64>,
}

/// The socket, removed when dropped.
pub struct StatusSocket {
    path: PathBuf,
}

impl StatusSocket {
    /// Binds `dir/agent.sock` (replacing one a killed agent left: the caller holds the agent
    /// lock) and serves `shared` from a thread of its own.
    pub fn open(dir: &Path, shared: Shared, budget: Budget) -> std::io::Result<StatusSocket> {
        let path = dir.join(SOCKET);
        if std::fs::symlink_metadata(&path).is_ok_and(|m| std::os::unix::fs::FileTypeExt::is_socket(&m.file_type())) {
            std::fs::remove_file(&path)?;
        }
        let listener = UnixListener::bind(&path)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        std::thread::Builder::new().name("joule-status".into()).spawn(move || {
            for conn in listener.incoming() {
                let Ok(mut conn) = conn else { continue };
                let _ = conn.set_write_timeout(Some(WRITE_TIMEOUT));
                let body = {
                    let p = shared.read().unwrap_or_else(|e| e.into_inner());
                    let view = View {
                        budget: &budget,
                        snapshot: &p.snapshot,
                        plan: &p.plan,
                        actuators: &p.actuators,
                        agent: &p.agent,
                        published_ms_ago: p.published_at.map(|t| t.elapsed().as_millis() as u64),
                    };
                    serde_json::to_vec(&view).unwrap_or_default()
                };
                let _ = conn.write_all(&body);
            }
        })?;
        Ok(StatusSocket { path })
    }
}

impl Drop for StatusSocket {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}
