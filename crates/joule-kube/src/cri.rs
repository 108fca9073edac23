//! The CRI client: one connection per refresh to the runtime's Unix socket, on a
//! current-thread tokio runtime of its own (the agent's loop is not async), every call within a
//! timeout so a hung runtime cannot stall the loop. Read-only: it lists, never creates.

use joule_core::config::PodIndex;
use k8s_cri::v1::runtime_service_client::RuntimeServiceClient;
use k8s_cri::v1::{ListContainersRequest, ListPodSandboxRequest};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Where containerd and CRI-O put their CRI sockets by default, in the order tried.
pub const DEFAULT_SOCKETS: [&str; 2] = ["/run/containerd/containerd.sock", "/run/crio/crio.sock"];

#[derive(Debug, thiserror::Error)]
pub enum CriError {
    #[error("cannot start the CRI client: {0}")]
    Runtime(#[source] std::io::Error),
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
    socket: PathBuf,
    timeout: Duration,
    rt: tokio::runtime::Runtime,
}

impl Cri {
    /// A client of the runtime at `socket` (nothing is connected yet).
    pub fn new(socket: impl Into<PathBuf>, timeout: Duration) -> Result<Cri, CriError> {
        let rt = tokio::runtime::Builder::new_current_thread().enable_io().enable_time().build().map_err(CriError::Runtime)?;
        Ok(Cri { socket: socket.into(), timeout, rt })
    }

    /// The first of [`DEFAULT_SOCKETS`] under `root` ("/" on a node) that is a socket.
    pub fn find_socket(root: &Path) -> Option<PathBuf> {
        use std::os::unix::fs::FileTypeExt;
        DEFAULT_SOCKETS.iter().map(|s| root.join(s.trim_start_matches('/'))).find(|p| std::fs::metadata(p).is_ok_and(|m| m.file_type().is_socket()))
    }

    pub fn socket(&self) -> &Path {
        &self.socket
    }

    /// Every pod sandbox and container the runtime knows, as a `PodIndex`.
    pub fn pods(&self) -> Result<PodIndex, CriError> {
        let timeout = self.timeout;
        self.rt.block_on(async { tokio::time::timeout(timeout, self.list()).await.map_err(|_| CriError::Timeout { socket: self.socket.clone(), timeout })? })
    }

    async fn list(&self) -> Result<PodIndex, CriError> {
        let channel = channel(&self.socket).await.map_err(|source| CriError::Connect { socket: self.socket.clone(), source })?;
        let mut client = RuntimeServiceClient::new(channel);
        let call = |call: &'static str| move |status| CriError::Call { socket: self.socket.clone(), call, status: Box::new(status) };
        let sandboxes = client.list_pod_sandbox(ListPodSandboxRequest { filter: None }).await.map_err(call("ListPodSandbox"))?.into_inner().items;
        let containers = client.list_containers(ListContainersRequest { filter: None }).await.map_err(call("ListContainers"))?.into_inner().containers;
        Ok(crate::index(&sandboxes, &containers))
    }
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
    fn pods(&mut self) -> Result<PodIndex, String> {
        Cri::pods(self).map_err(|e| e.to_string())
    }
    fn describe(&self) -> String {
        format!("cri:{}", self.socket.display())
    }
}
