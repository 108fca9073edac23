//! Tier 2: a real containerd with its CRI plugin, of a test's own (issue 37). Debian's
//! containerd and runc binaries, unpacked by `scripts/install-deps.sh test` into
//! `$JOULE_TOOLS/bin` (nothing installed, no service), run with a config whose root, state and
//! socket are in a temp dir, the cgroupfs driver and no CNI (pods on the host's network, as a
//! kubelet asks for `hostNetwork` pods). The one image is built offline by
//! `scripts/kube/test-image.sh` and imported with `ctr`. Pods are made through CRI exactly as a
//! kubelet makes them: a sandbox under `/kubepods[/<qos>]/pod<uid>`, the kubelet's labels.
//!
//! Dropping it removes every pod, stops containerd and its shims, and removes what containerd
//! leaves behind: the `kubepods` cgroups it created in every hierarchy (only when there was no
//! `/kubepods` before: a real node's are never touched; [`Containerd::start`] refuses to run
//! there) and its shims' sockets under `/run/containerd/s`.

use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, CreateContainerRequest, ImageSpec, LinuxContainerConfig, LinuxContainerResources, LinuxContainerSecurityContext,
    LinuxPodSandboxConfig, LinuxSandboxSecurityContext, NamespaceMode, NamespaceOption, PodSandboxConfig, PodSandboxMetadata, RemovePodSandboxRequest,
    RunPodSandboxRequest, StartContainerRequest, StopPodSandboxRequest,
};
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

// A node handed an image rather than pulling one: CRI's image list, one-shot containers.
#[path = "containerd_image.rs"]
mod image;
pub use image::Exited;

/// The image every pod runs (the sandbox's pause and the workload): `/pause`, or `/pause spin`.
pub const IMAGE: &str = "localhost/joule-test:1";

const SHIM_SOCKETS: &str = "/run/containerd/s";

/// A pod as a kubelet would ask for it.
#[derive(Debug, Clone)]
pub struct PodSpec {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// "guaranteed", "burstable" or "besteffort": where the kubelet puts its cgroup.
    pub qos: &'static str,
    pub labels: Vec<(String, String)>,
    pub annotations: Vec<(String, String)>,
    /// The workload container's name.
    pub container: String,
    /// Its arguments to /pause (`["spin"]` burns a CPU).
    pub args: Vec<String>,
    /// Its CFS quota per 100 ms period, µs (a Guaranteed pod's limit); None: none.
    pub cpu_quota_us: Option<i64>,
}

/// What [`Containerd::run_pod`] made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pod {
    pub sandbox_id: String,
    pub container_id: String,
    /// The pod's cgroup path (relative to each hierarchy's root).
    pub cgroup_parent: String,
}

pub struct Containerd {
    dir: tempfile::TempDir,
    child: Option<Child>,
    socket: PathBuf,
    rt: tokio::runtime::Runtime,
    pods: Vec<String>,
    /// `/run/containerd/s` before containerd started (None: it was not there).
    shims_before: Option<BTreeSet<std::ffi::OsString>>,
    made_run_containerd: bool,
}

/// Where install-deps.sh unpacks the runtime's binaries.
pub fn tools() -> PathBuf {
    PathBuf::from(std::env::var("JOULE_TOOLS").unwrap_or_else(|_| "/var/cache/joule-tools".into())).join("bin")
}

/// Why this machine cannot run the harness, or None when it can.
pub fn absent() -> Option<String> {
    if let Some(b) = ["containerd", "containerd-shim-runc-v2", "ctr", "runc"].iter().find(|b| !tools().join(b).exists()) {
        return Some(format!("{b} in {} (scripts/install-deps.sh test unpacks Debian's containerd and runc there)", tools().display()));
    }
    if Command::new("gcc").arg("--version").output().is_err() {
        return Some("gcc, which builds the test image's static /pause".into());
    }
    None
}

fn kubepods_dirs() -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir("/sys/fs/cgroup") else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd.flatten().map(|e| e.path().join("kubepods")).filter(|p| p.is_dir()).collect();
    if Path::new("/sys/fs/cgroup/kubepods").is_dir() {
        v.push("/sys/fs/cgroup/kubepods".into());
    }
    v
}

fn shim_sockets() -> Option<BTreeSet<std::ffi::OsString>> {
    Some(std::fs::read_dir(SHIM_SOCKETS).ok()?.flatten().map(|e| e.file_name()).collect())
}

impl Containerd {
    /// Builds and imports the image, starts containerd and waits until CRI answers. Err when a
    /// kubelet's `/kubepods` is already on this machine (the harness would share it) or a step
    /// fails, with the step's output.
    pub fn start(repo: &Path) -> Result<Containerd, String> {
        if !kubepods_dirs().is_empty() {
            return Err("a /kubepods cgroup exists already (a kubelet's?): the harness would share it".into());
        }
        let dir = tempfile::Builder::new().prefix("joule-cri.").tempdir().map_err(|e| e.to_string())?;
        let d = dir.path();
        for sub in ["root", "state", "run", "logs", "cni"] {
            std::fs::create_dir_all(d.join(sub)).map_err(|e| e.to_string())?;
        }
        let socket = d.join("run/containerd.sock");
        let config = format!(
            r#"version = 2
root = "{d}/root"
state = "{d}/state"
oom_score = 0
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[plugins."io.containerd.internal.v1.opt"]
  path = "{d}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{IMAGE}"
  stream_server_address = "127.0.0.1"
  stream_server_port = "0"
  disable_apparmor = true
  disable_hugetlb_controller = true
  tolerate_missing_hugetlb_controller = true
  systemd_cgroup = false
  # root here may lack CAP_SYS_RESOURCE, which lowering oom_score_adj (the pause's -998) needs
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{d}/cni"
    conf_dir = "{d}/cni"
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        BinaryName = "{runc}"
        Root = "{d}/state/runc"
        SystemdCgroup = false
"#,
            d = d.display(),
            sock = socket.display(),
            runc = tools().join("runc").display(),
        );
        std::fs::write(d.join("config.toml"), config).map_err(|e| e.to_string())?;
        let image = d.join("image.tar");
        run(Command::new("bash").arg(repo.join("scripts/kube/test-image.sh")).arg(&image).arg(IMAGE))?;
        let made_run_containerd = !Path::new("/run/containerd").exists();
        let shims_before = shim_sockets();
        let path = format!("{}:{}", tools().display(), std::env::var("PATH").unwrap_or_default());
        let log = std::fs::File::create(d.join("logs/containerd.log")).map_err(|e| e.to_string())?;
        let child = Command::new(tools().join("containerd"))
            .arg("-c")
            .arg(d.join("config.toml"))
            .env("PATH", &path)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("containerd: {e}"))?;
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| e.to_string())?;
        let c = Containerd { dir, child: Some(child), socket, rt, pods: Vec::new(), shims_before, made_run_containerd };
        let t0 = Instant::now();
        while c.ctr(&["version"]).is_err() {
            if t0.elapsed() > Duration::from_secs(20) {
                return Err(format!("containerd did not answer within 20 s; its log:\n{}", c.log()));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        c.ctr(&["-n", "k8s.io", "images", "import", &image.to_string_lossy()])?;
        Ok(c)
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// containerd's log so far.
    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("logs/containerd.log")).unwrap_or_default()
    }

    fn ctr(&self, args: &[&str]) -> Result<String, String> {
        run(Command::new(tools().join("ctr")).arg("--address").arg(&self.socket).args(args))
    }

    fn client(&self) -> Result<RuntimeServiceClient<tonic::transport::Channel>, String> {
        let ch = self.rt.block_on(joule_kube::channel(&self.socket)).map_err(|e| format!("CRI connect: {e}"))?;
        Ok(RuntimeServiceClient::new(ch))
    }

    /// Makes the pod's sandbox and its one container, and starts it.
    pub fn run_pod(&mut self, p: &PodSpec) -> Result<Pod, String> {
        let cgroup_parent = match p.qos {
            "guaranteed" => format!("/kubepods/pod{}", p.uid),
            q => format!("/kubepods/{q}/pod{}", p.uid),
        };
        let kube = |extra: &[(String, String)]| {
            let mut m: std::collections::HashMap<String, String> = extra.iter().cloned().collect();
            m.insert("io.kubernetes.pod.name".into(), p.name.clone());
            m.insert("io.kubernetes.pod.namespace".into(), p.namespace.clone());
            m.insert("io.kubernetes.pod.uid".into(), p.uid.clone());
            m
        };
        let log_dir = self.dir.path().join("logs").join(&p.uid);
        let (sandbox, sandbox_id) = self.start_sandbox(
            PodSandboxMetadata { name: p.name.clone(), uid: p.uid.clone(), namespace: p.namespace.clone(), attempt: 0 },
            &cgroup_parent,
            &log_dir,
            kube(&p.labels),
            p.annotations.iter().cloned().collect(),
        )?;
        let ns = sandbox.linux.as_ref().and_then(|l| l.security_context.as_ref()).and_then(|s| s.namespace_options.clone());
        let mut c = self.client()?;
        let mut labels = kube(&[]);
        labels.insert("io.kubernetes.container.name".into(), p.container.clone());
        let container = ContainerConfig {
            metadata: Some(ContainerMetadata { name: p.container.clone(), attempt: 0 }),
            image: Some(ImageSpec { image: IMAGE.into(), ..Default::default() }),
            command: vec!["/pause".into()],
            args: p.args.clone(),
            log_path: format!("{}.log", p.container),
            labels,
            linux: Some(LinuxContainerConfig {
                resources: Some(LinuxContainerResources {
                    cpu_period: if p.cpu_quota_us.is_some() { 100_000 } else { 0 },
                    cpu_quota: p.cpu_quota_us.unwrap_or(0),
                    cpu_shares: if p.qos == "besteffort" { 2 } else { 102 },
                    ..Default::default()
                }),
                security_context: Some(LinuxContainerSecurityContext { namespace_options: ns, ..Default::default() }),
            }),
            ..Default::default()
        };
        let container_id = self
            .rt
            .block_on(c.create_container(CreateContainerRequest { pod_sandbox_id: sandbox_id.clone(), config: Some(container), sandbox_config: Some(sandbox) }))
            .map_err(|e| format!("CreateContainer: {e}"))?
            .into_inner()
            .container_id;
        self.rt.block_on(c.start_container(StartContainerRequest { container_id: container_id.clone() })).map_err(|e| format!("StartContainer: {e}"))?;
        Ok(Pod { sandbox_id, container_id, cgroup_parent })
    }

    /// Runs a pod sandbox (the harness's pause) as a kubelet asks for a hostNetwork pod: the
    /// host's network, a PID namespace of the pod's own, under `cgroup_parent`. Its config (the
    /// containers' CreateContainer needs it) and id; the harness removes it when dropped.
    pub(crate) fn start_sandbox(
        &mut self,
        metadata: PodSandboxMetadata,
        cgroup_parent: &str,
        log_dir: &Path,
        labels: std::collections::HashMap<String, String>,
        annotations: std::collections::HashMap<String, String>,
    ) -> Result<(PodSandboxConfig, String), String> {
        let ns = NamespaceOption { network: NamespaceMode::Node as i32, pid: NamespaceMode::Pod as i32, ipc: NamespaceMode::Pod as i32, ..Default::default() };
        let sandbox = PodSandboxConfig {
            metadata: Some(metadata),
            log_directory: log_dir.to_string_lossy().into_owned(),
            labels,
            annotations,
            linux: Some(LinuxPodSandboxConfig {
                cgroup_parent: cgroup_parent.into(),
                security_context: Some(LinuxSandboxSecurityContext { namespace_options: Some(ns), ..Default::default() }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let mut c = self.client()?;
        let sandbox_id = self
            .rt
            .block_on(c.run_pod_sandbox(RunPodSandboxRequest { config: Some(sandbox.clone()), runtime_handler: String::new() }))
            .map_err(|e| format!("RunPodSandbox: {e}"))?
            .into_inner()
            .pod_sandbox_id;
        self.pods.push(sandbox_id.clone());
        Ok((sandbox, sandbox_id))
    }

    /// Stops and removes a pod (as a kubelet does when it is deleted).
    pub fn remove_pod(&mut self, sandbox_id: &str) -> Result<(), String> {
        let mut c = self.client()?;
        self.rt.block_on(c.stop_pod_sandbox(StopPodSandboxRequest { pod_sandbox_id: sandbox_id.into() })).map_err(|e| format!("StopPodSandbox: {e}"))?;
        self.rt.block_on(c.remove_pod_sandbox(RemovePodSandboxRequest { pod_sandbox_id: sandbox_id.into() })).map_err(|e| format!("RemovePodSandbox: {e}"))?;
        self.pods.retain(|p| p != sandbox_id);
        Ok(())
    }
}

/// The pid of the process whose cgroup path ends in `id` (a container's or a sandbox's), waiting
/// up to 5 s for it to start.
pub fn pid_in(id: &str) -> Option<i32> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(5) {
        for e in std::fs::read_dir("/proc").ok()?.flatten() {
            let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() else { continue };
            let cg = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).unwrap_or_default();
            if cg.lines().any(|l| l.ends_with(&format!("/{id}"))) {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

fn run(cmd: &mut Command) -> Result<String, String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if !out.status.success() {
        return Err(format!("{cmd:?}: {}\n{}{}", out.status, String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

impl Drop for Containerd {
    fn drop(&mut self) {
        for id in self.pods.clone() {
            let _ = self.remove_pod(&id);
        }
        if let Some(mut child) = self.child.take() {
            let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(child.id() as i32), nix::sys::signal::Signal::SIGTERM);
            let t0 = Instant::now();
            while matches!(child.try_wait(), Ok(None)) && t0.elapsed() < Duration::from_secs(10) {
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
        // A shim outlives containerd: whatever still names our socket goes, with its containers.
        let runc_root = self.dir.path().join("state/runc/k8s.io");
        if let Ok(list) = run(Command::new(tools().join("runc")).arg("--root").arg(&runc_root).args(["list", "-q"])) {
            for id in list.lines().filter(|l| !l.is_empty()) {
                let _ = run(Command::new(tools().join("runc")).arg("--root").arg(&runc_root).args(["delete", "--force", id]));
            }
        }
        let sock = self.socket.to_string_lossy().into_owned();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let cmdline = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            if String::from_utf8_lossy(&cmdline).split('\0').any(|a| a == sock) {
                if let Ok(pid) = e.file_name().to_string_lossy().parse::<i32>() {
                    let _ = nix::sys::signal::kill(nix::unistd::Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
                }
            }
        }
        // Mounts under the temp dir (rootfs overlays, a sandbox's shm), deepest first.
        let prefix = self.dir.path().to_string_lossy().into_owned();
        let mut mounts: Vec<String> = std::fs::read_to_string("/proc/self/mounts")
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.split(' ').nth(1).map(str::to_string))
            .filter(|m| m.starts_with(&prefix))
            .collect();
        mounts.sort_by_key(|m| std::cmp::Reverse(m.len()));
        for m in mounts {
            let _ = nix::mount::umount2(m.as_str(), nix::mount::MntFlags::MNT_DETACH);
        }
        // runc leaves the pods' and kubepods' directories in every hierarchy: deepest first,
        // retried while the last processes leave them.
        for _ in 0..50 {
            let mut left = false;
            for top in kubepods_dirs() {
                let mut dirs: Vec<PathBuf> = walk_dirs(&top);
                dirs.sort_by_key(|p| std::cmp::Reverse(p.components().count()));
                for d in dirs {
                    left |= std::fs::remove_dir(&d).is_err();
                }
            }
            if !left {
                break;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        // Our shims' sockets: those that were not there before containerd started.
        let before = self.shims_before.clone().unwrap_or_default();
        for s in shim_sockets().unwrap_or_default().difference(&before) {
            let _ = std::fs::remove_file(Path::new(SHIM_SOCKETS).join(s));
        }
        if self.made_run_containerd {
            let _ = std::fs::remove_dir(SHIM_SOCKETS);
            let _ = std::fs::remove_dir("/run/containerd");
        }
    }
}

fn walk_dirs(top: &Path) -> Vec<PathBuf> {
    let mut out = vec![top.to_path_buf()];
    let mut i = 0;
    while i < out.len() {
        if let Ok(rd) = std::fs::read_dir(&out[i]) {
            out.extend(rd.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
        }
        i += 1;
    }
    out
}
