//! Scrapes of a resting loop's reading: a loop at rest publishes once per rest period, so a
//! scrape may find a reading up to a rest old. It is served at once from that reading, whose age
//! `/metrics` says (`joule_agent_reading_age_seconds`), and a reading older than half a rest
//! period asks the loop for a new one — at most once per rest period, however many clients
//! scrape how often, so later scrapes are fresher (none is served a reading older than a rest)
//! and nobody outside keeps the loop awake: the
//! metrics thread answers every scrape, the control loop runs at most twice per rest period
//! (its rest and one refresh), never per scrape. The loop stays the one thing that reads
//! sources and decides (node_exporter's read-when-scraped would be a second reader).

use crate::exporter::Shared;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct Freshen {
    /// Ends the loop's current sleep.
    poke: Arc<dyn Fn() + Send + Sync>,
    /// A reading older than this asks for a refresh (a loop at its full period is never this
    /// late).
    pub max_age: Duration,
    /// The least time between two refreshes.
    pub every: Duration,
    last_poke: Arc<Mutex<Option<Instant>>>,
}

impl Freshen {
    /// For a loop whose full period is `period` and whose rest is `rest`: readings older than
    /// half a rest (and two periods) ask for a refresh, once per rest at most. A loop that rests
    /// 2 s then runs at most 2 iterations per 3 s whatever the scrapes: its rest, then a
    /// refresh a second after it, then 2 s of rest.
    pub fn for_loop(period: Duration, rest: Duration, poke: impl Fn() + Send + Sync + 'static) -> Freshen {
        Freshen { poke: Arc::new(poke), max_age: (2 * period).max(rest / 2), every: rest, last_poke: Arc::default() }
    }

    /// Whether a reading published at `published` needs a refresh at `now`, and if so takes it
    /// (the next one is allowed `every` later).
    fn take_poke(&self, published: Option<Instant>, now: Instant) -> bool {
        let Some(at) = published else { return false }; // nothing published yet: the loop is starting
        if now.saturating_duration_since(at) <= self.max_age {
            return false;
        }
        let mut last = self.last_poke.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|l| now.saturating_duration_since(l) < self.every) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Before answering a scrape: asks for a refresh of a stale reading (see the module's
    /// header). It never waits for it: the scrape is answered from the reading there is.
    /// Returns whether it asked.
    pub async fn fresh(&self, shared: &Shared) -> bool {
        let published = shared.read().unwrap_or_else(|e| e.into_inner()).published_at;
        let asked = self.take_poke(published, Instant::now());
        if asked {
            (self.poke)();
        }
        asked
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    const PERIOD: Duration = Duration::from_millis(100);
    const REST: Duration = Duration::from_secs(2);

    fn freshen(pokes: Arc<AtomicU32>) -> Freshen {
        Freshen::for_loop(PERIOD, REST, move || {
            pokes.fetch_add(1, Ordering::Relaxed);
        })
    }

    #[test]
    fn only_a_reading_older_than_half_a_rest_asks_and_at_most_once_per_rest() {
        let f = freshen(Arc::default());
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        assert!(!f.take_poke(None, ms(5000)), "nothing published yet");
        assert!(!f.take_poke(Some(ms(1000)), ms(1300)), "300 ms old: a rest has 2 s");
        assert!(f.take_poke(Some(ms(1000)), ms(2100)), "1.1 s old: stale");
        assert!(!f.take_poke(Some(ms(1000)), ms(2300)), "a second refresh 200 ms after the first");
        assert!(!f.take_poke(Some(ms(2500)), ms(3900)), "1.4 s old, but the last refresh was 1.8 s ago");
        assert!(f.take_poke(Some(ms(2500)), ms(4100)), "one rest after the last refresh");
        let never_rests = Freshen::for_loop(PERIOD, PERIOD, || {});
        assert_eq!(never_rests.max_age, 2 * PERIOD, "a loop that never rests is stale after two periods");
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    /// The loop as the agent runs it: at rest it publishes once per rest, and publishes at
    /// once when poked (the next period starts no sooner than one full period after the last).
    /// Scraped 5 times a second for 12 s, it runs at most 2 iterations per 3 s, and each scrape
    /// is answered at once.
    #[test]
    fn five_scrapes_a_second_cost_a_resting_loop_at_most_one_refresh_per_rest() {
        let f = freshen(Arc::default());
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let (mut published, mut iterations, mut seen_pokes) = (ms(0), 1, 0);
        let shared = Shared::default();
        for step in 1..=60u64 {
            let now = ms(step * 200);
            if now.duration_since(published) >= REST {
                (published, iterations) = (now, iterations + 1);
            }
            if f.take_poke(Some(published), now) {
                seen_pokes += 1;
                (published, iterations) = (now.max(published + PERIOD), iterations + 1);
            }
        }
        assert!(iterations <= 12 * 2 / 3 + 1, "{iterations} iterations in 12 s of 5 scrapes/s");
        assert!(seen_pokes >= 3, "the scrapes never asked for a fresher reading ({seen_pokes})");
        let pokes = Arc::new(AtomicU32::new(0));
        let f = freshen(pokes.clone());
        shared.write().unwrap().published_at = Some(Instant::now() - Duration::from_secs(2));
        let t = Instant::now();
        assert!(runtime().block_on(f.fresh(&shared)), "a 2 s old reading asks for a refresh");
        assert!(t.elapsed() < Duration::from_millis(50), "and the scrape does not wait for it: {:?}", t.elapsed());
        assert_eq!(pokes.load(Ordering::Relaxed), 1);
        assert!(!runtime().block_on(f.fresh(&shared)), "the next scrape within the rest does not ask again");
    }
}
