//! The login path against a real server on loopback: requests whose connections go while
//! their password check waits give their group's turn back, so the next first login is
//! answered.

use super::*;
use std::io::{Read, Write};

fn request(user: &str, password: &str) -> String {
    let cred = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, format!("{user}:{password}"));
    format!("GET /metrics HTTP/1.0\r\nAuthorization: Basic {cred}\r\n\r\n")
}

/// The third audit's lockout: a connection dropped while its bcrypt waited left its address
/// marked as waiting forever, and every later login from it got 429 (a flood from a first
/// login's own address: still 429 5 s after it). Here 60 wrong passwords from 127.0.0.1, each
/// connection closed as soon as its request is sent, then a first login from the same address:
/// answered, within a second.
#[test]
fn regression_requests_dropped_during_their_check_leave_the_next_first_login_answered() {
    let d = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 8).unwrap();
    std::fs::write(d.path().join("web.yml"), format!("basic_auth_users:\n  prom: '{hash}'\n")).unwrap();
    let web = Arc::new(WebConfig::load(&d.path().join("web.yml")).unwrap());
    let addr = serve("127.0.0.1:0", Shared::default(), Processes::Hidden, Limits::default(), Some(web), None).unwrap();
    for _ in 0..60 {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.write_all(request("prom", "wrong").as_bytes()).unwrap();
        drop(s);
        std::thread::sleep(Duration::from_millis(2));
    }
    let t = std::time::Instant::now();
    let mut s = std::net::TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(request("prom", "s3cret").as_bytes()).unwrap();
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    assert!(reply.starts_with("HTTP/1.0 200") || reply.starts_with("HTTP/1.1 200"), "a first login after the dropped requests: {reply:.80}");
    assert!(t.elapsed() < Duration::from_secs(1), "answered in {:?}", t.elapsed());
}
