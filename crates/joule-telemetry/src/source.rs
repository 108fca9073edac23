//! The one trait every telemetry source implements, and the error a failed read becomes.

use joule_core::Snapshot;
use std::io;
use std::path::PathBuf;

/// Something that reads one part of the machine into a [`Snapshot`]. A source keeps the raw
/// counters of its previous sample to turn them into rates; it reads `snap.interval_ms` (set
/// by the [`crate::Sampler`] before any source runs, 0 on the first sample) for the interval.
/// Optional hardware that is simply absent is not an error: the source adds one line to
/// `snap.notes` saying what is missing and what stands in for it.
pub trait Source {
    fn name(&self) -> &'static str;
    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError>;
}

#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: io::Error,
    },
    #[error("unexpected content in {}: {detail}", path.display())]
    Parse { path: PathBuf, detail: String },
    /// A source that does not read files (an eBPF program, a feed into one) failed.
    #[error("{0}")]
    Other(String),
}

impl SourceError {
    pub(crate) fn read(path: impl Into<PathBuf>, source: io::Error) -> Self {
        SourceError::Read { path: path.into(), source }
    }

    pub(crate) fn parse(path: impl Into<PathBuf>, detail: impl Into<String>) -> Self {
        SourceError::Parse { path: path.into(), detail: detail.into() }
    }
}
