//! Setup helpers: locate a fixture tree, stage `t0`/`t1` pairs in a temporary directory, and
//! run one source on a fresh Snapshot with a chosen interval.

use joule_core::Snapshot;
use joule_telemetry::Source;
use std::fs;
use std::path::{Path, PathBuf};

/// `testdata/<rel>` at the repository root.
pub fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata").join(rel)
}

/// Copies the tree `src` over `dst`, replacing files that exist.
pub fn overlay(src: &Path, dst: &Path) {
    fs::create_dir_all(dst).unwrap();
    for e in fs::read_dir(src).unwrap_or_else(|e| panic!("{}: {e}", src.display())) {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            overlay(&e.path(), &to);
        } else {
            fs::copy(e.path(), &to).unwrap();
        }
    }
}

/// A temporary root holding a copy of `testdata/<rel>/t0`; `advance` moves it to `t1`.
pub struct Staged {
    pub dir: tempfile::TempDir,
    rel: String,
}

impl Staged {
    pub fn new(rel: &str) -> Self {
        let dir = tempfile::tempdir().unwrap();
        overlay(&fixture(&format!("{rel}/t0")), dir.path());
        Self { dir, rel: rel.into() }
    }

    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    pub fn advance(&self) {
        overlay(&fixture(&format!("{}/t1", self.rel)), self.dir.path());
    }
}

/// Runs `source` once on a fresh snapshot covering `interval_ms`.
pub fn sample(source: &mut dyn Source, interval_ms: u64) -> Snapshot {
    let mut snap = Snapshot { interval_ms, ..Snapshot::default() };
    source.sample(&mut snap).unwrap_or_else(|e| panic!("{} failed: {e}", source.name()));
    snap
}

pub fn assert_close(actual: f64, expected: f64) {
    assert!((actual - expected).abs() < 1e-9, "{actual} != {expected}");
}
