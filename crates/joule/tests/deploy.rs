//! Tier 1 (no root): the files in deploy/ agree with what builds and runs them — the DaemonSet
//! names the image `make image` builds (localhost/joule:<crate version>), and the systemd
//! unit restores from the journal directory the shipped config writes to. The Kubernetes
//! manifests' own checks are in kube_manifests.rs.

use std::path::PathBuf;

fn deploy(file: &str) -> String {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../deploy").join(file);
    std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

/// The value after `key` on the first line that has it, trimmed of quotes.
fn value_after<'a>(text: &'a str, key: &str) -> &'a str {
    let line = text.lines().find_map(|l| l.trim_start().strip_prefix(key)).unwrap_or_else(|| panic!("no line with {key}"));
    line.split('#').next().unwrap().trim().trim_matches('"')
}

#[test]
fn daemonset_names_the_image_make_image_builds() {
    let ds = deploy("kubernetes/daemonset.yaml");
    assert_eq!(value_after(&ds, "image:"), format!("localhost/joule:{}", env!("CARGO_PKG_VERSION")));
    // Built locally and loaded into the node's runtime: never pulled.
    assert_eq!(value_after(&ds, "imagePullPolicy:"), "Never");
    let script = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/image.sh")).unwrap();
    assert!(script.contains(r#"image="localhost/joule:${version}""#), "scripts/image.sh names the image differently");
}

#[test]
fn systemd_unit_restores_the_journal_dir_the_shipped_config_writes() {
    let unit = deploy("joule.service");
    let post = value_after(&unit, "ExecStopPost=");
    let dir = post.split("--journal-dir").nth(1).expect("ExecStopPost names --journal-dir").trim();
    assert_eq!(value_after(&deploy("joule.toml"), "journal_dir ="), dir);
    assert!(unit.contains(&format!("RuntimeDirectory={}", dir.trim_start_matches("/run/"))), "{unit}");
    // Only root reads or writes the journal; the metrics server has its fd room (issue 17).
    assert_eq!(value_after(&unit, "RuntimeDirectoryMode="), "0700");
    assert!(value_after(&unit, "LimitNOFILE=").parse::<u32>().is_ok_and(|n| n >= 1024), "{unit}");
    for hardening in ["NoNewPrivileges=yes", "ProtectHome=read-only", "UMask=0077"] {
        assert!(unit.lines().any(|l| l == hardening), "{hardening} missing from the unit");
    }
}
