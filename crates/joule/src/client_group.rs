//! Which of the metrics server's clients count as one. A client picks its source address from
//! whatever it holds, so counting by address lets one that holds many rotate past every limit:
//! any local user can use every address of 127/8 (and ::1), an IPv6 host usually holds a whole
//! /64, and a /24 is the smallest IPv4 block that is routed to one party. The password budget
//! (auth_budget.rs) and the connection slots (conn_slots.rs) both count by this group.

use std::net::IpAddr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Group {
    /// 127/8 and ::1, one group: an address there tells nothing about which local user asks.
    Loopback,
    /// An IPv4 /24, by its first three bytes.
    V4([u8; 3]),
    /// An IPv6 /64, by its first 64 bits.
    V6(u64),
}

impl Group {
    pub fn of(ip: IpAddr) -> Group {
        // A dual-stack listener sees IPv4 clients as ::ffff:a.b.c.d.
        match ip.to_canonical() {
            ip if ip.is_loopback() => Group::Loopback,
            IpAddr::V4(v4) => {
                let [a, b, c, _] = v4.octets();
                Group::V4([a, b, c])
            }
            IpAddr::V6(v6) => Group::V6((v6.to_bits() >> 64) as u64),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(ip: &str) -> Group {
        Group::of(ip.parse().unwrap())
    }

    #[test]
    fn loopback_is_one_group_and_others_go_by_24_and_64() {
        for lo in ["127.0.0.1", "127.10.3.4", "127.255.255.254", "::1", "::ffff:127.0.0.2"] {
            assert_eq!(of(lo), Group::Loopback, "{lo}");
        }
        assert_eq!(of("10.77.2.7"), of("10.77.2.200"));
        assert_eq!(of("::ffff:10.77.2.7"), of("10.77.2.9"), "an IPv4 client of a dual-stack listener");
        assert_ne!(of("10.77.2.7"), of("10.77.3.7"));
        assert_eq!(of("2001:db8:1:2::1"), of("2001:db8:1:2:ffff:1:2:3"));
        assert_ne!(of("2001:db8:1:2::1"), of("2001:db8:1:3::1"));
        assert_ne!(of("10.0.0.1"), of("::a00:1"), "IPv4 and IPv6 never share a group");
    }
}
