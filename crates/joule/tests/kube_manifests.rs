//! Tier 1 (no root): the Kubernetes manifests in deploy/kubernetes/ as operators apply them.
//! Every document against the Kubernetes API types (scripts/kube/manifest-check.sh, a Go
//! program over k8s.io/api; skipped, naming what is missing, where Go or its modules are not
//! there), and that check failing on broken manifests: the fixtures of testdata/kube-manifests/
//! and one-line breaks of the real files. Then what only joule knows: the ConfigMap's joule.toml
//! passes `joule check-config` with a web config of the example Secret's shape, and the
//! DaemonSet mounts every file and directory that config names.

use joule_core::config::Config;
use joule_core::testing::require;
use serde::Deserialize;
use serde_norway::Value;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

fn kube(file: &str) -> PathBuf {
    repo().join("deploy/kubernetes").join(file)
}

/// Every manifest operators get, as the check is run on them.
const MANIFESTS: [&str; 5] = ["configmap.yaml", "daemonset.yaml", "service.yaml", "prometheus-operator/servicemonitor.yaml", "example/secrets.yaml"];

/// The checker, built once per test binary: Ok(path), or Err(why this machine cannot check).
fn checker() -> &'static Result<PathBuf, String> {
    static BUILT: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    BUILT.get_or_init(|| {
        let bin = Path::new(env!("CARGO_TARGET_TMPDIR")).join("manifest-check");
        let out = Command::new("bash").arg(repo().join("scripts/kube/manifest-check.sh")).arg("-o").arg(&bin).output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
        match out.status.code() {
            Some(0) => Ok(bin),
            Some(77) => Err(err.trim_start_matches("manifest-check: capability absent: ").to_string()),
            _ => panic!("building the manifest check failed:\n{err}"),
        }
    })
}

/// (passed, everything it printed) for the checker on `files`.
fn check(files: &[PathBuf]) -> Option<(bool, String)> {
    let bin = match checker() {
        Ok(b) => b,
        Err(why) => {
            require(false, why);
            return None;
        }
    };
    let out = Command::new(bin).args(files).output().unwrap();
    Some((out.status.success(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr))))
}

#[test]
fn kube_manifests_match_the_api_types_and_each_other() {
    let Some((ok, said)) = check(&MANIFESTS.map(kube)) else { return };
    assert!(ok, "{said}");
    assert!(said.contains("6 document(s) in 5 file(s)"), "{said}");
}

/// Each fixture says what must be found in it, one `# want: …` line per problem.
#[test]
fn kube_manifest_check_rejects_the_broken_fixtures() {
    let dir = repo().join("testdata/kube-manifests");
    let mut fixtures: Vec<PathBuf> = std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()).collect();
    fixtures.sort();
    assert!(fixtures.len() >= 2, "{fixtures:?}");
    for f in fixtures {
        let text = std::fs::read_to_string(&f).unwrap();
        let wants: Vec<&str> = text.lines().filter_map(|l| l.strip_prefix("# want: ")).collect();
        assert!(!wants.is_empty(), "{} says nothing it must be refused for", f.display());
        let Some((ok, said)) = check(std::slice::from_ref(&f)) else { return };
        assert!(!ok, "{} passed:\n{said}", f.display());
        for w in wants {
            assert!(said.contains(w), "{}: no {w:?} in:\n{said}", f.display());
        }
    }
}

/// One line of a real manifest broken at a time: the check must say so, and say where.
#[test]
fn kube_manifest_check_rejects_each_one_line_break_of_the_real_files() {
    let breaks: [(&str, &str, &str, &str); 12] = [
        ("daemonset.yaml", "hostPID: true", "hostPid: true", r#"unknown field "spec.template.spec.hostPid""#),
        ("daemonset.yaml", "containerPort: 9977", "containerPort: \"9977\"", "cannot unmarshal string"),
        ("daemonset.yaml", "cpu: 50m", "cpu: 50 millicores", "quantities must match"),
        ("daemonset.yaml", "mountPath: /run/containerd, readOnly: true", "mountPath: /run/containerd", "without readOnly: true"),
        ("daemonset.yaml", "- name: journal\n", "- name: journals\n", r#"volumeMount "journal" names no volume"#),
        (
            "daemonset.yaml",
            "port: metrics, scheme: HTTPS }\n            periodSeconds: 10",
            "port: 9978, scheme: HTTPS }\n            periodSeconds: 10",
            "readinessProbe: port 9978",
        ),
        (
            "daemonset.yaml",
            "      labels:\n        app.kubernetes.io/name: joule\n    spec:",
            "      labels:\n        app.kubernetes.io/name: jule\n    spec:",
            "does not select the pod template",
        ),
        ("daemonset.yaml", "              memory: 256Mi\n", "", "memory needs a request and a limit"),
        (
            "daemonset.yaml",
            "        - operator: Exists\n",
            "        - { key: node-role.kubernetes.io/control-plane, operator: Exists }\n",
            "no toleration {operator: Exists}",
        ),
        ("daemonset.yaml", "subPath: tls.key", "subPath: key.pem", r#"subPath "key.pem" is not a key"#),
        ("service.yaml", "targetPort: metrics", "targetPort: http", "targetPort http is no port"),
        ("prometheus-operator/servicemonitor.yaml", "key: password }", "key: pasword }", r#"has no key "pasword""#),
    ];
    let dir = tempfile::tempdir().unwrap();
    for (file, from, to, want) in breaks {
        let text = std::fs::read_to_string(kube(file)).unwrap();
        assert_eq!(text.matches(from).count(), 1, "{file}: {from:?} must be there once for this break");
        let files: Vec<PathBuf> = MANIFESTS
            .iter()
            .map(|m| {
                let p = dir.path().join(m.replace('/', "_"));
                std::fs::write(&p, if *m == file { text.replace(from, to) } else { std::fs::read_to_string(kube(m)).unwrap() }).unwrap();
                p
            })
            .collect();
        let Some((ok, said)) = check(&files) else { return };
        assert!(!ok && said.contains(want), "{file} with {from:?} → {to:?}: wanted {want:?}, got:\n{said}");
    }
}

/// The YAML documents of a manifest file.
fn documents(file: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(kube(file)).unwrap();
    serde_norway::Deserializer::from_str(&text).map(|d| Value::deserialize(d).unwrap()).filter(|v| !v.is_null()).collect()
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> &'a str {
    path.iter().fold(v, |v, k| &v[*k]).as_str().unwrap_or_else(|| panic!("no string at {path:?}"))
}

/// The ConfigMap's joule.toml, and the example joule-web Secret's web.yml.
fn shipped() -> (String, String) {
    let toml = str_at(&documents("configmap.yaml")[0], &["data", "joule.toml"]).to_string();
    let secrets = documents("example/secrets.yaml");
    let web = secrets.iter().find(|s| str_at(s, &["metadata", "name"]) == "joule-web").expect("the joule-web Secret");
    (toml, str_at(web, &["stringData", "web.yml"]).to_string())
}

#[test]
fn kube_configmap_passes_check_config_with_a_web_config_of_the_example_shape() {
    let (toml, web) = shipped();
    let cfg = Config::parse(&toml).unwrap_or_else(|p| panic!("{p:?}"));
    let d = tempfile::tempdir().unwrap();
    // The Secret's files where the config names them, the placeholders made real.
    let c = rcgen::generate_simple_self_signed(vec!["joule.kube-system.svc".to_string()]).unwrap();
    std::fs::write(d.path().join("tls.crt"), c.cert.pem()).unwrap();
    std::fs::write(d.path().join("tls.key"), c.signing_key.serialize_pem()).unwrap();
    let hash = bcrypt::hash("scrape-password", 4).unwrap();
    assert!(web.contains("BCRYPT-HASH-OF-THE-SCRAPE-PASSWORD"), "{web}");
    std::fs::write(d.path().join("web.yml"), web.replace("BCRYPT-HASH-OF-THE-SCRAPE-PASSWORD", &format!("'{hash}'"))).unwrap();
    let named = cfg.agent.metrics_web_config.to_string_lossy().into_owned();
    let file = d.path().join("joule.toml");
    std::fs::write(&file, toml.replace(&named, &d.path().join("web.yml").to_string_lossy())).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_joule")).arg("check-config").arg(&file).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success() && said.contains("valid"), "{said}");
    // As shipped, with its placeholder, the web config is refused (the agent would not start).
    std::fs::write(d.path().join("web.yml"), &web).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_joule")).arg("check-config").arg(&file).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", String::from_utf8_lossy(&out.stdout));
}

#[test]
fn kube_daemonset_mounts_what_the_config_names() {
    let (toml, web) = shipped();
    let cfg = Config::parse(&toml).unwrap_or_else(|p| panic!("{p:?}"));
    let ds = &documents("daemonset.yaml")[0];
    let pod = &ds["spec"]["template"]["spec"];
    let c = &pod["containers"][0];
    let mounts: Vec<(&str, &str, Option<&str>)> =
        c["volumeMounts"].as_sequence().unwrap().iter().map(|m| (str_at(m, &["mountPath"]), str_at(m, &["name"]), m["subPath"].as_str())).collect();
    let volume = |name: &str| pod["volumes"].as_sequence().unwrap().iter().find(|v| str_at(v, &["name"]) == name).unwrap().clone();
    let mounted = |path: &Path| mounts.iter().find(|m| Path::new(m.0) == path).unwrap_or_else(|| panic!("{} is not mounted: {mounts:?}", path.display()));

    // The config the container is started with is the ConfigMap's.
    let args: Vec<&str> = c["args"].as_sequence().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let config = args.iter().skip_while(|a| **a != "--config").nth(1).expect("--config");
    let m = mounted(Path::new(config));
    assert_eq!((str_at(&volume(m.1), &["configMap", "name"]), m.2), ("joule-config", Some("joule.toml")));
    // The web config and every file it names, from the joule-web Secret, beside it.
    let web_dir = cfg.agent.metrics_web_config.parent().unwrap();
    let names: Vec<String> = web
        .lines()
        .filter_map(|l| l.trim().strip_prefix("cert_file:").or(l.trim().strip_prefix("key_file:")))
        .map(|n| n.trim().to_string())
        .chain([cfg.agent.metrics_web_config.file_name().unwrap().to_string_lossy().into_owned()])
        .collect();
    assert_eq!(names.len(), 3, "{web}");
    for n in names {
        let m = mounted(&web_dir.join(&n));
        assert_eq!((str_at(&volume(m.1), &["secret", "secretName"]), m.2), ("joule-web", Some(n.as_str())));
    }
    // The journal on the node's own /run, so it outlives the pod.
    let m = mounted(&cfg.agent.journal_dir);
    assert_eq!(str_at(&volume(m.1), &["hostPath", "path"]), cfg.agent.journal_dir.to_str().unwrap());
    // Metrics on the port the pod, its probes and the Service name.
    let port: u16 = cfg.agent.metrics_addr.parse::<std::net::SocketAddr>().unwrap().port();
    assert_eq!(c["ports"][0]["containerPort"].as_u64(), Some(port as u64));
    assert_eq!(documents("service.yaml")[0]["spec"]["ports"][0]["port"].as_u64(), Some(port as u64));
    assert!(!cfg.agent.metrics_web_config.as_os_str().is_empty(), "beyond loopback only with TLS and basic auth");
    assert!(web.contains("tls_server_config:") && web.contains("basic_auth_users:"), "{web}");
}
