//! The thermal-stage rule shared by the user-space fallback and (in C) the kernel program.

/// The thermal-stage rule, for when the in-kernel program cannot run (no BPF): the stage rises
/// to n when `temp_mc` reaches `thresholds_mc[n-1]` and falls from n only once `temp_mc` drops
/// below `thresholds_mc[n-1] - hysteresis_mc` (possibly several stages at once). The eBPF
/// program in joule-bpf implements the same rule in the kernel; the root tier tests that one.
pub fn thermal_stage(prev: u32, temp_mc: i64, thresholds_mc: &[i64], hysteresis_mc: i64) -> u32 {
    let up = thresholds_mc.iter().take_while(|&&t| temp_mc >= t).count() as u32;
    if up >= prev {
        return up;
    }
    // Falling: stay at the highest stage whose exit point we have not yet crossed.
    let mut stage = prev;
    while stage > up && temp_mc < thresholds_mc[stage as usize - 1] - hysteresis_mc {
        stage -= 1;
    }
    stage
}

#[cfg(test)]
mod tests {
    use super::thermal_stage;

    const T: [i64; 3] = [70_000, 80_000, 90_000];

    #[test]
    fn rises_immediately_falls_with_hysteresis() {
        let mut s = 0;
        let mut seq = vec![];
        for t in [60_000, 71_000, 69_000, 66_999, 95_000, 88_000, 86_999, 50_000] {
            s = thermal_stage(s, t, &T, 3_000);
            seq.push(s);
        }
        assert_eq!(seq, vec![0, 1, 1, 0, 3, 3, 2, 0]);
    }

    #[test]
    fn exactly_at_exit_point_stays() {
        assert_eq!(thermal_stage(1, 67_000, &T, 3_000), 1);
        assert_eq!(thermal_stage(1, 66_999, &T, 3_000), 0);
    }
}
