//! The web config: what it accepts, what it refuses with the key's name, and basic auth's
//! verdicts (a wrong password, a remembered good one).

use super::*;

/// A self-signed certificate and its key for `localhost`, written in `dir`.
pub(crate) fn self_signed(dir: &Path) -> (PathBuf, PathBuf) {
    let c = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    let (cert, key) = (dir.join("server.crt"), dir.join("server.key"));
    std::fs::write(&cert, c.cert.pem()).unwrap();
    std::fs::write(&key, c.signing_key.serialize_pem()).unwrap();
    (cert, key)
}

fn basic(user: &str, password: &str) -> Vec<u8> {
    format!("Basic {}", base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"))).into_bytes()
}

#[test]
fn tls_and_users_load_relative_to_the_file() {
    let d = tempfile::tempdir().unwrap();
    self_signed(d.path());
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let text = format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n  min_version: TLS13\nbasic_auth_users:\n  prom: '{hash}'\n");
    std::fs::write(d.path().join("web.yml"), text).unwrap();
    let w = WebConfig::load(&d.path().join("web.yml")).unwrap();
    assert!(w.tls.is_some() && w.needs_auth());
    assert_eq!(w.files, vec![d.path().join("server.crt"), d.path().join("server.key")], "the files it names, for the root agent's owner check");
}

#[test]
fn an_empty_file_means_neither() {
    let w = WebConfig::parse("", Path::new("/")).unwrap();
    assert!(w.tls.is_none() && !w.needs_auth());
    assert!(matches!(w.check(None), Auth::Allowed));
}

#[test]
fn what_it_does_not_implement_is_refused_by_name() {
    let d = tempfile::tempdir().unwrap();
    self_signed(d.path());
    let tls = "tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\n";
    let cases = [
        ("http_server_config:\n  http2: false\n".to_string(), "http_server_config"),
        (format!("{tls}  cipher_suites: [TLS_AES_128_GCM_SHA256]\n"), "cipher_suites"),
        (format!("{tls}  client_auth_type: RequireAnyClientCert\n"), "RequireAnyClientCert"),
        (format!("{tls}  client_auth_type: RequireAndVerifyClientCert\n"), "needs client_ca_file"),
        (format!("{tls}  min_version: TLS10\n"), "TLS10"),
        (format!("{tls}  min_version: TLS13\n  max_version: TLS12\n"), "above max_version"),
        ("tls_server_config:\n  cert_file: nothere.crt\n  key_file: server.key\n".to_string(), "cert_file: cannot read"),
        ("tls_server_config:\n  cert_file: server.key\n  key_file: server.key\n".to_string(), "no certificate"),
        ("basic_auth_users:\n  prom: plaintext\n".to_string(), "not a bcrypt hash"),
        ("basic_auth_users:\n  prom: '$2y$20$abcdefghijklmnopqrstuu5qL0S1YzsXkOTOPLEW0rlY7jgtzZqCe'\n".to_string(), "cost 20"),
        ("basic_auth_users:\n  'a:b': '$2y$04$abcdefghijklmnopqrstuu5qL0S1YzsXkOTOPLEW0rlY7jgtzZqCe'\n".to_string(), "has a ':'"),
        ("- just\n- a list\n".to_string(), "expected struct"),
    ];
    for (text, want) in cases {
        let e = WebConfig::parse(&text, d.path()).err().unwrap_or_else(|| panic!("accepted:\n{text}"));
        let e = format!("{e:#}");
        assert!(e.contains(want), "{text}\n→ {e}\n(wanted {want:?})");
    }
}

#[test]
fn basic_auth_denies_wrong_or_missing_credentials_and_remembers_a_good_one() {
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let w = WebConfig::parse(&format!("basic_auth_users:\n  prom: '{hash}'\n"), Path::new("/")).unwrap();
    assert!(matches!(w.check(None), Auth::Denied));
    assert!(matches!(w.check(Some(b"Bearer abc")), Auth::Denied));
    assert!(matches!(w.check(Some(&basic("nobody", "s3cret"))), Auth::Denied));
    assert!(matches!(w.check(Some(b"Basic !!!notbase64")), Auth::Denied));
    let Auth::Verify(h, p, k) = w.check(Some(&basic("prom", "wrong"))) else { panic!("a known user's password must be hashed") };
    assert!(!w.verify(&h, &p, k));
    assert!(matches!(w.check(Some(&basic("prom", "wrong"))), Auth::Verify(..)), "a wrong password is never remembered");
    let Auth::Verify(h, p, k) = w.check(Some(&basic("prom", "s3cret"))) else { panic!() };
    assert!(w.verify(&h, &p, k));
    assert!(matches!(w.check(Some(&basic("prom", "s3cret"))), Auth::Allowed), "a good password is remembered");
    assert!(matches!(w.check(Some(&basic("prom", "s3cret2"))), Auth::Verify(..)));
}

/// One request over TLS, trusting `ca` (a PEM file): (status line, body).
fn https_get(addr: std::net::SocketAddr, ca: &Path, auth: Option<&[u8]>) -> String {
    use std::io::{Read, Write};
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_file(ca).unwrap()).unwrap();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    let conn = rustls::ClientConnection::new(Arc::new(cfg), "localhost".try_into().unwrap()).unwrap();
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    let auth = auth.map(|a| format!("Authorization: {}\r\n", String::from_utf8_lossy(a))).unwrap_or_default();
    write!(tls, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n{auth}Connection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = tls.read_to_string(&mut out); // a close without close_notify is fine here
    out
}

/// The real server: TLS with the self-signed certificate, 401 with `WWW-Authenticate`
/// without or with a wrong password, 200 with the metrics with the right one, and no answer
/// in plain HTTP.
#[test]
fn the_endpoint_speaks_tls_and_asks_for_the_password() {
    let d = tempfile::tempdir().unwrap();
    let (cert, _) = self_signed(d.path());
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let yml = d.path().join("web.yml");
    std::fs::write(&yml, format!("tls_server_config:\n  cert_file: server.crt\n  key_file: server.key\nbasic_auth_users:\n  prom: '{hash}'\n")).unwrap();
    let web = Arc::new(WebConfig::load(&yml).unwrap());
    let shared = crate::exporter::Shared::default();
    let addr = crate::exporter::serve("127.0.0.1:0", shared, crate::exporter::Processes::Shown, crate::exporter::Limits::default(), Some(web), None).unwrap();

    let none = https_get(addr, &cert, None);
    assert!(none.starts_with("HTTP/1.1 401") && none.to_ascii_lowercase().contains("www-authenticate: basic"), "{none}");
    let wrong = https_get(addr, &cert, Some(&basic("prom", "nope")));
    assert!(wrong.starts_with("HTTP/1.1 401"), "{wrong}");
    for _ in 0..2 {
        let ok = https_get(addr, &cert, Some(&basic("prom", "s3cret")));
        assert!(ok.starts_with("HTTP/1.1 200") && ok.contains("joule_"), "{ok}");
    }
    // Plain HTTP to the TLS port: no HTTP answer.
    use std::io::{Read, Write};
    let mut plain = std::net::TcpStream::connect(addr).unwrap();
    plain.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    plain.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut got = Vec::new();
    let _ = plain.read_to_end(&mut got);
    assert!(!String::from_utf8_lossy(&got).contains("joule_"), "metrics served in plain HTTP on the TLS port");
}
