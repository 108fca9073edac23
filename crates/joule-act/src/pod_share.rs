//! How a pod class's thermal cap is shared among its pods: by what each uses, not by how many
//! there are. An even split lets a tenant squeeze another's busy pod by adding idle pods to the
//! class; here a pod that uses less than an equal share keeps what it uses (with room to grow)
//! and the pods held back by their quota share the rest, so an idle pod takes only its floor.
//! Pure: demands in, quotas out. The class's total is always handed out, never more.

/// A pod that used at least this share of the quota it had was held back by it: it wants more
/// than it got, how much more is unknown.
pub const SATURATED: f64 = 0.9;

/// Room to grow: a pod not held back wants what it used and a quarter more.
const GROWTH: u64 = 4;

/// What a pod wants of its class's quota (µs per period), from what it used over the last
/// interval (µs per period) under the quota it had then (None: none, as before its first cap).
/// `u64::MAX`: held back, it would use more.
pub fn demand_us(used_us: u64, quota_us: Option<u64>) -> u64 {
    match quota_us {
        Some(q) if used_us as f64 >= SATURATED * q as f64 => u64::MAX,
        _ => used_us.saturating_add(used_us / GROWTH),
    }
}

/// Splits `total_us` among pods wanting `demands_us`, each counted as wanting at least
/// `floor_us`: max-min fair (water-filling). Pods wanting less than an equal share of what is
/// left get what they want; the others share the rest equally. When every pod gets what it
/// wants, what is left goes to them in proportion to their wants. The shares always sum to
/// `total_us`, and a pod added wanting only the floor takes at most the floor from what any
/// other had and wants (a surplus nobody wanted is shared out again).
pub fn split_by_demand(total_us: u64, demands_us: &[u64], floor_us: u64) -> Vec<u64> {
    let n = demands_us.len();
    let want: Vec<u64> = demands_us.iter().map(|d| (*d).max(floor_us)).collect();
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by_key(|&i| want[i]);
    let mut out = vec![0u64; n];
    let mut left = total_us;
    for (k, &i) in order.iter().enumerate() {
        let rest = (n - k) as u64;
        if want[i] <= left / rest {
            out[i] = want[i];
            left -= want[i];
            continue;
        }
        // This pod and every one wanting more share what is left equally.
        let (each, extra) = (left / rest, left % rest);
        for (j, &p) in order[k..].iter().enumerate() {
            out[p] = each + u64::from((j as u64) < extra);
        }
        return out;
    }
    let wanted: u128 = want.iter().map(|w| u128::from(*w)).sum();
    if left > 0 && wanted > 0 {
        let mut given = 0u64;
        for (i, w) in want.iter().enumerate() {
            let more = (u128::from(left) * u128::from(*w) / wanted) as u64;
            out[i] += more;
            given += more;
        }
        // Rounding's remainder to the pod that wants most.
        if let Some(&top) = order.last() {
            out[top] += left - given;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const FLOOR: u64 = 100;

    #[test]
    fn idle_pods_added_take_only_their_floor_from_a_busy_one() {
        let busy = split_by_demand(30_000, &[u64::MAX], FLOOR);
        assert_eq!(busy, [30_000]);
        let mut demands = vec![u64::MAX];
        demands.extend([0; 9]);
        let with_idle = split_by_demand(30_000, &demands, FLOOR);
        assert_eq!(with_idle[0], 30_000 - 9 * FLOOR, "{with_idle:?}");
        assert!(with_idle[1..].iter().all(|s| *s == FLOOR), "{with_idle:?}");
        assert_eq!(with_idle.iter().sum::<u64>(), 30_000, "the class total holds");
        // An even split gave the busy pod a tenth: 3,000 µs.
        assert!(with_idle[0] > 9 * 30_000 / 10);
    }

    #[test]
    fn busy_pods_share_equally_and_a_modest_one_keeps_what_it_uses() {
        assert_eq!(split_by_demand(30_000, &[u64::MAX, u64::MAX, u64::MAX], FLOOR), [10_000, 10_000, 10_000]);
        // One uses 4,000 (wants 5,000): it gets that, the two held back share the rest.
        let s = split_by_demand(30_000, &[u64::MAX, demand_us(4_000, Some(10_000)), u64::MAX], FLOOR);
        assert_eq!(s, [12_500, 5_000, 12_500]);
        // Nobody held back: each gets its want and the rest in proportion.
        let s = split_by_demand(30_000, &[demand_us(8_000, Some(15_000)), demand_us(4_000, Some(15_000))], FLOOR);
        assert_eq!((s[0], s[1], s.iter().sum::<u64>()), (20_000, 10_000, 30_000), "{s:?}");
        // Less than the floors: an equal split.
        assert_eq!(split_by_demand(300, &[0, 0, u64::MAX, 0], FLOOR), [75, 75, 75, 75]);
        assert_eq!(split_by_demand(1_000, &[0, 0, 0], FLOOR).iter().sum::<u64>(), 1_000);
        assert!(split_by_demand(1_000, &[], FLOOR).is_empty());
    }

    #[test]
    fn a_pod_near_its_quota_wants_without_bound_else_what_it_used_and_a_quarter() {
        assert_eq!(demand_us(9_000, Some(10_000)), u64::MAX);
        assert_eq!(demand_us(8_000, Some(10_000)), 10_000);
        assert_eq!(demand_us(8_000, None), 10_000, "uncapped: never held back by a quota");
        assert_eq!(demand_us(0, Some(1_000)), 0);
    }

    /// Whatever the demands, the shares sum to the total, and adding an idle pod lowers no
    /// pod's share of what it wants by more than the floor.
    #[test]
    fn the_total_holds_and_an_idle_pod_costs_at_most_the_floor_over_many_demands() {
        let mut seed = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for _ in 0..2_000 {
            let n = (next() % 8 + 1) as usize;
            let total = next() % 400_000 + 2_000;
            let demands: Vec<u64> = (0..n).map(|_| if next() % 3 == 0 { u64::MAX } else { next() % 100_000 }).collect();
            let s = split_by_demand(total, &demands, FLOOR);
            assert_eq!(s.iter().sum::<u64>(), total, "{demands:?} {total}");
            let mut more = demands.clone();
            more.push(0);
            let t = split_by_demand(total, &more, FLOOR);
            assert_eq!(t.iter().sum::<u64>(), total);
            if total >= (n as u64 + 1) * FLOOR {
                for i in 0..n {
                    // Of what it had, what it wants is kept, less the floor (and rounding).
                    assert!(t[i] + FLOOR + 2 >= s[i].min(demands[i].max(FLOOR)), "{demands:?} {total}: {s:?} → {t:?}");
                }
            }
        }
    }
}
