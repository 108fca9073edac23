//! The kernel's CPU list syntax ("0", "1-3,6"), as in cpuset.cpus and /sys/.../online; shared by
//! the QoS classes and the energy model.

/// Parses a CPU list; `None` when it is malformed.
pub fn parse(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    for part in s.trim().split(',').filter(|p| !p.trim().is_empty()) {
        let part = part.trim();
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if a > b || b > 4095 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.parse().ok()?),
        }
    }
    out.sort_unstable();
    out.dedup();
    Some(out)
}

/// Formats CPUs back into list syntax with ranges.
pub fn format(cpus: &[usize]) -> String {
    let mut parts = Vec::new();
    let mut i = 0;
    while i < cpus.len() {
        let start = cpus[i];
        let mut end = start;
        while i + 1 < cpus.len() && cpus[i + 1] == end + 1 {
            i += 1;
            end = cpus[i];
        }
        parts.push(if start == end { start.to_string() } else { format!("{start}-{end}") });
        i += 1;
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    #[test]
    fn round_trips() {
        assert_eq!(super::parse("1-3,6,0").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(super::format(&[0, 1, 2, 3, 6]), "0-3,6");
        assert_eq!(super::parse("").unwrap(), Vec::<usize>::new());
        assert!(super::parse("3-1").is_none());
        assert!(super::parse("x").is_none());
    }
}
