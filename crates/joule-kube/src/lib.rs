//! joule-kube: what a Kubernetes node's container runtime says about its pods, read-only over
//! CRI (issue 37) — the same gRPC API the kubelet drives (`ListContainers`, `ListPodSandbox`,
//! each filtered to one pod's ids), on the runtime's Unix socket (containerd or CRI-O), with no
//! API server and no credentials. The pods' identity comes from the kubelet's cgroups (`joule_core::kubepods`); this crate
//! adds their namespace, name, labels, annotations and container names, keyed by pod UID
//! ([`joule_core::config::PodIndex`]).

mod cri;
mod index;

pub use cri::{channel, Cri, CriError, DEFAULT_SOCKETS, MAX_MESSAGE_BYTES};
pub use index::index;
