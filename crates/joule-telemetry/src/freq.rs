//! CPU frequency from `<sysfs>/devices/system/cpu/cpu*/cpufreq/scaling_{cur,min,max}_freq`
//! (kHz), labelled `kernel`: `scaling_cur_freq` is the kernel's view (the governor's request or
//! the driver's last reading), not a hardware sensor read on demand. Virtual machines usually
//! have no cpufreq; that is a note.

use crate::fsread::{numbered_files, read_num};
use crate::{Source, SourceError};
use joule_core::snapshot::CpuFreq;
use joule_core::{Origin, Snapshot};
use std::path::PathBuf;

pub struct FreqSource {
    cpu_dir: PathBuf,
}

impl FreqSource {
    pub fn new(sysfs_root: impl Into<PathBuf>) -> Self {
        Self { cpu_dir: sysfs_root.into().join("devices/system/cpu") }
    }
}

impl Source for FreqSource {
    fn name(&self) -> &'static str {
        "frequency"
    }

    fn sample(&mut self, snap: &mut Snapshot) -> Result<(), SourceError> {
        snap.frequency = numbered_files(&self.cpu_dir, "cpu", "")
            .into_iter()
            .filter_map(|(cpu, dir)| {
                let f = dir.join("cpufreq");
                Some(CpuFreq {
                    cpu,
                    cur_khz: read_num::<u64>(&f.join("scaling_cur_freq")).ok()?,
                    min_khz: read_num::<u64>(&f.join("scaling_min_freq")).unwrap_or(0),
                    max_khz: read_num::<u64>(&f.join("scaling_max_freq")).unwrap_or(0),
                    cpuinfo_min_khz: read_num::<u64>(&f.join("cpuinfo_min_freq")).unwrap_or(0),
                    cpuinfo_max_khz: read_num::<u64>(&f.join("cpuinfo_max_freq")).unwrap_or(0),
                    source: Origin::Kernel,
                })
            })
            .collect();
        if snap.frequency.is_empty() {
            snap.notes.push("no cpufreq (no devices/system/cpu/cpu*/cpufreq): CPU frequency unknown".into());
        }
        Ok(())
    }
}
