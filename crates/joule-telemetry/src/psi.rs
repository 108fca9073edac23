//! Pressure stall information from `<procfs>/pressure/{cpu,io,memory}`: the `some` and `full`
//! avg10 percentages and total stall µs, labelled `kernel` (the kernel's own stall accounting).

use crate::fsread::read_into;
use crate::{Source, SourceError};
use joule_core::snapshot::{Psi, PsiLine};
use joule_core::{Origin, Snapshot};
use std::io;
use std::path::PathBuf;

/// Reads the three system-wide pressure files. A kernel without PSI (no `pressure/` directory,
/// or `psi=0` on the command line, where reads fail with EOPNOTSUPP) gives `snap.psi = None`
/// and a note; it is not an error.
pub struct PsiSource {
    dir: PathBuf,
    buf: String,
}

impl PsiSource {
    pub fn new(procfs_root: impl Into<PathBuf>) -> Self {
        Self { dir: procfs_root.into().join("pressure"), buf: String::new() }
    }

    fn read_one(&mut self, name: &str) -> Result<Option<PsiLine>, SourceError> {
        let path = self.dir.join(name);
        match read_into(&path, &mut self.buf) {
            Ok(()) => parse_psi(&self.buf).map(Some).ok_or_else(|| SourceError::parse(&path, "no `some` line")),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(SourceError::read(&path, e)),
        }
    }
}

/// Parses one pressure file: `some avg10=.. avg60=.. avg300=.. total=..` and an optional
/// `full ...` line (the CPU file has one only since Linux 5.13).
pub(crate) fn parse_psi(text: &str) -> Option<PsiLine> {
    let mut some = None;
    let mut full = None;
    for line in text.lines() {
        let mut it = line.split_ascii_whitespace();
        let kind = it.next();
        let mut avg10 = None;
        let mut total = None;
        for kv in it {
            match kv.split_once('=') {
                Some(("avg10", v)) => avg10 = v.parse::<f64>().ok(),
                Some(("total", v)) => total = v.parse::<u64>().ok(),
                _ => {}
            }
        }
        let pair = avg10.zip(total);
        match kind {
            Some("some") => some = pair,
            Some("full") => full = pair,
            _ => {}
        }
    }
    let (some_avg10, some_total_us) = some?;
    Some(PsiLine { some_avg10, some_total_us, full_avg10: full.map(|f| f.0), full_total_us: full.map(|f| f.1) })
}

impl Source for PsiSource {
    fn name(&self) -> &'static str {
        "psi"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        if !self.dir.is_dir() {
            snap.psi = None;
            snap.notes.push(format!("no PSI ({} missing: kernel without CONFIG_PSI)", self.dir.display()));
            return Ok(());
        }
        let mut psi = Psi { source: Origin::Kernel, ..Psi::default() };
        for (name, slot) in [("cpu", &mut psi.cpu), ("io", &mut psi.io), ("memory", &mut psi.memory)] {
            match self.read_one(name) {
                Ok(v) => *slot = v,
                Err(SourceError::Read { source, .. }) if source.raw_os_error() == Some(libc::EOPNOTSUPP) => {
                    snap.psi = None;
                    snap.notes.push("no PSI (disabled with psi=0 on the kernel command line)".into());
                    return Ok(());
                }
                Err(e) => return Err(e),
            }
        }
        snap.psi = Some(psi);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_some_and_full() {
        let t = "some avg10=1.47 avg60=1.40 avg300=0.86 total=4309132\nfull avg10=0.25 avg60=0.00 avg300=0.00 total=12\n";
        let p = parse_psi(t).unwrap();
        assert_eq!(p.some_avg10, 1.47);
        assert_eq!(p.some_total_us, 4309132);
        assert_eq!(p.full_avg10, Some(0.25));
        assert_eq!(p.full_total_us, Some(12));
    }

    #[test]
    fn cpu_file_of_old_kernels_has_no_full_line() {
        let p = parse_psi("some avg10=0.00 avg60=0.00 avg300=0.00 total=0\n").unwrap();
        assert_eq!(p.full_avg10, None);
        assert!(parse_psi("").is_none());
    }
}
