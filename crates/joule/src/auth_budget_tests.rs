//! The password budget's bookkeeping: a group's burst and rate, its one turn and the line for
//! it, a turn given back however its request ends, the bounded queue and the bounded table.

use super::*;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn budget() -> Arc<AuthBudget> {
    Arc::default()
}

#[test]
fn a_group_gets_a_burst_then_two_a_second_one_at_a_time() {
    let b = budget();
    let (me, t0) = (ip("10.0.0.1"), Instant::now());
    let ms = |n| t0 + Duration::from_millis(n);
    for _ in 0..3 {
        let p = b.try_take_at(me, t0).expect("within the burst");
        assert_eq!(p.ready_at, t0, "a token at once");
        assert!(b.try_take_at(me, t0).is_none(), "a second request while the first holds the turn");
        p.spend_at(t0);
    }
    let p = b.try_take_at(me, t0).expect("the turn is free");
    assert_eq!(p.ready_at, ms(500), "the burst is spent: the next token in half a second");
    p.spend_at(ms(500));
    drop(p);
    let p = b.try_take_at(me, ms(600)).unwrap();
    assert!(p.ready_at.max(ms(1000)) - p.ready_at.min(ms(1000)) < Duration::from_millis(1), "0.2 tokens at 600 ms: the next whole one at 1 s");
    drop(p);
    assert_eq!(b.try_take_at(me, ms(60_000)).unwrap().ready_at, ms(60_000), "the budget refills");
}

#[test]
fn rotating_the_address_within_a_group_buys_nothing() {
    let b = budget();
    let t0 = Instant::now();
    let lo = b.try_take_at(ip("127.0.0.1"), t0).unwrap();
    for other_lo in ["127.10.3.4", "::1", "::ffff:127.0.0.9"] {
        assert!(b.try_take_at(ip(other_lo), t0).is_none(), "{other_lo} shares loopback's turn");
    }
    let net = b.try_take_at(ip("10.0.0.1"), t0).unwrap();
    assert!(b.try_take_at(ip("10.0.0.2"), t0).is_none(), "the same /24");
    assert!(b.try_take_at(ip("10.0.1.2"), t0).is_some(), "another /24 has its own");
    let v6 = b.try_take_at(ip("2001:db8::1"), t0).unwrap();
    assert!(b.try_take_at(ip("2001:db8::ffff:2"), t0).is_none(), "the same /64");
    drop((lo, net, v6));
}

/// The cause of the third audit's lockout: a connection dropped while its check waited left its
/// address marked as waiting forever. A permit gives the turn back whenever it is dropped, and
/// a check that never ran spends no token.
#[test]
fn regression_a_dropped_request_gives_its_turn_back_and_spends_nothing() {
    let b = budget();
    let (me, t0) = (ip("127.0.0.1"), Instant::now());
    for _ in 0..1000 {
        let mut p = b.try_take_at(me, t0).expect("the turn was given back");
        assert!(p.queue());
        assert_eq!(p.ready_at, t0, "nothing was spent");
        drop(p); // the connection went before its check ran
    }
    let p = b.try_take_at(me, t0).unwrap();
    let job = std::thread::spawn(move || {
        p.spend();
        drop(p); // the blocking job ends
    });
    job.join().unwrap();
    assert!(b.try_take_at(me, t0).is_some(), "given back by the job that ran the check");
    assert_eq!(b.lock().queued, 0);
}

#[test]
fn the_queue_of_checks_is_bounded() {
    let b = budget();
    let t0 = Instant::now();
    let mut queued: Vec<Permit> = (0..MAX_QUEUED as u32)
        .map(|i| {
            let mut p = b.try_take_at(IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + (i << 8))), t0).unwrap();
            assert!(p.queue());
            p
        })
        .collect();
    let mut late = b.try_take_at(ip("192.168.0.1"), t0).unwrap();
    assert!(!late.queue(), "{MAX_QUEUED} checks already queued");
    queued.pop();
    assert!(late.queue() && late.queue(), "a place given back is taken, once");
    drop((queued, late));
    assert_eq!(b.lock().queued, 0);
}

/// The old table refused every address it did not hold once full (4,096 stuck addresses locked
/// every new login out). A full table forgets the group it saw longest ago instead, never one
/// whose turn is held.
#[test]
fn regression_a_full_table_forgets_its_oldest_group_instead_of_refusing_a_new_one() {
    let b = budget();
    let t0 = Instant::now();
    let group = |i: u32| IpAddr::from(std::net::Ipv4Addr::from(0x0a00_0000 + (i << 8)));
    let held = b.try_take_at(group(0), t0).unwrap();
    for i in 1..MAX_GROUPS as u32 {
        let p = b.try_take_at(group(i), t0).unwrap();
        (0..3).for_each(|_| p.spend_at(t0));
    }
    assert_eq!(b.lock().groups.len(), MAX_GROUPS);
    let new = b.try_take_at(ip("192.168.0.1"), t0).expect("a new group while the table is full");
    assert_eq!(new.ready_at, t0);
    assert_eq!(b.lock().groups.len(), MAX_GROUPS, "still bounded");
    assert!(b.try_take_at(group(0), t0).is_none(), "the oldest group holds its turn: kept");
    assert_eq!(b.try_take_at(group(1), t0).unwrap().ready_at, t0, "the oldest without a turn was forgotten (and its spent burst)");
    // Taking group 1 back in forgot group 2, the oldest then; group 3 is still remembered.
    assert!(b.try_take_at(group(3), t0).unwrap().ready_at > t0, "the others kept their budget");
    drop((held, new));
}

/// Inside a group every connection gets its go in turn: the turn goes to the group's requests
/// in the order they came, one whose connection closed leaves the line, and one that waits too
/// long is refused.
#[test]
fn a_groups_turn_goes_first_come_first_served_and_a_closed_connection_leaves_the_line() {
    let rt = tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap();
    rt.block_on(async {
        let b = budget();
        let order = Arc::new(Mutex::new(Vec::new()));
        let first = b.take(ip("127.0.0.1"), MAX_TURN_WAIT).await.unwrap();
        let line = |name: &'static str, from: &str| {
            let (b, order, from) = (b.clone(), order.clone(), ip(from));
            tokio::spawn(async move {
                if let Some(p) = b.take(from, MAX_TURN_WAIT).await {
                    order.lock().unwrap().push(name);
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    drop(p);
                }
            })
        };
        let flood = line("flood", "127.10.0.1");
        tokio::task::yield_now().await;
        let closed = line("closed", "127.10.0.2");
        tokio::task::yield_now().await;
        let login = line("login", "::1");
        tokio::task::yield_now().await;
        closed.abort(); // its connection went while it waited
        let other = b.take(ip("10.0.0.1"), Duration::ZERO).await;
        assert!(other.is_some(), "another group has its own turn");
        assert!(b.take(ip("127.0.0.2"), Duration::from_millis(50)).await.is_none(), "50 ms in the line and the turn still held");
        drop(first);
        let _ = tokio::join!(flood, login);
        assert_eq!(*order.lock().unwrap(), ["flood", "login"]);
        assert!(b.try_take_at(ip("127.0.0.1"), Instant::now()).is_some(), "the line is empty, the turn free");
    });
}
