//! `joule bench net-qos` (issue 11). In this branch only the `placement` section exists (the
//! energy half); the limiter and softirq sections, and the command's final shape, come from the
//! network half, which wires `placement::run` in beside them.

pub mod placement;

use crate::bench::report::write_json;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct NetQosArgs {
    /// Run only this section (`placement` is the one this build has).
    #[arg(long, value_name = "SECTION", default_value = "placement")]
    pub only: String,
    /// Also decide on this machine's own energy model (cpufreq, cpu_capacity, debugfs EM, or
    /// the config's power model where those are missing), to show the policy on a homogeneous
    /// machine.
    #[arg(long)]
    pub host_model: bool,
    /// Write the results as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot of perf per watt here.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
}

pub fn run(a: &NetQosArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.only == "placement", "section {:?} is not in this build (only \"placement\")", a.only);
    let mut opts = placement::PlacementOpts::default();
    if a.host_model {
        let cfg = joule_core::config::Config::default();
        let roots = joule_core::energy::KernelRoots::under(&cfg.telemetry.sysfs_root);
        let m = joule_core::energy::read_kernel(&joule_core::effects::RealEffects, &roots, cfg.telemetry.power_model.cpu_dynamic_watts * 1000.0)?;
        opts.models.push(("this-machine".into(), m));
    }
    let rows = placement::run(&opts)?;
    placement::print(&rows);
    if let Some(p) = &a.json {
        let vs: Vec<serde_json::Value> = placement::versus_seed(&rows, "odroid-xu4")
            .into_iter()
            .map(|(g, c, u, s)| serde_json::json!({ "group": g, "joule_over_eas": c, "joule_over_eas_uncapped": u, "seed": s, "source": "model" }))
            .collect();
        let models: Vec<&joule_core::energy::EnergyModel> = opts.models.iter().map(|m| &m.1).collect();
        write_json(p, &serde_json::json!({ "placement": rows, "placement_vs_seed": vs, "placement_assumptions": placement::assumptions(&opts), "placement_models": models }))?;
    }
    if let Some(p) = &a.plot {
        placement::plot(&rows, p)?;
    }
    Ok(())
}
