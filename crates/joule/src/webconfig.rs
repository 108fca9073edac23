//! TLS and basic auth for the metrics endpoint, from a web config file in the format of the
//! Prometheus exporter-toolkit (`agent.metrics_web_config`, off by default), so the file a
//! user already keeps for node_exporter works here:
//!
//! ```yaml
//! tls_server_config:
//!   cert_file: server.crt        # relative to this file's directory
//!   key_file: server.key
//!   client_auth_type: RequireAndVerifyClientCert   # or NoClientCert (default), VerifyClientCertIfGiven
//!   client_ca_file: clients.pem
//!   min_version: TLS12           # or TLS13
//! basic_auth_users:
//!   prometheus: $2y$10$...       # bcrypt hash (htpasswd -nBC 10 "" | tr -d ':\n')
//! ```
//!
//! Keys this server does not implement (`http_server_config`, `cipher_suites`, the client
//! auth types that verify nothing, TLS 1.0/1.1) are refused with their name, never ignored: a
//! security setting silently dropped is worse than a start that fails. Every file is read
//! through the 1 MiB cap. A good password is remembered by its SHA-256 (up to 64), so a
//! scraper costs one bcrypt per agent start; a wrong one costs one bcrypt on the runtime's one
//! blocking thread, never on the control loop.

use anyhow::Context;
use base64::Engine;
use joule_core::fsread::read_file_capped;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use serde::Deserialize;
use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

const MAX_FILE_BYTES: u64 = 1 << 20;
const MAX_REMEMBERED: usize = 64;
const MAX_BCRYPT_COST: u32 = 14;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    tls_server_config: Option<TlsFile>,
    #[serde(default)]
    basic_auth_users: BTreeMap<String, String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TlsFile {
    cert_file: PathBuf,
    key_file: PathBuf,
    #[serde(default)]
    client_auth_type: ClientAuth,
    client_ca_file: Option<PathBuf>,
    #[serde(default)]
    min_version: TlsVersion,
    max_version: Option<TlsVersion>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Deserialize)]
enum ClientAuth {
    #[default]
    NoClientCert,
    VerifyClientCertIfGiven,
    RequireAndVerifyClientCert,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, PartialOrd, Deserialize)]
enum TlsVersion {
    #[default]
    TLS12,
    TLS13,
}

/// What the server enforces: TLS (rustls) and users' bcrypt hashes, either or both.
pub struct WebConfig {
    pub tls: Option<Arc<rustls::ServerConfig>>,
    /// The files it names (certificate, key, client CA), as read: a root agent takes them only
    /// from paths root controls, like the web config itself.
    pub files: Vec<PathBuf>,
    users: BTreeMap<String, String>,
    /// SHA-256 of "user\0password" for credentials that passed bcrypt.
    good: Mutex<HashSet<[u8; 32]>>,
}

/// The verdict on one request's `Authorization` header.
pub enum Auth {
    Allowed,
    Denied,
    /// A bcrypt to run (off the runtime's thread): `(hash, password, remember-key)`.
    Verify(String, String, [u8; 32]),
}

impl WebConfig {
    /// Reads and checks the file and everything it names; the error says which key or file.
    pub fn load(path: &Path) -> anyhow::Result<WebConfig> {
        let text = read_file_capped(path, MAX_FILE_BYTES).with_context(|| format!("while reading the web config {}", path.display()))?;
        Self::parse(&text, path.parent().unwrap_or(Path::new("/"))).with_context(|| format!("in the web config {}", path.display()))
    }

    fn parse(text: &str, base: &Path) -> anyhow::Result<WebConfig> {
        let f: File = if text.trim().is_empty() { File::default() } else { serde_norway::from_str(text)? };
        for (user, hash) in &f.basic_auth_users {
            anyhow::ensure!(!user.is_empty() && !user.contains(':'), "basic_auth_users: the user name {user:?} is empty or has a ':'");
            let parts: bcrypt::HashParts = hash
                .parse()
                .map_err(|_| anyhow::anyhow!("basic_auth_users.{user}: not a bcrypt hash (make one with `htpasswd -nBC 10 \"\" | tr -d ':\\n'`)"))?;
            // Each wrong password costs one hash: a cost beyond 14 (~1 s) lets one client
            // keep the endpoint's verifier busy.
            anyhow::ensure!(parts.get_cost() <= MAX_BCRYPT_COST, "basic_auth_users.{user}: bcrypt cost {} is above {MAX_BCRYPT_COST}", parts.get_cost());
        }
        let files = f
            .tls_server_config
            .iter()
            .flat_map(|t| [Some(&t.cert_file), Some(&t.key_file), t.client_ca_file.as_ref()])
            .flatten()
            .map(|n| base.join(n))
            .collect();
        let tls = f.tls_server_config.map(|t| tls_config(&t, base)).transpose()?;
        Ok(WebConfig { tls, files, users: f.basic_auth_users, good: Mutex::new(HashSet::new()) })
    }

    pub fn needs_auth(&self) -> bool {
        !self.users.is_empty()
    }

    /// What to do with a request carrying `header` (its `Authorization`, if any).
    pub fn check(&self, header: Option<&[u8]>) -> Auth {
        if !self.needs_auth() {
            return Auth::Allowed;
        }
        let Some((user, password)) = header.and_then(basic_credentials) else { return Auth::Denied };
        let Some(hash) = self.users.get(&user) else { return Auth::Denied };
        let key = remember_key(&user, &password);
        if self.good.lock().unwrap_or_else(|e| e.into_inner()).contains(&key) {
            return Auth::Allowed;
        }
        Auth::Verify(hash.clone(), password, key)
    }

    /// Runs the bcrypt `check` asked for (blocking: call it off the async thread).
    pub fn verify(&self, hash: &str, password: &str, key: [u8; 32]) -> bool {
        let ok = bcrypt::verify(password, hash).unwrap_or(false);
        if ok {
            let mut good = self.good.lock().unwrap_or_else(|e| e.into_inner());
            if good.len() >= MAX_REMEMBERED {
                good.clear();
            }
            good.insert(key);
        }
        ok
    }
}

fn remember_key(user: &str, password: &str) -> [u8; 32] {
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    ctx.update(user.as_bytes());
    ctx.update(&[0]);
    ctx.update(password.as_bytes());
    ctx.finish().as_ref().try_into().expect("SHA-256 is 32 bytes")
}

/// `Basic base64(user:password)` → (user, password).
fn basic_credentials(header: &[u8]) -> Option<(String, String)> {
    let h = std::str::from_utf8(header).ok()?;
    let (scheme, b64) = h.trim().split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") || b64.len() > 1024 {
        return None;
    }
    let raw = base64::engine::general_purpose::STANDARD.decode(b64.trim()).ok()?;
    let (user, password) = String::from_utf8(raw).ok()?.split_once(':').map(|(u, p)| (u.to_string(), p.to_string()))?;
    Some((user, password))
}

fn read(base: &Path, name: &Path, what: &str) -> anyhow::Result<Vec<u8>> {
    let path = base.join(name);
    read_file_capped(&path, MAX_FILE_BYTES).map(String::into_bytes).with_context(|| format!("tls_server_config.{what}: cannot read {}", path.display()))
}

fn tls_config(t: &TlsFile, base: &Path) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&read(base, &t.cert_file, "cert_file")?)
        .collect::<Result<_, _>>()
        .map_err(|e| anyhow::anyhow!("tls_server_config.cert_file: {e:?}"))?;
    anyhow::ensure!(!certs.is_empty(), "tls_server_config.cert_file: no certificate in {}", t.cert_file.display());
    let key = PrivateKeyDer::from_pem_slice(&read(base, &t.key_file, "key_file")?)
        .map_err(|e| anyhow::anyhow!("tls_server_config.key_file: no private key ({e:?})"))?;
    let max = t.max_version.unwrap_or(TlsVersion::TLS13);
    anyhow::ensure!(t.min_version <= max, "tls_server_config: min_version {:?} is above max_version {max:?}", t.min_version);
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = [(TlsVersion::TLS12, &rustls::version::TLS12), (TlsVersion::TLS13, &rustls::version::TLS13)]
        .into_iter()
        .filter(|(v, _)| *v >= t.min_version && *v <= max)
        .map(|(_, p)| p)
        .collect();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = rustls::ServerConfig::builder_with_provider(provider.clone()).with_protocol_versions(&versions)?;
    let builder = match (t.client_auth_type, &t.client_ca_file) {
        (ClientAuth::NoClientCert, _) => builder.with_no_client_auth(),
        (_, None) => anyhow::bail!("tls_server_config.client_auth_type {:?} needs client_ca_file", t.client_auth_type),
        (auth, Some(ca)) => {
            let mut roots = rustls::RootCertStore::empty();
            for c in CertificateDer::pem_slice_iter(&read(base, ca, "client_ca_file")?) {
                roots.add(c.map_err(|e| anyhow::anyhow!("tls_server_config.client_ca_file: {e:?}"))?)?;
            }
            let v = rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider);
            let v = if auth == ClientAuth::VerifyClientCertIfGiven { v.allow_unauthenticated() } else { v };
            builder.with_client_cert_verifier(v.build()?)
        }
    };
    let mut cfg = builder.with_single_cert(certs, key).context("tls_server_config: the key does not fit the certificate")?;
    cfg.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(cfg))
}

#[cfg(test)]
#[path = "webconfig_tests.rs"]
mod tests;
