//! The plan as text for `joule qos plan` and for refusals: expected shares, the arithmetic
//! line by line, notes and the verdict (the backend renders the writes).

use super::Plan;

impl Plan {
    /// The plan as text: arithmetic, per-core sums, verdict.
    pub fn render(&self) -> String {
        let mut s = String::new();
        s.push_str("expected shares (% of each CPU; top-style total, 100 % = one CPU):\n");
        for c in &self.classes {
            let per: Vec<String> = c.expected_pct_per_cpu.iter().map(|(k, v)| format!("cpu{k} {v:.1}%")).collect();
            s.push_str(&format!("  {:<16} {:?}  {}  total {:.1}%\n", c.name, c.kind, per.join(", "), c.expected_pct));
        }
        let rt: Vec<_> = self.classes.iter().filter_map(|c| Some((c, c.rt_backend?))).collect();
        if !rt.is_empty() {
            s.push_str("RT mechanism on this kernel:\n");
            for (c, b) in rt {
                s.push_str(&format!("  {:<16} {}: {}\n", c.name, b.name(), c.rt_why.as_deref().unwrap_or("")));
            }
        }
        s.push_str("arithmetic:\n");
        for a in &self.arithmetic {
            s.push_str(&format!("  {a}\n"));
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        if self.admitted() {
            s.push_str("verdict: ADMITTED\n");
        } else {
            s.push_str(&format!("verdict: REFUSED\n{}\n", self.refusal_text()));
        }
        s
    }
}

/// A fraction as a percentage with one decimal, the way every admission message writes it.
pub(super) fn pct(x: f64) -> String {
    format!("{:.1}%", x * 100.0)
}
