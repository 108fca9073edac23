//! Tier 2 (root): the image an operator loads is the image a node runs (issue 37). `make
//! image`'s script builds the archive from this build's release binary, and
//! scripts/kube/load-image.sh imports it into a real containerd (the harness's,
//! `joule_testkit::containerd`) as an operator does on each node. The runtime then lists
//! localhost/joule:<version> over CRI, as a kubelet sees it, and runs `joule --version` and
//! `joule check-config` from it as containers with the image's own entrypoint.

use joule_core::testing::{is_root, require};
use joule_testkit::containerd::{self, Containerd};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

fn repo() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
}

/// The release binary `make image` packs: `<target dir>/release/joule`, beside this test's own
/// `<target dir>/<profile>/deps/`.
fn release_joule() -> PathBuf {
    let exe = std::env::current_exe().expect("the test's own path");
    let target = exe.ancestors().nth(3).expect("<target>/<profile>/deps/<test>");
    target.join("release/joule")
}

/// A directory removed when the test ends, however it ends.
struct TmpDir(PathBuf);

impl Drop for TmpDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The tags the runtime lists over CRI.
fn cri_tags(ctd: &Containerd) -> Vec<String> {
    ctd.cri_images().unwrap_or_else(|e| panic!("{e}\n{}", ctd.log())).into_iter().flat_map(|i| i.repo_tags).collect()
}

#[test]
#[ignore]
fn root_image_import_the_real_image_is_listed_over_cri_and_runs() {
    if !require(is_root(), "root") {
        return;
    }
    if let Some(why) = containerd::absent() {
        if !require(false, &why) {
            return;
        }
    }
    let bin = release_joule();
    if !require(bin.exists(), &format!("{} (`make build`: the image is made of the release binary)", bin.display())) {
        return;
    }
    let name = format!("localhost/joule:{}", env!("CARGO_PKG_VERSION"));
    let dir = TmpDir(Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("root_image_import.{}", std::process::id())));
    std::fs::create_dir_all(&dir.0).unwrap();
    let archive = dir.0.join("joule-image.tar");

    let t0 = Instant::now();
    let out = Command::new("bash").arg(repo().join("scripts/image.sh")).arg(&bin).arg(&archive).output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "scripts/image.sh: {said}");
    eprintln!("{said}image built in {:?}", t0.elapsed());

    let mut ctd = Containerd::start(repo()).unwrap_or_else(|e| panic!("containerd: {e}"));
    assert!(!cri_tags(&ctd).contains(&name), "{name} listed before it was loaded");
    let t0 = Instant::now();
    let load = repo().join("scripts/kube/load-image.sh");
    let said = ctd.run_script(&load, &[&archive.to_string_lossy()]).unwrap_or_else(|e| panic!("{e}"));
    eprintln!("{said}loaded in {:?}", t0.elapsed());
    let images = ctd.cri_images().unwrap();
    let image = images.iter().find(|i| i.repo_tags.contains(&name)).unwrap_or_else(|| panic!("CRI does not list {name}: {images:?}"));
    eprintln!("CRI lists {name}: {}, {} bytes, pinned {}", image.id, image.size, image.pinned);

    // The image's own entrypoint, as the DaemonSet's container runs it (only its args given).
    let v = ctd.run_once(&name, &["--version"]).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert_eq!((v.exit_code, v.output.trim()), (0, format!("joule {}", env!("CARGO_PKG_VERSION")).as_str()), "{v:?}");
    let c = ctd.run_once(&name, &["check-config", "/etc/joule/joule.toml"]).unwrap_or_else(|e| panic!("{e}\n{}", ctd.log()));
    assert_eq!(c.exit_code, 0, "{c:?}");
    assert!(c.output.contains("/etc/joule/joule.toml: valid"), "{c:?}");

    // Loading it again (an operator re-running the script) changes nothing.
    ctd.run_script(&load, &[&archive.to_string_lossy()]).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(cri_tags(&ctd).iter().filter(|t| **t == name).count(), 1);
}
