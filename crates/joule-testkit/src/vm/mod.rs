//! The tier-3 harness: runs shell commands as root in a VM booted on the cached sched_ext
//! kernel, through `scripts/vm/run.sh` (see docs/vm.md), in the systemd guest (a Debian
//! root with systemd as PID 1 on pure cgroup v2, `scripts/vm/systemd-guest.sh`,
//! docs/systemd.md), or in an ARM guest (Debian's arm64 kernel under qemu-system-aarch64 or
//! its armhf kernel under qemu-system-arm, `scripts/arm64/run.sh`, docs/arm64.md; [`arm64`]). A boot costs 5–15 s under TCG (the
//! systemd guest's ~80 s), so tests share one boot through [`Vm::batch`] where they can.

pub mod arm64;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a command printed and how it exited inside the guest (`status` is -1 when the
/// harness itself was killed by a signal).
#[derive(Debug, Clone)]
pub struct VmOutput {
    pub status: i32,
    pub stdout: String,
    pub stderr: String,
}

impl VmOutput {
    /// Everything a failing assertion should show.
    pub fn describe(&self) -> String {
        format!("status {}\n--- stdout\n{}--- stderr\n{}", self.status, self.stdout, self.stderr)
    }
}

/// Which guest a [`Vm`] boots.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Guest {
    /// The host's own root, read-only, on the cached x86 kernel (virtme-ng).
    Host,
    /// A Debian root with systemd as PID 1.
    Systemd,
    /// A small Debian arm64 root on Debian's arm64 kernel, running the cross-built binary.
    Arm64,
    /// The same for armhf, with the Odroid-XU4's eight CPUs.
    Armhf,
}

impl Guest {
    fn arm(self) -> Option<arm64::Arm> {
        match self {
            Guest::Arm64 => Some(arm64::Arm::Arm64),
            Guest::Armhf => Some(arm64::Arm::Armhf),
            Guest::Host | Guest::Systemd => None,
        }
    }
}

/// A VM configuration; each `run`/`batch` is one boot.
pub struct Vm {
    cache: PathBuf,
    thermal: bool,
    guest: Guest,
    mem: String,
    /// Host files copied into the systemd guest before it boots: (source, path in the guest).
    files: Vec<(PathBuf, String)>,
    /// A distribution's kernel instead of the sched_ext one: the Debian suite it is from.
    lts: Option<&'static str>,
}

/// The workspace root (the directory holding `scripts/` and `target/`).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..").canonicalize().expect("repo root")
}

impl Vm {
    pub fn new() -> Vm {
        let cache = std::env::var_os("JOULE_VM_CACHE").map(PathBuf::from).unwrap_or_else(|| PathBuf::from("/var/cache/joule-vm"));
        Vm { cache, thermal: false, guest: Guest::Host, mem: "2G".into(), files: Vec::new(), lts: None }
    }

    /// What `make vm-deps` should have installed and did not, if anything.
    pub fn missing(&self) -> Option<String> {
        if let Some(arm) = self.guest.arm() {
            return arm.missing();
        }
        if std::env::consts::ARCH != "x86_64" {
            return Some("an x86_64 host: the x86 guests run this host's own binaries (on aarch64, tier 3 is the arm64 guest)".into());
        }
        let need = [("venv/bin/vng", "virtme-ng"), ("cargo/bin/virtiofsd", "virtiofsd"), ("kernel/current/VERSION", "the sched_ext kernel")];
        for (rel, what) in need {
            if !self.cache.join(rel).exists() {
                return Some(format!("{what} ({}) ; run make vm-deps", self.cache.join(rel).display()));
            }
        }
        if let Some(suite) = self.lts {
            let v = self.cache.join(format!("kernel/lts-{suite}/VERSION"));
            if !v.exists() {
                return Some(format!("Debian {suite}'s kernel ({}); run make vm-deps", v.display()));
            }
        }
        if self.guest == Guest::Systemd && !self.cache.join("debian-root/.joule-ready").exists() {
            return Some(format!("the systemd guest's root ({}/debian-root); run make vm-deps", self.cache.display()));
        }
        if self.thermal && !self.cache.join("thermal.aml").exists() {
            return Some(format!("{}/thermal.aml; run make vm-deps", self.cache.display()));
        }
        let qemu = Command::new("qemu-system-x86_64").arg("--version").output();
        if !qemu.map(|o| o.status.success()).unwrap_or(false) {
            return Some("qemu-system-x86_64; run make vm-deps".into());
        }
        None
    }

    /// This VM when the machine can boot it; otherwise reports what is missing through
    /// `joule_core::testing::require` (a skip, or a failure under `JOULE_TEST_STRICT=1`) and
    /// returns None. Use as `let Some(vm) = Vm::new().ready() else { return };`.
    pub fn ready(self) -> Option<Vm> {
        let missing = self.missing();
        joule_core::testing::require(missing.is_none(), missing.as_deref().unwrap_or("")).then_some(self)
    }

    /// Gives the guest the ACPI thermal zone of scripts/vm/thermal.asl.
    pub fn with_thermal_zone(mut self) -> Vm {
        self.thermal = true;
        self
    }

    /// Boots the systemd guest instead: a throwaway copy of a Debian root, systemd as PID 1,
    /// nginx.service up, the repo's `target/release/joule` at `/usr/local/bin/joule`. The repo
    /// itself is not there: checks get what they need through `batch`.
    pub fn systemd_guest(mut self) -> Vm {
        self.guest = Guest::Systemd;
        self
    }

    /// Copies the host file `src` to `dest` in the systemd guest before it boots (a package
    /// to install).
    pub fn with_file(mut self, src: &Path, dest: &str) -> Vm {
        self.files.push((src.to_path_buf(), dest.to_string()));
        self
    }

    /// Boots the arm64 guest instead: qemu-system-aarch64 (TCG) on Debian's arm64 cloud kernel,
    /// a small Debian arm64 root (scripts/arm64/setup.sh), the cross-built
    /// `target/aarch64-unknown-linux-gnu/release/joule` at `/joule/bin/joule` and the repo's
    /// `scripts/` at `/joule/scripts`; checks run in `/joule`.
    pub fn arm64_guest(mut self) -> Vm {
        self.guest = Guest::Arm64;
        self
    }

    /// Boots Debian `suite`'s own kernel (bookworm: 6.1, trixie: 6.12; scripts/vm/setup.sh
    /// caches them) instead of the sched_ext one, with the same host root.
    pub fn lts_kernel(mut self, suite: &'static str) -> Vm {
        self.lts = Some(suite);
        self
    }

    /// What the boots are called in target/vm-times.txt and target/vm-last/.
    fn label(&self) -> String {
        match self.lts {
            Some(suite) => format!("{:?}-{suite}", self.guest),
            None => format!("{:?}", self.guest),
        }
    }

    /// Boots the armhf guest instead: qemu-system-arm (TCG, eight Cortex-A15s: the XU4's CPU
    /// count, with its big core) on Debian's armmp-lpae kernel, a small Debian armhf root, the
    /// cross-built `target/armv7-unknown-linux-gnueabihf/release/joule` at `/joule/bin/joule`
    /// and the repo's `scripts/vm` at `/joule/scripts/vm`; checks run in `/joule`.
    pub fn armhf_guest(mut self) -> Vm {
        self.guest = Guest::Armhf;
        self
    }

    /// Boots once and runs `cmd` (a bash command line) as root in the repo root.
    pub fn run(&self, cmd: &str, timeout_s: u64) -> VmOutput {
        let rwdir = tempfile::tempdir().expect("results dir");
        self.run_in(rwdir.path(), cmd, timeout_s)
    }

    /// Boots once and runs each named check in turn; each gets its own output and status.
    /// The checks see `$JOULE_VM_OUT` (the results dir) as a place to leave files.
    pub fn batch(&self, checks: &[(&str, &str)], timeout_s: u64) -> BTreeMap<String, VmOutput> {
        let rwdir = tempfile::tempdir().expect("results dir");
        let mut script = String::new();
        for (name, cmd) in checks {
            assert!(name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_'), "check name {name}");
            let file = rwdir.path().join(format!("{name}.sh"));
            std::fs::write(&file, cmd).expect("write check");
            // The systemd and arm64 guests get the check scripts copied in.
            let f = if self.guest == Guest::Host { file.display().to_string() } else { format!("{GUEST_CHECKS}/{name}.sh") };
            script.push_str(&format!(
                "t0=$(date +%s%N); bash {f} >$JOULE_VM_OUT/{name}.out 2>$JOULE_VM_OUT/{name}.err </dev/null; \
                 echo $? >$JOULE_VM_OUT/{name}.status; echo $((($(date +%s%N) - t0) / 1000000)) >$JOULE_VM_OUT/{name}.ms\n"
            ));
        }
        let started = std::time::Instant::now();
        let whole = self.run_in(rwdir.path(), &script, timeout_s);
        let read = |p: PathBuf| std::fs::read_to_string(p).unwrap_or_default();
        // How long the boot and each check took, for keeping the tier within its budget
        // (docs/vm.md): target/vm-times.txt gets a line per boot.
        let times: Vec<String> = checks.iter().map(|(name, _)| format!("{name}={}ms", read(rwdir.path().join(format!("{name}.ms"))).trim())).collect();
        let line = format!("{} guest: {:.0} s in all; {}\n", self.label(), started.elapsed().as_secs_f64(), times.join(" "));
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(repo_root().join("target/vm-times.txt"))
            .and_then(|mut f| std::io::Write::write_all(&mut f, line.as_bytes()));
        // The last boot's outputs, whole, for reading after the run: target/vm-last/<guest>/.
        let keep = repo_root().join(format!("target/vm-last/{}", self.label()).to_lowercase());
        let _ = std::fs::remove_dir_all(&keep);
        if std::fs::create_dir_all(&keep).is_ok() {
            for (name, _) in checks {
                for ext in ["out", "err", "ms"] {
                    let _ = std::fs::copy(rwdir.path().join(format!("{name}.{ext}")), keep.join(format!("{name}.{ext}")));
                }
            }
        }
        checks
            .iter()
            .map(|(name, _)| {
                let status = read(rwdir.path().join(format!("{name}.status")));
                let out = match status.trim().parse() {
                    Ok(status) => {
                        VmOutput { status, stdout: read(rwdir.path().join(format!("{name}.out"))), stderr: read(rwdir.path().join(format!("{name}.err"))) }
                    }
                    // The boot itself failed or timed out: every check reports why, with
                    // what it printed before that (a check cut off by the timeout).
                    Err(_) => VmOutput {
                        status: if whole.status == 0 { -1 } else { whole.status },
                        stdout: format!("{}{}", read(rwdir.path().join(format!("{name}.out"))), whole.stdout),
                        stderr: format!("check {name} did not finish in the VM\n{}", whole.stderr),
                    },
                };
                (name.to_string(), out)
            })
            .collect()
    }

    fn run_in(&self, rwdir: &Path, cmd: &str, timeout_s: u64) -> VmOutput {
        match self.guest {
            Guest::Systemd => return self.run_systemd(rwdir, cmd, timeout_s),
            Guest::Arm64 => return arm64::Arm::Arm64.run(rwdir, cmd, timeout_s, &self.mem, 2),
            Guest::Armhf => return arm64::Arm::Armhf.run(rwdir, cmd, timeout_s, &self.mem, 8),
            Guest::Host => {}
        }
        let root = repo_root();
        let mut c = Command::new("bash");
        c.arg(root.join("scripts/vm/run.sh"))
            .args(["--cpus", "2", "--mem", &self.mem, "--timeout", &timeout_s.to_string()])
            .arg("--rwdir")
            .arg(rwdir)
            .env("JOULE_VM_CACHE", &self.cache)
            .current_dir(&root);
        if self.thermal {
            c.arg("--thermal");
        }
        if let Some(suite) = self.lts {
            let dir = self.cache.join(format!("kernel/lts-{suite}"));
            let ver = std::fs::read_to_string(dir.join("VERSION")).unwrap_or_default();
            c.arg("--kernel").arg(dir.join(format!("usr/lib/modules/{}/vmlinuz", ver.trim())));
        }
        let out = c.arg("--").arg(cmd).output().expect("run scripts/vm/run.sh");
        VmOutput {
            status: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// One check of a shared boot's results, its output shown on stderr (what a failing test
/// prints); `results` comes from [`Vm::batch`].
pub fn shown<'a>(results: &'a BTreeMap<String, VmOutput>, name: &str) -> &'a VmOutput {
    let out = results.get(name).unwrap_or_else(|| panic!("no check {name} in this boot"));
    eprintln!("[{name}] {}", out.describe());
    out
}

/// Where the systemd and arm64 guests find the batch's check scripts.
const GUEST_CHECKS: &str = "/joule/checks";

/// A copy of the binary `bin` in `dir` without its debug info (123 MB with it, ~18 without;
/// symbols stay, so a backtrace still names functions), or `bin` itself when no strip tool
/// can. llvm-strip (from install-deps' llvm-16) reads every architecture's ELF; binutils'
/// `strip` only the host's.
fn without_debug_info(bin: &Path, dir: &Path) -> PathBuf {
    let out = dir.join(bin.file_name().expect("a binary's file name"));
    let strips = ["llvm-strip-16", "strip"];
    let ok = strips.iter().any(|s| Command::new(s).arg("--strip-debug").arg("-o").arg(&out).arg(bin).status().is_ok_and(|st| st.success()));
    if ok {
        out
    } else {
        bin.to_path_buf()
    }
}

impl Vm {
    fn run_systemd(&self, rwdir: &Path, cmd: &str, timeout_s: u64) -> VmOutput {
        let root = repo_root();
        let out = tempfile::tempdir().expect("guest output dir");
        // The guest gets joule without its debug info: every boot copies it, and every exec
        // under TCG (the agent, restore, each nap gate) reads it through virtiofs.
        let bin_dir = tempfile::tempdir().expect("a dir for the guest's binary");
        let guest_bin = without_debug_info(&root.join("target/release/joule"), bin_dir.path());
        let mut c = Command::new("bash");
        c.arg(root.join("scripts/vm/systemd-guest.sh"))
            .args(["run", "--timeout", &timeout_s.to_string(), "--out"])
            .arg(out.path())
            .arg("--file")
            .arg(format!("{}:/usr/local/bin/joule", guest_bin.display()))
            .env("JOULE_VM_CACHE", &self.cache)
            .current_dir(&root);
        for (src, dest) in &self.files {
            c.arg("--file").arg(format!("{}:{dest}", src.display()));
        }
        for e in std::fs::read_dir(rwdir).expect("results dir").flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.ends_with(".sh") {
                c.arg("--file").arg(format!("{}:{GUEST_CHECKS}/{name}", e.path().display()));
            }
        }
        let run = c.arg("--").arg(cmd).output().expect("run scripts/vm/systemd-guest.sh");
        collect(out.path(), rwdir, &run)
    }
}

/// The result of a guest run whose harness left `stdout`, `stderr`, `status` and
/// `console.log` (and whatever the guest wrote to `$JOULE_VM_OUT`) in `out`: those files are
/// copied to `rwdir`, where [`Vm::batch`] reads each check's. A guest that reported no status,
/// or whose harness failed otherwise, shows the end of its console (`out` goes away).
fn collect(out: &Path, rwdir: &Path, run: &std::process::Output) -> VmOutput {
    for e in std::fs::read_dir(out).expect("guest output dir").flatten() {
        let _ = std::fs::copy(e.path(), rwdir.join(e.file_name()));
    }
    let read = |n: &str| std::fs::read_to_string(out.join(n)).unwrap_or_default();
    let guest_status: Option<i32> = read("status").trim().parse().ok();
    let harness_ok = run.status.success() || run.status.code() == guest_status;
    let console = if guest_status.is_some() && harness_ok {
        String::new()
    } else {
        let log = read("console.log");
        let tail: Vec<&str> = log.lines().rev().take(40).collect();
        format!("\n--- the guest's console, last {} lines ---\n{}", tail.len(), tail.into_iter().rev().collect::<Vec<_>>().join("\n"))
    };
    VmOutput {
        status: match guest_status {
            Some(s) if harness_ok => s,
            _ => run.status.code().unwrap_or(-1),
        },
        stdout: read("stdout"),
        stderr: format!("{}{}{console}", read("stderr"), String::from_utf8_lossy(&run.stderr)),
    }
}

impl Default for Vm {
    fn default() -> Self {
        Vm::new()
    }
}
