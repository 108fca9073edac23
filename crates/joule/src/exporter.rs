//! Serves what the agent published last: `/metrics` in the format the scraper asks for
//! (exposition.rs, both rendered from the table in metrics.rs), the snapshot at
//! `/snapshot.json`, and the plan with the actuators' state at `/plan.json`. The agent
//! publishes; scrapes never block the control loop for longer than building the table. A
//! scrape is served from the reading there is, with its age; a stale one asks the loop for a
//! new one, at most once per rest period (freshen.rs).
//!
//! Anyone who can reach the address is a client, so the server is bounded (issue 17,
//! docs/security.md): hyper's HTTP/1 on a one-thread tokio runtime, at most
//! [`Limits::max_connections`] connections (a new one evicts an idle connection of the client
//! group holding the most, conn_slots.rs), a deadline to send a request's headers (slowloris), a cap on header size and
//! count, a number of requests per connection and a lifetime per connection (a client that
//! pipelines without reading its replies holds one connection, not the server), and an
//! `accept` error (EMFILE) is logged and retried, never fatal.
//!
//! With `agent.metrics_web_config` (webconfig.rs) it speaks TLS (the handshake has the same
//! deadline as the headers) and asks for basic auth; bcrypt runs on the runtime's single
//! blocking thread, each client group within its budget (auth_budget.rs), so no client's wrong
//! passwords delay another group's login. The budget's turn moves into the blocking job with the
//! check, which is skipped when its connection is gone. One path asks for no credentials: [`HEALTH_PATH`], which a
//! kubelet's probe can reach (it has none to give) and which tells nothing but whether the loop
//! has published yet.

use crate::auth_budget::AuthBudget;
use crate::conn_slots::{Busy, Slots};
use crate::exposition::{self, Format};
use crate::freshen::Freshen;
use crate::metrics::{self, AgentStats};
use crate::webconfig::{Auth, WebConfig};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::{TokioIo, TokioTimer};
use joule_core::control::{ActuatorStatus, Plan};
use joule_core::Snapshot;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};
use std::time::Duration;

/// What the agent publishes each period: what it read, what it decided, what its actuators
/// did, and its own counters.
#[derive(Debug, Default)]
pub struct Published {
    pub snapshot: Snapshot,
    pub plan: Plan,
    pub actuators: Vec<ActuatorStatus>,
    pub agent: AgentStats,
    /// When the loop published this (None: nothing yet), and a number that grows with each
    /// publication.
    pub published_at: Option<std::time::Instant>,
    pub generation: u64,
}

pub type Shared = Arc<RwLock<Published>>;

/// The one path served without credentials (a kubelet's liveness and readiness probes have
/// none): "ok" once the loop has published a reading, 503 "starting" before. It shows no
/// reading, never refreshes one (an anonymous client cannot make the loop run) and costs no
/// bcrypt.
pub const HEALTH_PATH: &str = "/healthz";

/// How much one client may hold of the server.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Open connections at most; one more evicts an idle one of the client group holding the most.
    pub max_connections: usize,
    /// Time to send a request's headers.
    pub header_read_timeout: Duration,
    /// A connection's read buffer (and so its headers' size), bytes.
    pub max_buf_bytes: usize,
    /// Header lines per request.
    pub max_headers: usize,
    /// Requests per connection; the last reply says `Connection: close`.
    pub max_requests: usize,
    /// A connection's whole life.
    pub lifetime: Duration,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_connections: 128,
            header_read_timeout: Duration::from_secs(2),
            max_buf_bytes: 16 * 1024,
            max_headers: 32,
            max_requests: 100,
            lifetime: Duration::from_secs(30),
        }
    }
}

/// What the endpoint may show of other users' processes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Processes {
    /// pids and names in `/metrics` (`joule_task_cpu_wait_ratio`) and `/snapshot.json`.
    Shown,
    /// Left out: /proc hides other users' processes (`hidepid`), or the endpoint is not on
    /// loopback and `agent.metrics_show_processes` is off.
    Hidden,
}

impl Processes {
    /// /proc's own policy first (`hidepid` hides them everywhere), then the address: shown on
    /// loopback, beyond it only when the config says so.
    pub fn policy(proc_hides_pids: bool, loopback: bool, show_beyond_loopback: bool) -> Processes {
        if proc_hides_pids || !(loopback || show_beyond_loopback) {
            Processes::Hidden
        } else {
            Processes::Shown
        }
    }
}

/// Renders what is published in `format`.
pub fn render(shared: &Shared, format: Format, procs: Processes) -> String {
    let families = {
        let p = shared.read().unwrap_or_else(|e| e.into_inner());
        let hidden;
        let snap = match procs {
            Processes::Shown => &p.snapshot,
            Processes::Hidden => {
                hidden = without_processes(&p.snapshot);
                &hidden
            }
        };
        let mut f = metrics::families(snap, &p.agent);
        f.extend(metrics::control_families(&p.plan, &p.actuators));
        f
    };
    exposition::render(format, families)
}

/// The snapshot without per-process names and pids.
fn without_processes(s: &Snapshot) -> Snapshot {
    Snapshot { task_wait: Vec::new(), ..s.clone() }
}

/// Keys whose values name processes or threads.
const PROCESS_KEYS: &[&str] = &["pid", "pids", "tid", "tids", "ppid", "comm", "comms", "threads", "members"];

/// The plan and actuators' state without processes' identities, where they are hidden (issue
/// 33): keys that hold pids, tids or names go, and a number after "pid", "tid", "thread" or
/// "process" in a text (a decision's reason, an actuator's note) is masked.
fn scrub_processes(v: &mut serde_json::Value) {
    match v {
        serde_json::Value::Object(m) => {
            m.retain(|k, _| !PROCESS_KEYS.contains(&k.as_str()));
            m.values_mut().for_each(scrub_processes);
        }
        serde_json::Value::Array(a) => a.iter_mut().for_each(scrub_processes),
        serde_json::Value::String(s) => *s = mask_ids(s),
        _ => {}
    }
}

/// `text` with the number that follows "pid", "tid", "thread" or "process" (any case, plural
/// too) replaced by `…`.
fn mask_ids(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut after_word, mut in_list) = (false, false);
    for token in text.split_inclusive(' ') {
        let word = token.trim_end().trim_matches(|c: char| !c.is_alphanumeric()).to_ascii_lowercase();
        let masked = after_word && token.starts_with(|c: char| c.is_ascii_digit());
        if masked {
            out.push('…');
            out.push_str(token.trim_start_matches(|c: char| c.is_ascii_digit()));
        } else {
            out.push_str(token);
        }
        // A list of them ("threads 13, 14 and 15") is masked to its end.
        let id_word = matches!(word.trim_end_matches('s'), "pid" | "tid" | "thread" | "process" | "processe");
        after_word = id_word || masked || (word == "and" && in_list);
        in_list = masked || (word == "and" && in_list);
    }
    out
}

/// The request's `Accept` header, several joined as one list (RFC 9110 allows either).
fn accept(req: &Request<Incoming>) -> Option<String> {
    let values: Vec<&str> = req.headers().get_all(hyper::header::ACCEPT).iter().filter_map(|v| v.to_str().ok()).collect();
    (!values.is_empty()).then(|| values.join(","))
}

/// (body, content type, status) for one request.
fn answer(shared: &Shared, req: &Request<Incoming>, procs: Processes) -> (String, &'static str, StatusCode) {
    match req.uri().path() {
        "/metrics" => {
            let format = exposition::negotiate(accept(req).as_deref());
            (render(shared, format, procs), format.content_type(), StatusCode::OK)
        }
        "/snapshot.json" => {
            let p = shared.read().unwrap_or_else(|e| e.into_inner());
            let body = match procs {
                Processes::Shown => serde_json::to_string(&p.snapshot),
                Processes::Hidden => serde_json::to_string(&without_processes(&p.snapshot)),
            };
            (body.unwrap_or_default(), "application/json", StatusCode::OK)
        }
        "/plan.json" => {
            let p = shared.read().unwrap_or_else(|e| e.into_inner());
            let mut body = serde_json::json!({ "plan": p.plan, "actuators": p.actuators, "pace": p.agent.pace });
            if procs == Processes::Hidden {
                scrub_processes(&mut body);
            }
            (body.to_string(), "application/json", StatusCode::OK)
        }
        HEALTH_PATH => health(shared),
        "/" => (
            "joule agent: /metrics (Prometheus text; OpenMetrics on request), /snapshot.json (readings), /plan.json (decisions and actuators), /healthz\n"
                .to_string(),
            "text/plain",
            StatusCode::OK,
        ),
        _ => ("not found\n".to_string(), "text/plain", StatusCode::NOT_FOUND),
    }
}

/// [`HEALTH_PATH`]'s answer: whether the loop has published, and nothing else.
fn health(shared: &Shared) -> (String, &'static str, StatusCode) {
    if shared.read().unwrap_or_else(|e| e.into_inner()).published_at.is_some() {
        ("ok\n".to_string(), "text/plain", StatusCode::OK)
    } else {
        ("starting\n".to_string(), "text/plain", StatusCode::SERVICE_UNAVAILABLE)
    }
}

/// Whether `procfs` is mounted with `hidepid` (other users' processes hidden from /proc).
pub fn proc_hides_pids(procfs: &std::path::Path) -> bool {
    joule_core::mountinfo::read(std::path::Path::new("/proc/self/mountinfo")).iter().any(|m| m.mount_point == procfs && m.hides_pids())
}

/// What every connection shares.
#[derive(Clone)]
struct Server {
    shared: Shared,
    procs: Processes,
    limits: Limits,
    web: Option<Arc<WebConfig>>,
    budget: Arc<AuthBudget>,
    freshen: Option<Freshen>,
}

/// Starts the HTTP server on its own thread (one tokio worker, one blocking thread for
/// bcrypt). Returns the bound address (useful with port 0). With `freshen`, a scrape of a
/// stale reading asks the loop for a new one (freshen.rs).
pub fn serve(
    addr: &str,
    shared: Shared,
    procs: Processes,
    limits: Limits,
    web: Option<Arc<WebConfig>>,
    freshen: Option<Freshen>,
) -> anyhow::Result<std::net::SocketAddr> {
    let listener = std::net::TcpListener::bind(addr).map_err(|e| anyhow::anyhow!("cannot listen on {addr}: {e}"))?;
    listener.set_nonblocking(true)?;
    let bound = listener.local_addr()?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().max_blocking_threads(1).build()?;
    let server = Server { shared, procs, limits, web, budget: Arc::default(), freshen };
    std::thread::Builder::new().name("joule-metrics".into()).spawn(move || {
        rt.block_on(async move {
            match tokio::net::TcpListener::from_std(listener) {
                Ok(l) => accept_loop(l, server).await,
                Err(e) => tracing::error!("metrics server: {e}"),
            }
        })
    })?;
    Ok(bound)
}

async fn accept_loop(listener: tokio::net::TcpListener, server: Server) {
    let limits = server.limits;
    // Open connections: each holds the sender that closes it when dropped.
    let mut open: Slots<tokio::sync::oneshot::Sender<()>> = Slots::new(limits.max_connections);
    let mut accept_errors = 0u64;
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE/ENFILE/ENOBUFS: out of fds or memory for a moment. Drop a connection
                // of the client group holding the most to free one, wait a little, and go on.
                accept_errors += 1;
                if accept_errors.is_power_of_two() {
                    tracing::warn!("metrics server: accept failed ({e}); {accept_errors} time(s) so far, retrying");
                }
                open.close_one();
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        open.retain_open(|tx| !tx.is_closed());
        let (tx, rx) = tokio::sync::oneshot::channel();
        // When full, the client group holding the most connections loses an idle one (dropping
        // the sender ends that connection), so a flood only ever pushes out its own.
        let busy = Busy::default();
        open.push(peer.ip(), busy.clone(), tx);
        let server = server.clone();
        tokio::spawn(async move {
            let tls = server.web.as_ref().and_then(|w| w.tls.clone());
            let work = async {
                match tls {
                    None => connection(stream, server, peer.ip(), busy).await,
                    Some(cfg) => {
                        let handshake = tokio_rustls::TlsAcceptor::from(cfg).accept(stream);
                        if let Ok(Ok(s)) = tokio::time::timeout(limits.header_read_timeout, handshake).await {
                            connection(s, server, peer.ip(), busy).await
                        }
                    }
                }
            };
            tokio::select! {
                _ = work => {}
                _ = rx => {}
                _ = tokio::time::sleep(limits.lifetime) => {}
            }
        });
    }
}

/// What a request's credentials earn it.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Verdict {
    Allowed,
    Denied,
    /// Its group's turn did not come in time, or the queue of checks is full: come back later,
    /// nothing was checked.
    TooMany,
}

/// Whether the request may be answered: no auth configured, a remembered password, or one
/// bcrypt on the blocking thread within the client group's budget.
async fn authorised(server: &Server, peer: std::net::IpAddr, req: &Request<Incoming>) -> Verdict {
    let Some(web) = server.web.as_ref() else { return Verdict::Allowed };
    match web.check(req.headers().get(hyper::header::AUTHORIZATION).map(|v| v.as_bytes())) {
        Auth::Allowed => Verdict::Allowed,
        Auth::Denied => Verdict::Denied,
        Auth::Verify(hash, password, key) => {
            // Dropped with this future (the connection closed) or by the job: the turn is given
            // back on every path.
            let Some(mut permit) = server.budget.take(peer, crate::auth_budget::MAX_TURN_WAIT).await else { return Verdict::TooMany };
            let wait = permit.ready_in();
            if !wait.is_zero() {
                tokio::time::sleep(wait).await;
            }
            if !permit.queue() {
                return Verdict::TooMany;
            }
            let (tx, rx) = tokio::sync::oneshot::channel();
            let web = web.clone();
            tokio::task::spawn_blocking(move || {
                // Nobody waits for the answer any more: a bcrypt would be CPU spent on a flood
                // that is already over.
                if tx.is_closed() {
                    return;
                }
                permit.spend();
                let ok = web.verify(&hash, &password, key);
                // Given back before the answer, so the client's next request finds it free.
                drop(permit);
                let _ = tx.send(ok);
            });
            if rx.await.unwrap_or(false) {
                Verdict::Allowed
            } else {
                Verdict::Denied
            }
        }
    }
}

async fn connection<S>(stream: S, server: Server, peer: std::net::IpAddr, busy: Busy)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let served = Arc::new(AtomicUsize::new(0));
    let limits = server.limits;
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (server, served, busy) = (server.clone(), served.clone(), busy.clone());
        async move {
            // A connection serving a request (a login in its check, a scrape waiting for a
            // fresh reading) is not the one a full server closes.
            let _serving = busy.serving();
            let verdict = if req.uri().path() == HEALTH_PATH { Verdict::Allowed } else { authorised(&server, peer, &req).await };
            if let (Verdict::Allowed, Some(f)) = (verdict, &server.freshen) {
                if matches!(req.uri().path(), "/metrics" | "/snapshot.json" | "/plan.json") {
                    f.fresh(&server.shared).await;
                }
            }
            let (body, ctype, code) = match verdict {
                Verdict::Allowed => answer(&server.shared, &req, server.procs),
                Verdict::Denied => ("unauthorized\n".to_string(), "text/plain", StatusCode::UNAUTHORIZED),
                Verdict::TooMany => {
                    ("too many password checks from this network at once; try again in a second\n".to_string(), "text/plain", StatusCode::TOO_MANY_REQUESTS)
                }
            };
            let n = served.fetch_add(1, Ordering::Relaxed) + 1;
            let mut resp = Response::builder().status(code).header(hyper::header::CONTENT_TYPE, ctype);
            match verdict {
                Verdict::Denied => resp = resp.header(hyper::header::WWW_AUTHENTICATE, "Basic realm=\"joule\""),
                Verdict::TooMany => resp = resp.header(hyper::header::RETRY_AFTER, "1"),
                Verdict::Allowed => {}
            }
            if n >= limits.max_requests {
                resp = resp.header(hyper::header::CONNECTION, "close");
            }
            resp.body(Full::new(Bytes::from(body)))
        }
    });
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout)
        .max_buf_size(limits.max_buf_bytes)
        .max_headers(limits.max_headers)
        .serve_connection(TokioIo::new(stream), service);
    let _ = conn.await;
}

#[cfg(test)]
#[path = "exporter_health_tests.rs"]
mod health_tests;

#[cfg(test)]
#[path = "exporter_login_tests.rs"]
mod login_tests;

#[cfg(test)]
mod tests {
    use super::*;

    /// Row 15 of issue 17: other users' pids and names are not for everyone who can reach
    /// the endpoint.
    #[test]
    fn processes_follow_hidepid_then_the_address_then_the_switch() {
        use Processes::*;
        for (hidepid, loopback, show, want) in [
            (false, true, false, Shown),
            (true, true, false, Hidden),
            (true, true, true, Hidden),
            (false, false, false, Hidden),
            (false, false, true, Shown),
            (true, false, true, Hidden),
        ] {
            assert_eq!(Processes::policy(hidepid, loopback, show), want, "hidepid {hidepid}, loopback {loopback}, switch {show}");
        }
    }

    /// Issue 33: `/plan.json` showed other users' pids where per-process data is hidden.
    #[test]
    fn hidden_leaves_no_pid_in_the_plan_either() {
        let mut v = serde_json::json!({
            "plan": { "decisions": [{ "reason": "pid 4242 matched class web; thread 77 keeps its policy", "want": { "kind": "move", "pid": 4242 } }] },
            "actuators": [{ "name": "task_sched", "state": { "tids": [77, 78], "notes": ["Processes 12 and threads 13, 14 and 15 left, 3 CPUs"], "cpus": [0, 1] } }]
        });
        scrub_processes(&mut v);
        let text = v.to_string();
        for n in ["4242", "77", "78", "12 ", "13", "14", "15"] {
            assert!(!text.contains(n), "{n} still in {text}");
        }
        assert!(text.contains("pid … matched class web") && text.contains("left, 3 CPUs") && text.contains("\"cpus\":[0,1]"), "{text}");
        assert_eq!(mask_ids("thread 502 keeps its policy: SCHED_DEADLINE 10000/100000"), "thread … keeps its policy: SCHED_DEADLINE 10000/100000");
    }

    #[test]
    fn hidden_leaves_no_pid_or_name_in_the_snapshot() {
        let shared = Shared::default();
        shared.write().unwrap().snapshot.task_wait = vec![Default::default()];
        let shown = render(&shared, Format::Text, Processes::Shown);
        let hidden = render(&shared, Format::Text, Processes::Hidden);
        assert!(shown.contains("joule_task_cpu_wait_ratio{tid="), "{shown}");
        assert!(!hidden.contains("tid="), "{hidden}");
    }
}
