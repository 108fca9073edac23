//! Serves what the agent published last: `/metrics` in the format the scraper asks for
//! (exposition.rs, both rendered from the table in metrics.rs), the snapshot at
//! `/snapshot.json`, and the plan with the actuators' state at `/plan.json`. The
//! agent publishes; scrapes never block the control loop for longer than building the table.

use crate::exposition::{self, Format};
use crate::metrics::{self, AgentStats};
use joule_core::control::{ActuatorStatus, Plan};
use joule_core::Snapshot;
use std::sync::{Arc, RwLock};

/// What the agent publishes each period: what it read, what it decided, what its actuators
/// did, and its own counters.
#[derive(Debug, Default)]
pub struct Published {
    pub snapshot: Snapshot,
    pub plan: Plan,
    pub actuators: Vec<ActuatorStatus>,
    pub agent: AgentStats,
}

pub type Shared = Arc<RwLock<Published>>;

/// Renders what is published in `format`.
pub fn render(shared: &Shared, format: Format) -> String {
    let families = {
        let p = shared.read().unwrap_or_else(|e| e.into_inner());
        let mut f = metrics::families(&p.snapshot, &p.agent);
        f.extend(metrics::control_families(&p.plan, &p.actuators));
        f
    };
    exposition::render(format, families)
}

/// The request's `Accept` header, several joined as one list (RFC 9110 allows either).
fn accept(req: &tiny_http::Request) -> Option<String> {
    let values: Vec<&str> = req.headers().iter().filter(|h| h.field.equiv("Accept")).map(|h| h.value.as_str()).collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// Starts the HTTP server on its own thread. Returns the bound address (useful with port 0).
pub fn serve(addr: &str, shared: Shared) -> anyhow::Result<std::net::SocketAddr> {
    let server = tiny_http::Server::http(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = server.server_addr().to_ip().ok_or_else(|| anyhow::anyhow!("{addr} is not an IP address"))?;
    std::thread::Builder::new().name("joule-metrics".into()).spawn(move || {
        for req in server.incoming_requests() {
            let (body, ctype, code) = match req.url() {
                "/metrics" => {
                    let format = exposition::negotiate(accept(&req).as_deref());
                    (render(&shared, format), format.content_type(), 200)
                }
                "/snapshot.json" => {
                    let p = shared.read().unwrap_or_else(|e| e.into_inner());
                    (serde_json::to_string(&p.snapshot).unwrap_or_default(), "application/json", 200)
                }
                "/plan.json" => {
                    let p = shared.read().unwrap_or_else(|e| e.into_inner());
                    let body = serde_json::json!({ "plan": p.plan, "actuators": p.actuators });
                    (body.to_string(), "application/json", 200)
                }
                "/" => (
                    "joule agent: /metrics (Prometheus text; OpenMetrics on request), /snapshot.json (readings), /plan.json (decisions and actuators)\n"
                        .to_string(),
                    "text/plain",
                    200,
                ),
                _ => ("not found\n".to_string(), "text/plain", 404),
            };
            let header = tiny_http::Header::from_bytes("Content-Type", ctype).expect("static header is valid");
            let _ = req.respond(tiny_http::Response::from_string(body).with_header(header).with_status_code(code));
        }
    })?;
    Ok(bound)
}
