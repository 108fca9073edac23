//! Where a reading came from. joule never shows an estimate as a measurement, so every value
//! that reaches a user carries one of these labels, and a value nobody labelled says `unknown`.

use serde::{Deserialize, Serialize};
use std::fmt;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// Read from a hardware sensor through sysfs (thermal zone, hwmon, RAPL).
    Sensor,
    /// Measured in the kernel by one of joule's eBPF programs.
    Ebpf,
    /// Computed by a model (power from utilisation, temperature from an RC circuit).
    Model,
    /// Read from kernel accounting files (/proc/stat, cpu.stat, PSI) or the kernel's own view of
    /// the hardware (cpufreq `scaling_cur_freq`): measured, not a sensor.
    Kernel,
    /// Nothing has been read yet (a stage map no one wrote, a value never filled in). The
    /// default, so a value nobody labelled can never pass for a measurement.
    #[default]
    Unknown,
}

impl Origin {
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Sensor => "sensor",
            Origin::Ebpf => "ebpf",
            Origin::Model => "model",
            Origin::Kernel => "kernel",
            Origin::Unknown => "unknown",
        }
    }
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}
