//! `[elevate]`: run joule's user-space scheduler (the priority elevation trick, mechanism 5,
//! docs/elevate.md) on the threads of one `[[class]]`, round-robin with µs slices on one core.
//! Off unless `class` names a class.

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ElevateConfig {
    /// The `[[class]]` whose threads are scheduled (every thread of each of its processes gets
    /// a slice). Empty: off.
    pub class: String,
    /// The core the class's threads are bound to (they own it: ordinary tasks bound there get
    /// only what RT throttling leaves).
    pub cpu: usize,
    /// Slice per thread, µs.
    pub slice_us: u64,
    /// "shared" (the scheduler sleeps on `cpu`) or "dedicated" (it spins on another core).
    pub pattern: String,
}

impl Default for ElevateConfig {
    fn default() -> Self {
        ElevateConfig { class: String::new(), cpu: 0, slice_us: 100, pattern: "shared".into() }
    }
}

impl ElevateConfig {
    pub fn enabled(&self) -> bool {
        !self.class.is_empty()
    }

    /// Problems as (key, message, hint).
    pub(super) fn validate(&self, class_names: &[&str]) -> Vec<(String, String, String)> {
        let mut out = Vec::new();
        let mut bad = |k: &str, m: String, h: &str| out.push((format!("elevate.{k}"), m, h.to_string()));
        if self.enabled() && !class_names.contains(&self.class.as_str()) {
            bad("class", format!("class = {:?} is not a [[class]] in this file", self.class), "name an existing [[class]]");
        }
        if !(1..=1_000_000).contains(&self.slice_us) {
            bad("slice_us", format!("slice_us = {} is outside 1..=1000000", self.slice_us), "e.g. 100");
        }
        if !["shared", "dedicated"].contains(&self.pattern.as_str()) {
            bad("pattern", format!("pattern = {:?} is neither \"shared\" nor \"dedicated\"", self.pattern), "\"shared\" needs no extra core");
        }
        if self.cpu >= 4096 {
            bad("cpu", format!("cpu = {} is not a CPU number", self.cpu), "e.g. 0");
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use crate::config::Config;

    #[test]
    fn off_by_default_and_checked_against_the_classes() {
        let cfg = Config::default();
        assert!(!cfg.elevate.enabled());
        let e: String =
            Config::parse("[elevate]\nclass = \"nope\"\nslice_us = 0\npattern = \"spin\"\n").unwrap_err().iter().map(|p| p.message.clone()).collect();
        assert!(e.contains("\"nope\"") && e.contains("slice_us = 0") && e.contains("\"spin\""), "{e}");
        let ok = Config::parse("[[class]]\nname = \"rt\"\nweight = 100\n[elevate]\nclass = \"rt\"\ncpu = 1\nslice_us = 50\npattern = \"dedicated\"\n").unwrap();
        assert!(ok.elevate.enabled() && ok.elevate.cpu == 1);
    }
}
