//! Shared output of the benchmarks: medians, a plain-text table, JSON to a file, and a simple
//! SVG bar plot with each run's points over the median bar.

use anyhow::Context;
use std::path::Path;

pub fn median(v: &[f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let n = s.len();
    if n % 2 == 1 {
        s[n / 2]
    } else {
        (s[n / 2 - 1] + s[n / 2]) / 2.0
    }
}

/// Prints rows under a header, columns padded to their widest cell.
pub fn print_table(header: &[&str], rows: &[Vec<String>]) {
    let mut w: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, c) in r.iter().enumerate() {
            w[i] = w[i].max(c.chars().count());
        }
    }
    let line = |cells: Vec<String>| cells.iter().enumerate().map(|(i, c)| format!("{c:<width$}", width = w[i])).collect::<Vec<_>>().join("  ");
    println!("{}", line(header.iter().map(|s| s.to_string()).collect()));
    println!("{}", w.iter().map(|n| "-".repeat(*n)).collect::<Vec<_>>().join("  "));
    for r in rows {
        println!("{}", line(r.clone()));
    }
}

pub fn write_json(path: &Path, value: &serde_json::Value) -> anyhow::Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n").with_context(|| format!("while writing {}", path.display()))
}

/// One bar per group (the median) with every run drawn as a point on it.
pub fn bar_plot(path: &Path, title: &str, y_label: &str, groups: &[(String, Vec<f64>)]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let ymax = groups.iter().flat_map(|(_, v)| v.iter().copied()).fold(0.0f64, f64::max).max(1e-9) * 1.25;
    let width = (130 * groups.len() as u32).max(720); // room for each group's label
    let root = SVGBackend::new(path, (width, 420)).into_drawing_area();
    root.fill(&WHITE)?;
    let n = groups.len();
    let mut chart = ChartBuilder::on(&root)
        .caption(title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(60)
        .build_cartesian_2d(0f64..n as f64, 0f64..ymax)?;
    let names: Vec<String> = groups.iter().map(|(n, _)| n.clone()).collect();
    chart
        .configure_mesh()
        .disable_x_mesh()
        .y_desc(y_label)
        // Ticks every 0.5 (2n+1 asked for); a name under each bar's centre (i + 0.5) only.
        .x_labels(2 * n + 1)
        .x_label_formatter(&|x| {
            let centred = (x - x.floor() - 0.5).abs() < 1e-6;
            if centred {
                names.get(x.floor() as usize).cloned().unwrap_or_default()
            } else {
                String::new()
            }
        })
        .draw()?;
    for (i, (_, vals)) in groups.iter().enumerate() {
        let m = median(vals);
        let x0 = i as f64 + 0.2;
        chart.draw_series(std::iter::once(Rectangle::new([(x0, 0.0), (x0 + 0.6, m)], BLUE.mix(0.4).filled())))?;
        chart.draw_series(vals.iter().map(|v| Circle::new((i as f64 + 0.5, *v), 3, BLACK.filled())))?;
    }
    root.present().with_context(|| format!("while writing {}", path.display()))?;
    Ok(())
}
