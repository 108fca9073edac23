//! The one error type of joule-bpf: every failure names what was being done and what is missing.

use std::io;
use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum BpfError {
    /// The machine cannot run joule's BPF programs; the message names each missing piece.
    #[error("BPF is not usable here: {0}")]
    Unavailable(String),
    #[error("while {what}: {source}")]
    Libbpf { what: String, source: libbpf_rs::Error },
    #[error("{path}: {source}")]
    Io { path: PathBuf, source: io::Error },
    #[error("invalid thermal stage config: {0}")]
    Config(String),
    #[error("invalid sched_ext scheduler options: {0}")]
    ScxConfig(String),
    #[error("{path} is already pinned (another joule agent is running, or a crashed one left it: run `joule restore`)")]
    AlreadyPinned { path: PathBuf },
    #[error("refusing to pin in {path}: {why}; remove it (`rm -r {path}`) and start joule again")]
    Untrusted { path: PathBuf, why: String },
    #[error("recording the undo before pinning: {0}")]
    Journal(#[from] joule_core::journal::JournalError),
    #[error("the feed program rejected the reading: {0}")]
    Feed(&'static str),
}

/// Wraps a libbpf-rs error with what joule was doing at the time.
pub(crate) fn bpf<T>(what: impl Into<String>, r: libbpf_rs::Result<T>) -> Result<T, BpfError> {
    r.map_err(|source| BpfError::Libbpf { what: what.into(), source })
}
