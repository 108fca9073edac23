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
    /// Placement: static (leakage) power of each XU4 cluster whenever it is busy, mW, as
    /// "A7,A15" (sensitivity; the kernel's EM and the shipped model have none). The policy sees
    /// it too, so decisions may change.
    #[arg(long, value_name = "MW,MW", value_delimiter = ',')]
    pub static_mw: Option<Vec<f64>>,
    /// Placement: power of the rest of the board, mW, added for both policies (sensitivity:
    /// changes no decision, only the ratios).
    #[arg(long, value_name = "MW", default_value_t = 0.0)]
    pub board_mw: f64,
    /// Write the results as JSON here.
    #[arg(long, value_name = "PATH")]
    pub json: Option<PathBuf>,
    /// Write an SVG plot of perf per watt here.
    #[arg(long, value_name = "PATH")]
    pub plot: Option<PathBuf>,
}

pub fn run(a: &NetQosArgs) -> anyhow::Result<()> {
    anyhow::ensure!(a.only == "placement", "section {:?} is not in this build (only \"placement\")", a.only);
    let mut opts = placement::PlacementOpts { board_mw: a.board_mw, ..placement::PlacementOpts::default() };
    crate::bench::check_bounds([
        (a.board_mw.is_finite() && a.board_mw >= 0.0, "--board-mw must be ≥ 0"),
        (a.static_mw.as_ref().is_none_or(|v| v.len() == 2 && v.iter().all(|x| x.is_finite() && *x >= 0.0)), "--static-mw takes two values ≥ 0, A7,A15"),
    ])?;
    if let Some(s) = &a.static_mw {
        for (d, mw) in opts.models[0].1.domains.iter_mut().zip(s) {
            d.static_mw = *mw;
        }
        opts.models[0].1.notes.push(format!("static power per busy cluster set by --static-mw: A7 {} mW, A15 {} mW (assumption)", s[0], s[1]));
    }
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
            .map(|(r, s)| serde_json::json!({ "group": r.group, "joule_over_eas": r.capped, "joule_over_eas_uncapped": r.uncapped, "seed": s, "source": "model" }))
            .collect();
        let models: Vec<&joule_core::energy::EnergyModel> = opts.models.iter().map(|m| &m.1).collect();
        write_json(
            p,
            &serde_json::json!({ "placement": rows, "placement_vs_seed": vs, "placement_assumptions": placement::assumptions(&opts), "placement_models": models }),
        )?;
    }
    if let Some(p) = &a.plot {
        placement::plot(&rows, p)?;
    }
    Ok(())
}
