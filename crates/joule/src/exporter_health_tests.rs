//! The health path against a real server on loopback: answered without credentials where
//! everything else asks for them (a kubelet's probe has none), and telling nothing but
//! whether the loop has published.

use super::*;
use std::io::{Read, Write};

/// (status code, body) of a plain HTTP/1.1 GET of `path`, with `auth` as its Authorization.
fn get(addr: std::net::SocketAddr, path: &str, auth: Option<&str>) -> (u16, String) {
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let auth = auth.map(|a| format!("Authorization: {a}\r\n")).unwrap_or_default();
    write!(s, "GET {path} HTTP/1.1\r\nHost: joule\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut reply = String::new();
    s.read_to_string(&mut reply).unwrap();
    let code = reply.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or_else(|| panic!("no status line: {reply}"));
    (code, reply.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// A server that asks every other path for basic auth (user `prom`, password `s3cret`).
fn server_with_auth() -> (std::net::SocketAddr, Shared) {
    let d = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    std::fs::write(d.path().join("web.yml"), format!("basic_auth_users:\n  prom: '{hash}'\n")).unwrap();
    let web = Arc::new(WebConfig::load(&d.path().join("web.yml")).unwrap());
    let shared = Shared::default();
    let addr = serve("127.0.0.1:0", shared.clone(), Processes::Hidden, Limits::default(), Some(web), None).unwrap();
    (addr, shared)
}

#[test]
fn health_needs_no_credentials_and_tells_only_whether_the_loop_published() {
    let (addr, shared) = server_with_auth();
    assert_eq!(get(addr, HEALTH_PATH, None), (503, "starting\n".to_string()), "nothing published yet");
    assert_eq!(get(addr, "/metrics", None).0, 401, "everything else still asks for credentials");
    assert_eq!(get(addr, "/snapshot.json", None).0, 401);

    shared.write().unwrap().published_at = Some(std::time::Instant::now());
    assert_eq!(get(addr, HEALTH_PATH, None), (200, "ok\n".to_string()));
    // Wrong credentials change nothing there, and spend no password check.
    assert_eq!(get(addr, HEALTH_PATH, Some("Basic cHJvbTp3cm9uZw==")), (200, "ok\n".to_string()));
    // With the right ones, /metrics is served as before.
    let (code, body) = get(addr, "/metrics", Some("Basic cHJvbTpzM2NyZXQ="));
    assert_eq!(code, 200, "{body}");
    assert!(body.contains("# HELP"), "{body}");
    // A query or a path below it is not the health path.
    assert_eq!(get(addr, "/healthz/metrics", None).0, 401);
}
