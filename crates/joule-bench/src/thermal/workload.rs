//! The three loads of `joule-bench thermal` — fio random read/write, stress-ng CPU workers and
//! the latency probe — each started stopped in its own process group (so its pid is known to
//! the agent's class config before it runs, all three start together, and one signal to the
//! group ends it and its workers), and the parsers for what they report.

use anyhow::Context;
use nix::sys::signal::{kill, killpg, Signal};
use nix::unistd::Pid;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// A child started stopped (SIGSTOP before its exec) as the leader of its own process group.
/// Dropping it ends the whole group (SIGTERM, then SIGKILL) and reaps the leader.
pub struct Stopped {
    pub name: &'static str,
    child: Child,
    /// Where its stderr goes, so a load that fails can say why.
    stderr: PathBuf,
}

impl Stopped {
    /// Spawns `cmd` stopped: a shell stops itself and, once continued, execs the program in
    /// its place (same pid). (Stopping in `pre_exec` would hang: spawn waits for the exec.) The
    /// child dies with the bench's main thread (PDEATHSIG, kept across exec) even if the bench
    /// is SIGKILLed, and its own time bound ends it in any case.
    /// Its stdin is /dev/null, its stdout a pipe when `pipe_stdout`, its stderr the file `stderr`.
    pub fn spawn(name: &'static str, cmd: &Command, pipe_stdout: bool, stderr: &Path) -> anyhow::Result<Stopped> {
        let mut sh = Command::new("/bin/sh");
        sh.args(["-c", "kill -STOP $$ && exec \"$@\"", "sh"]).arg(cmd.get_program()).args(cmd.get_args());
        sh.process_group(0);
        // SAFETY: prctl is async-signal-safe and touches no memory of the parent.
        unsafe {
            sh.pre_exec(|| if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM) != 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) });
        }
        let err = std::fs::File::create(stderr).with_context(|| format!("while creating {}", stderr.display()))?;
        sh.stdin(Stdio::null()).stderr(err).stdout(if pipe_stdout { Stdio::piped() } else { Stdio::null() });
        let child = sh.spawn().with_context(|| format!("while starting {name}"))?;
        let s = Stopped { name, child, stderr: stderr.to_path_buf() };
        // Wait until it has stopped, so SIGCONT is not lost on a child still on its way there.
        let deadline = Instant::now() + Duration::from_secs(5);
        while state(s.pid()) != Some('T') {
            anyhow::ensure!(Instant::now() < deadline, "{name} did not reach its start line (pid {})", s.pid());
            std::thread::sleep(Duration::from_millis(5));
        }
        Ok(s)
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn go(&self) -> anyhow::Result<()> {
        kill(Pid::from_raw(self.pid()), Signal::SIGCONT).with_context(|| format!("while starting {}", self.name))
    }

    /// Waits for the leader to exit by itself, at most `timeout`.
    pub fn wait(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Ok(Some(st)) = self.child.try_wait() {
                return Some(st);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The last lines it wrote to stderr (for an error message).
    pub fn stderr_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(5)..].join("\n")
    }

    /// The leader's stdout, read to the end (the probe prints its samples there).
    pub fn take_stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }
}

impl Drop for Stopped {
    fn drop(&mut self) {
        let pg = Pid::from_raw(self.pid());
        // A stopped group must be continued to act on SIGTERM.
        let _ = killpg(pg, Signal::SIGTERM);
        let _ = killpg(pg, Signal::SIGCONT);
        if self.wait(Duration::from_secs(5)).is_none() {
            let _ = killpg(pg, Signal::SIGKILL);
            let _ = self.child.wait();
        }
        // Workers the leader did not reap (it was killed first) still hold the group.
        let deadline = Instant::now() + Duration::from_secs(5);
        while killpg(pg, None).is_ok() && Instant::now() < deadline {
            let _ = killpg(pg, Signal::SIGKILL);
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

/// Field 3 of /proc/PID/stat; None when the process is gone.
fn state(pid: i32) -> Option<char> {
    let s = std::fs::read(format!("/proc/{pid}/stat")).ok()?;
    joule_core::procfs::Stat::parse(&s).map(|st| st.state)
}

/// Whether `dir` takes O_DIRECT (tmpfs and some overlay setups refuse it).
pub fn direct_io_works(dir: &Path) -> bool {
    use std::os::unix::fs::OpenOptionsExt;
    let p = dir.join(".direct-probe");
    let ok = std::fs::OpenOptions::new().write(true).create(true).truncate(true).custom_flags(libc::O_DIRECT).open(&p).is_ok();
    let _ = std::fs::remove_file(&p);
    ok
}

/// What fio is asked to do; the same in both modes.
#[derive(Debug, Clone)]
pub struct FioJob {
    pub file: PathBuf,
    pub size_mib: u64,
    pub direct: bool,
}

impl FioJob {
    fn base(&self) -> Command {
        let mut c = Command::new("fio");
        c.args(["--name=randrw", "--rw=randrw", "--rwmixread=50", "--bs=4k", "--ioengine=psync", "--iodepth=1"])
            .arg(format!("--filename={}", self.file.display()))
            .arg(format!("--size={}M", self.size_mib))
            .arg(format!("--direct={}", u8::from(self.direct)));
        c
    }

    /// Lays the file out once, before the first mode, so neither mode pays for it.
    pub fn lay_out(&self) -> anyhow::Result<()> {
        let out = self.base().arg("--create_only=1").output().context("while running fio (is it installed? scripts/install-deps.sh)")?;
        anyhow::ensure!(out.status.success(), "fio could not lay out {}: {}", self.file.display(), String::from_utf8_lossy(&out.stderr).trim());
        Ok(())
    }

    /// Random 4 KiB reads and writes for `seconds`; JSON summary to `json`, bandwidth every
    /// second to `<log_prefix>_bw.1.log`.
    pub fn command(&self, seconds: u64, json: &Path, log_prefix: &Path) -> Command {
        let mut c = self.base();
        c.args(["--time_based", "--output-format=json", "--log_avg_msec=1000"])
            .arg(format!("--runtime={seconds}"))
            .arg(format!("--output={}", json.display()))
            .arg(format!("--write_bw_log={}", log_prefix.display()));
        c
    }
}

/// `workers` stress-ng CPU hogs (one fixed method, so a bogo op is the same work throughout)
/// for `seconds`; metrics to `yaml`. Its temp path is `yaml`'s directory: stress-ng aborts when
/// its temp path (the current directory by default) is not writable, as the repo is in the VM.
pub fn stress_command(workers: usize, seconds: u64, yaml: &Path) -> Command {
    let mut c = Command::new("stress-ng");
    c.arg("--cpu").arg(workers.to_string()).args(["--cpu-method", "matrixprod", "--metrics", "--timeout"]).arg(format!("{seconds}s")).arg("--yaml").arg(yaml);
    c.arg("--temp-path").arg(yaml.parent().unwrap_or(Path::new(".")));
    c
}

/// fio's totals: MiB/s read and written over its run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FioResult {
    pub read_mib_s: f64,
    pub write_mib_s: f64,
}

pub fn parse_fio_json(text: &str) -> anyhow::Result<FioResult> {
    let v: serde_json::Value = serde_json::from_str(text).context("fio's output is not JSON")?;
    let jobs = v["jobs"].as_array().filter(|j| !j.is_empty()).context("fio's JSON has no jobs")?;
    let sum = |dir: &str| -> anyhow::Result<f64> {
        jobs.iter().map(|j| j[dir]["bw_bytes"].as_f64().with_context(|| format!("fio's JSON has no {dir}.bw_bytes"))).sum::<anyhow::Result<f64>>()
    };
    const MIB: f64 = 1024.0 * 1024.0;
    Ok(FioResult { read_mib_s: sum("read")? / MIB, write_mib_s: sum("write")? / MIB })
}

/// What the `cpu` stressor did, from stress-ng's `--yaml` metrics.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct StressResult {
    pub bogo_ops: u64,
    /// CPU time its workers got, user and system, s: the work per CPU second tells a slower
    /// rate from less CPU.
    pub cpu_s: f64,
}

/// The `cpu` stressor's bogo ops and CPU time from stress-ng's `--yaml` metrics.
pub fn parse_stress_yaml(text: &str) -> anyhow::Result<StressResult> {
    let mut in_cpu = false;
    let (mut ops, mut user, mut sys) = (None, None, None);
    for line in text.lines().map(str::trim) {
        if let Some(name) = line.strip_prefix("- stressor:") {
            in_cpu = name.trim() == "cpu";
        } else if in_cpu {
            let num = |v: &str, what: &str| v.trim().parse::<f64>().with_context(|| format!("stress-ng's {what} is not a number: {v:?}"));
            if let Some(v) = line.strip_prefix("bogo-ops:") {
                ops = Some(v.trim().parse::<u64>().context("stress-ng's bogo-ops is not a number")?);
            } else if let Some(v) = line.strip_prefix("user-time:") {
                user = Some(num(v, "user-time")?);
            } else if let Some(v) = line.strip_prefix("system-time:") {
                sys = Some(num(v, "system-time")?);
            }
        }
    }
    match (ops, user, sys) {
        (Some(bogo_ops), Some(u), Some(s)) => Ok(StressResult { bogo_ops, cpu_s: u + s }),
        (None, ..) => anyhow::bail!("stress-ng's metrics have no bogo-ops for the cpu stressor"),
        _ => anyhow::bail!("stress-ng's metrics have no user-time and system-time for the cpu stressor"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fixture(name: &str) -> String {
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../../testdata/bench-thermal").join(name)).unwrap()
    }

    #[test]
    fn fio_json_gives_mib_per_second_each_way() {
        let r = parse_fio_json(&fixture("fio.json")).unwrap();
        assert!((r.read_mib_s - 50_299_862.0 / 1_048_576.0).abs() < 1e-9, "{r:?}");
        assert!((r.write_mib_s - 50_308_051.0 / 1_048_576.0).abs() < 1e-9, "{r:?}");
        assert!(parse_fio_json("{\"jobs\": []}").is_err());
        assert!(parse_fio_json("fio: failed").is_err());
    }

    #[test]
    fn stress_ng_yaml_gives_the_cpu_stressors_bogo_ops() {
        assert_eq!(parse_stress_yaml(&fixture("stress-ng.yaml")).unwrap(), StressResult { bogo_ops: 2014, cpu_s: 1.999697 });
        assert!(parse_stress_yaml("metrics:\n    - stressor: vm\n      bogo-ops: 5\n").is_err(), "another stressor's ops are not the cpu's");
        assert!(parse_stress_yaml("").is_err());
        assert!(parse_stress_yaml("metrics:\n    - stressor: cpu\n      bogo-ops: 5\n").is_err(), "no CPU time");
    }

    #[test]
    fn a_failing_load_keeps_what_it_said() {
        let mut c = Command::new("sh");
        c.args(["-c", "echo 'aborting: temp-path is not writeable' >&2; exit 3"]);
        let d = tempfile::tempdir().unwrap();
        let mut s = Stopped::spawn("sh", &c, false, &d.path().join("sh.err")).unwrap();
        s.go().unwrap();
        let st = s.wait(Duration::from_secs(5)).expect("it exits");
        assert_eq!(st.code(), Some(3));
        assert_eq!(s.stderr_tail(), "aborting: temp-path is not writeable");
    }

    #[test]
    fn a_stopped_child_waits_for_go_and_its_group_dies_with_it() {
        let mut c = Command::new("sh");
        c.args(["-c", "sleep 30 & wait"]);
        let d = tempfile::tempdir().unwrap();
        let s = Stopped::spawn("sh", &c, false, &d.path().join("sh.err")).unwrap();
        let pid = s.pid();
        assert_eq!(state(pid), Some('T'));
        s.go().unwrap();
        std::thread::sleep(Duration::from_millis(200));
        assert_ne!(state(pid), Some('T'));
        drop(s);
        assert!(killpg(Pid::from_raw(pid), None).is_err(), "group {pid} survived");
    }
}
