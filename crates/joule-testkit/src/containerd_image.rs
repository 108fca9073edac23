//! The harness's containerd as a node that was handed an image rather than pulling it: the
//! images its CRI plugin lists (what a kubelet sees), and a one-shot container of any image
//! (its exit code and output), run in a pod of its own as a kubelet runs one.

use super::{run, tools, Containerd};
use k8s_cri::v1::image_service_client::ImageServiceClient;
use k8s_cri::v1::{
    ContainerConfig, ContainerMetadata, ContainerState, ContainerStatusRequest, CreateContainerRequest, Image, ImageSpec, ListImagesRequest,
    PodSandboxMetadata, StartContainerRequest,
};
use std::path::Path;
use std::time::{Duration, Instant};

/// What a one-shot container did.
#[derive(Debug, Clone)]
pub struct Exited {
    pub exit_code: i32,
    /// Its stdout and stderr lines, in order, without the CRI log's timestamps and stream tags.
    pub output: String,
}

impl Containerd {
    /// `ctr` against this containerd, with `CONTAINERD_ADDRESS` and the binary to give a script
    /// that runs `ctr` itself (scripts/kube/load-image.sh).
    pub fn ctr_env(&self) -> [(&'static str, String); 2] {
        [("CONTAINERD_ADDRESS", self.socket.to_string_lossy().into_owned()), ("CTR", tools().join("ctr").to_string_lossy().into_owned())]
    }

    /// Runs `script` (bash) with `args` and [`Containerd::ctr_env`]; its output, or the error
    /// with it.
    pub fn run_script(&self, script: &Path, args: &[&str]) -> Result<String, String> {
        run(std::process::Command::new("bash").arg(script).args(args).envs(self.ctr_env()))
    }

    /// The images the runtime lists over CRI (`ListImages`, the kubelet's call).
    pub fn cri_images(&self) -> Result<Vec<Image>, String> {
        let ch = self.rt.block_on(joule_kube::channel(&self.socket)).map_err(|e| format!("CRI connect: {e}"))?;
        let mut c = ImageServiceClient::new(ch);
        Ok(self.rt.block_on(c.list_images(ListImagesRequest { filter: None })).map_err(|e| format!("ListImages: {e}"))?.into_inner().images)
    }

    /// Runs `image` with `args` after its own entrypoint, in a pod of its own (the harness's
    /// pause as its sandbox, the host's network), and waits up to 20 s for it to exit.
    pub fn run_once(&mut self, image: &str, args: &[&str]) -> Result<Exited, String> {
        static RUNS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = RUNS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let uid = format!("0ce0{:04x}-{n:04x}-4000-8000-000000000000", std::process::id() & 0xffff);
        let logs = self.dir.path().join("logs").join(&uid);
        let metadata = PodSandboxMetadata { name: "once".into(), uid: uid.clone(), namespace: "kube-system".into(), attempt: 0 };
        let (sandbox, sandbox_id) = self.start_sandbox(metadata, &format!("/kubepods/besteffort/pod{uid}"), &logs, Default::default(), Default::default())?;
        let mut c = self.client()?;
        let container = ContainerConfig {
            metadata: Some(ContainerMetadata { name: "once".into(), attempt: 0 }),
            image: Some(ImageSpec { image: image.into(), ..Default::default() }),
            args: args.iter().map(|a| a.to_string()).collect(),
            log_path: "once.log".into(),
            ..Default::default()
        };
        let id = self
            .rt
            .block_on(c.create_container(CreateContainerRequest { pod_sandbox_id: sandbox_id.clone(), config: Some(container), sandbox_config: Some(sandbox) }))
            .map_err(|e| format!("CreateContainer ({image}): {e}"))?
            .into_inner()
            .container_id;
        self.rt.block_on(c.start_container(StartContainerRequest { container_id: id.clone() })).map_err(|e| format!("StartContainer: {e}"))?;
        let t0 = Instant::now();
        let exit_code = loop {
            let status = self
                .rt
                .block_on(c.container_status(ContainerStatusRequest { container_id: id.clone(), verbose: false }))
                .map_err(|e| format!("ContainerStatus: {e}"))?
                .into_inner()
                .status
                .ok_or("ContainerStatus: no status")?;
            if status.state == ContainerState::ContainerExited as i32 {
                break status.exit_code;
            }
            if t0.elapsed() > Duration::from_secs(20) {
                return Err(format!("{image} {args:?} still running after 20 s"));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        // The CRI log format: "<time> <stdout|stderr> <F|P> <text>" per line.
        let log = std::fs::read_to_string(logs.join("once.log")).map_err(|e| format!("the container's log: {e}"))?;
        let output = log.lines().filter_map(|l| l.splitn(4, ' ').nth(3)).map(|t| format!("{t}\n")).collect();
        self.remove_pod(&sandbox_id)?;
        Ok(Exited { exit_code, output })
    }
}
