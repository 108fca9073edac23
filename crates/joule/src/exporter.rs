//! Serves the latest snapshot: Prometheus text at `/metrics` (rendered by prometheus-client
//! from the table in metrics.rs) and the raw snapshot at `/snapshot.json`. The agent publishes;
//! scrapes never block the control loop for longer than a clone.

use crate::metrics::{self, AgentStats, Kind};
use joule_core::Snapshot;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::registry::Registry;
use std::sync::{Arc, RwLock};

#[derive(Debug, Default)]
pub struct Published {
    pub snapshot: Snapshot,
    pub agent: AgentStats,
}

pub type Shared = Arc<RwLock<Published>>;

#[derive(Debug)]
struct SnapshotCollector(Shared);

impl prometheus_client::collector::Collector for SnapshotCollector {
    fn encode(&self, mut enc: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let p = self.0.read().unwrap_or_else(|e| e.into_inner());
        for fam in metrics::families(&p.snapshot, &p.agent) {
            let kind = match fam.def.kind {
                Kind::Gauge => prometheus_client::metrics::MetricType::Gauge,
                Kind::Counter => prometheus_client::metrics::MetricType::Counter,
            };
            let mut m = enc.encode_descriptor(fam.def.name, fam.def.help, None, kind)?;
            for (labels, v) in &fam.samples {
                let fm = m.encode_family(labels)?;
                match fam.def.kind {
                    Kind::Gauge => ConstGauge::new(*v).encode(fm)?,
                    Kind::Counter => ConstCounter::new(v.max(0.0)).encode(fm)?,
                }
            }
        }
        Ok(())
    }
}

/// Renders the Prometheus text exposition of what is published.
pub fn render(shared: &Shared) -> String {
    let mut reg = Registry::default();
    reg.register_collector(Box::new(SnapshotCollector(shared.clone())));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &reg).expect("writing to a String cannot fail");
    out
}

/// Starts the HTTP server on its own thread. Returns the bound address (useful with port 0).
pub fn serve(addr: &str, shared: Shared) -> anyhow::Result<std::net::SocketAddr> {
    let server = tiny_http::Server::http(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    let bound = server.server_addr().to_ip().ok_or_else(|| anyhow::anyhow!("{addr} is not an IP address"))?;
    std::thread::Builder::new().name("joule-metrics".into()).spawn(move || {
        for req in server.incoming_requests() {
            let (body, ctype, code) = match req.url() {
                "/metrics" => (render(&shared), "application/openmetrics-text; version=1.0.0; charset=utf-8", 200),
                "/snapshot.json" => {
                    let p = shared.read().unwrap_or_else(|e| e.into_inner());
                    (serde_json::to_string(&p.snapshot).unwrap_or_default(), "application/json", 200)
                }
                "/" => ("joule agent: /metrics (Prometheus text), /snapshot.json\n".to_string(), "text/plain", 200),
                _ => ("not found\n".to_string(), "text/plain", 404),
            };
            let header = tiny_http::Header::from_bytes("Content-Type", ctype).expect("static header is valid");
            let _ = req.respond(tiny_http::Response::from_string(body).with_header(header).with_status_code(code));
        }
    })?;
    Ok(bound)
}
