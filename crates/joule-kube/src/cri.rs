//! The CRI client: one connection per round of questions to the runtime's Unix socket, on a
//! current-thread tokio runtime of its own (the agent's loop is not async), the questions about
//! each pod within a timeout so a hung runtime cannot stall the loop. Read-only: it lists,
//! never creates. The agent asks about the pods its processes are in, one at a time, by the ids
//! their cgroups carry ([`Cri::lookup`]): a listing of every pod carries every pod's
//! annotations (up to 256 KiB each, chosen by whoever writes the pod), so its size is a
//! tenant's choice; one pod's answer is bounded by that pod alone.

use joule_core::config::{PodIndex, PodMeta};
use joule_core::membership::PodQuery;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{ContainerFilter, ListContainersRequest, ListPodSandboxRequest, PodSandboxFilter};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The largest answer read, as the kubelet's CRI client allows (tonic's default is 4 MiB).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;

/// Where containerd and CRI-O put their CRI sockets by default, in the order tried.
pub const DEFAULT_SOCKETS: [&str; 2] = ["/run/containerd/containerd.sock", "/run/crio/crio.sock"];

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("cannot start the CRI client: {0}")]
    Runtime(#[source] std::io::Error),
    #[error("no container runtime's CRI socket under {} ({})", root.display(), DEFAULT_SOCKETS.join(", "))]
    NoSocket { root: PathBuf },
    #[error("cannot reach the container runtime at {}: {source}", socket.display())]
    Connect {
        socket: PathBuf,
        #[source]
        source: tonic::transport::Error,
    },
    #[error("the container runtime at {} answered {call} with an error: {status}", socket.display())]
    Call { socket: PathBuf, call: &'static str, status: Box<tonic::Status> },
    #[error("the container runtime at {} did not answer within {} ms", socket.display(), timeout.as_millis())]
    Timeout { socket: PathBuf, timeout: Duration },
}

pub struct Cri {
    /// None: the first of [`DEFAULT_SOCKETS`] under `root` there at each round (a node's
    /// runtime may start after joule).
    socket: Option<PathBuf>,
    root: PathBuf,
    timeout: Duration,
    rt: tokio::runtime::Runtime,
}

impl Cri {
    /// A client of the runtime at `socket` (nothing is connected yet).
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Result<Cri, CriError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().map_err(CriError::Runtime)?;
        Ok(Cri { socket: Some(socket.into()), root: PathBuf::from("/"), timeout, rt })
    }

    /// A client of whichever of [`DEFAULT_SOCKETS`] under `root` is there when it is asked.
    pub fn discovering(root: impl Into<PathBuf>, timeout: Duration) -> Result<Cri, CriError> {
        let mut c = Cri::new(PathBuf::new(), timeout)?;
        c.socket = None;
        c.root = root.into();
        Ok(c)
    }

    /// The first of [`DEFAULT_SOCKETS`] under `root` ("/" on a node) that is a socket.
    pub fn find_socket(root: &Path) -> Option<PathBuf> {
        use std::os::unix::fs::FileTypeExt;
        DEFAULT_SOCKETS.iter().map(|s| root.join(s.trim_start_matches('/'))).find(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket()))
    }

    /// The socket asked now.
    fn socket_now(&self) -> Result<PathBuf, CriError> {
        match &self.socket {
            Some(s) => Ok(s.clone()),
            None => Cri::find_socket(&self.root).ok_or_else(|| CriError::NoSocket { root: self.root.clone() }),
        }
    }

    async fn client(&self, socket: &Path) -> Result<RuntimeServiceClient<tonic::transport::Channel>, CriError> {
        let channel = channel(socket).await.map_err(|source| CriError::Connect { socket: socket.to_path_buf(), source })?;
        Ok(RuntimeServiceClient::new(channel).max_decoding_message_size(MAX_MESSAGE_BYTES))
    }

    /// Every pod sandbox and container the runtime knows, as a `PodIndex` (for tests and
    /// diagnostics: its size grows with every pod's annotations; the agent uses [`lookup`](Self::lookup)).
    pub fn pods(&self) -> Result<PodIndex, CriError> {
        let socket = self.socket_now()?;
        let timeout = self.timeout;
        self.rt.block_on(async { tokio::time::timeout(timeout, self.list(&socket)).await.map_err(|_| CriError::Timeout { socket: socket.clone(), timeout })? })
    }

    async fn list(&self, socket: &Path) -> Result<PodIndex, CriError> {
        let mut client = self.client(socket).await?;
        let call = |call: &'static str| move |status| CriError::Call { socket: socket.to_path_buf(), call, status: Box::new(status) };
        let sandboxes = client.list_pod_sandbox(ListPodSandboxRequest { filter: None }).await.map_err(call("ListPodSandbox"))?.into_inner().items;
        let containers = client.list_containers(ListContainersRequest { filter: None }).await.map_err(call("ListContainers"))?.into_inner().containers;
        Ok(crate::index(&sandboxes, &containers))
    }

    /// What the runtime says about these pods alone, over one connection, each pod's questions
    /// within the timeout; a pod it does not know (yet) is left out. The first error ends the
    /// round: a runtime that fails one question fails the next.
    pub fn lookup(&self, pods: &[PodQuery]) -> Result<PodIndex, CriError> {
        let socket = self.socket_now()?;
        let timeout = self.timeout;
        self.rt.block_on(async {
            let mut client = tokio::time::timeout(timeout, self.client(&socket)).await.map_err(|_| CriError::Timeout { socket: socket.clone(), timeout })??;
            let mut out = PodIndex::new();
            for q in pods {
                let one =
                    tokio::time::timeout(timeout, pod(&mut client, &socket, q)).await.map_err(|_| CriError::Timeout { socket: socket.clone(), timeout })??;
                if let Some(meta) = one {
                    out.insert(q.uid.clone(), meta);
                }
            }
            Ok(out)
        })
    }
}

/// One pod from the ids its cgroups carry: a container's id names its sandbox (ListContainers
/// by id), a pause container's id is its sandbox's; the sandbox (ListPodSandbox by id) is the
/// pod's only when its UID is the one asked about, and its containers are listed by sandbox.
/// Every filter is exact (a runtime may take an id's prefix): an answer naming another id is
/// not taken.
async fn pod(client: &mut RuntimeServiceClient<tonic::transport::Channel>, socket: &Path, q: &PodQuery) -> Result<Option<PodMeta>, CriError> {
    let call = |call: &'static str| move |status| CriError::Call { socket: socket.to_path_buf(), call, status: Box::new(status) };
    let (mut sandboxes, mut containers) = (Vec::new(), Vec::new());
    for id in q.ids.iter().filter(|id| !id.is_empty()) {
        if sandboxes.iter().any(|s: &k8s_cri::v1::PodSandbox| &s.id == id) || containers.iter().any(|c: &k8s_cri::v1::Container| &c.id == id) {
            continue;
        }
        let by_id = ContainerFilter { id: id.clone(), ..Default::default() };
        let found = client.list_containers(ListContainersRequest { filter: Some(by_id) }).await.map_err(call("ListContainers"))?.into_inner().containers;
        let sandbox_id = found.into_iter().find(|c| &c.id == id).map_or_else(|| id.clone(), |c| c.pod_sandbox_id);
        if sandbox_id.is_empty() || sandboxes.iter().any(|s| s.id == sandbox_id) {
            continue;
        }
        let by_id = PodSandboxFilter { id: sandbox_id.clone(), ..Default::default() };
        let listed = client.list_pod_sandbox(ListPodSandboxRequest { filter: Some(by_id) }).await.map_err(call("ListPodSandbox"))?.into_inner().items;
        let Some(sandbox) = listed.into_iter().find(|s| s.id == sandbox_id && s.metadata.as_ref().is_some_and(|m| m.uid == q.uid)) else { continue };
        let of_sandbox = ContainerFilter { pod_sandbox_id: sandbox_id.clone(), ..Default::default() };
        let listed = client.list_containers(ListContainersRequest { filter: Some(of_sandbox) }).await.map_err(call("ListContainers"))?.into_inner().containers;
        containers.extend(listed.into_iter().filter(|c| c.pod_sandbox_id == sandbox_id));
        sandboxes.push(sandbox);
    }
    Ok(crate::index(&sandboxes, &containers).remove(&q.uid))
}

/// A gRPC channel to the runtime's CRI socket (the test harness that makes pods uses it too).
pub async fn channel(socket: &Path) -> Result<tonic::transport::Channel, tonic::transport::Error> {
    let path = socket.to_path_buf();
    // The URI is a placeholder: the connector always dials the socket.
    tonic::transport::Endpoint::from_static("http://[::]:50051")
        .connect_with_connector(tower::service_fn(move |_: tonic::transport::Uri| {
            let path = path.clone();
            async move { Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(tokio::net::UnixStream::connect(path).await?)) }
        }))
        .await
}

impl joule_core::membership::PodSource for Cri {
    fn lookup(&mut self, pods: &[PodQuery]) -> Result<PodIndex, String> {
        Cri::lookup(self, pods).map_err(|e| e.to_string())
    }
    fn describe(&self) -> String {
        match &self.socket {
            Some(s) => format!("cri:{}", s.display()),
            None => format!("cri:{}", DEFAULT_SOCKETS.join(" or ")),
        }
    }
}
