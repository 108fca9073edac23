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

/// The unit's capability bounding set is the one docs/security.md gives a reason for, one by
/// one, and never lets the agent load a module or reach raw I/O.
#[test]
fn systemd_unit_bounds_its_capabilities_to_the_documented_ones() {
    let unit = deploy("joule.service");
    let caps: Vec<&str> = value_after(&unit, "CapabilityBoundingSet=").split_whitespace().collect();
    assert!(!caps.is_empty() && !caps.iter().any(|c| c.starts_with('~')), "an allow list, not a deny list: {caps:?}");
    for never in ["CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SETUID", "CAP_SYS_BOOT"] {
        assert!(!caps.contains(&never), "{never} in the unit's bounding set");
    }
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../docs/security.md")).unwrap();
    let section = doc.split("## The unit's capabilities").nth(1).expect("docs/security.md has the unit's capabilities").split("\n## ").next().unwrap();
    let documented: Vec<&str> =
        section.lines().filter_map(|l| l.strip_prefix("| `")).filter_map(|l| l.split('`').next()).filter(|c| c.starts_with("CAP_")).collect();
    assert_eq!(caps, documented, "the unit's set and the reasons in docs/security.md differ");
}
