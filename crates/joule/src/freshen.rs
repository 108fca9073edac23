//! Readings as fresh as the scrape (issue 36): a loop at rest publishes once per rest period,
//! so `/metrics` would show values up to a rest old. A scrape that finds the published reading
//! older than [`Freshen::max_age`] ends the loop's rest and waits, at most [`Freshen::wait`],
//! for the next reading — node_exporter's model (read when scraped), without a second reader:
//! the loop stays the one thing that reads sources and decides.
//!
//! A client scraping in a loop cannot make the agent run faster than its full period: one poke
//! per `max_age` at most, and the loop itself never starts a period sooner than one full period
//! after the last (pace.rs).

use crate::exporter::Shared;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Clone)]
pub struct Freshen {
    /// Ends the loop's current sleep.
    poke: Arc<dyn Fn() + Send + Sync>,
    /// A reading older than this is refreshed for the scrape (a loop at its full period is
    /// never this late).
    pub max_age: Duration,
    /// How long a scrape waits for the refreshed reading before it answers with the old one.
    pub wait: Duration,
    last_poke: Arc<Mutex<Option<Instant>>>,
}

impl Freshen {
    /// For a loop whose full period is `period`: readings older than two periods are refreshed,
    /// a scrape waits up to two periods and a quarter of a second for it.
    pub fn for_period(period: Duration, poke: impl Fn() + Send + Sync + 'static) -> Freshen {
        Freshen { poke: Arc::new(poke), max_age: 2 * period, wait: 2 * period + Duration::from_millis(250), last_poke: Arc::default() }
    }

    /// Whether a reading published at `published` needs a poke at `now`, and if so takes the
    /// poke (the next one is allowed `max_age` later).
    fn take_poke(&self, published: Option<Instant>, now: Instant) -> bool {
        let Some(at) = published else { return false }; // nothing published yet: the loop is starting
        if now.saturating_duration_since(at) <= self.max_age {
            return false;
        }
        let mut last = self.last_poke.lock().unwrap_or_else(|e| e.into_inner());
        if last.is_some_and(|l| now.saturating_duration_since(l) < self.max_age) {
            return false;
        }
        *last = Some(now);
        true
    }

    /// Before answering a scrape: refreshes a stale reading (see the module's header). Returns
    /// whether a newer reading was published while it waited.
    pub async fn fresh(&self, shared: &Shared) -> bool {
        let (published, generation) = {
            let p = shared.read().unwrap_or_else(|e| e.into_inner());
            (p.published_at, p.generation)
        };
        if !self.take_poke(published, Instant::now()) {
            return false;
        }
        (self.poke)();
        let until = Instant::now() + self.wait;
        while Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(5)).await;
            if shared.read().unwrap_or_else(|e| e.into_inner()).generation != generation {
                return true;
            }
        }
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    fn freshen(pokes: Arc<AtomicU32>) -> Freshen {
        Freshen::for_period(Duration::from_millis(100), move || {
            pokes.fetch_add(1, Ordering::Relaxed);
        })
    }

    #[test]
    fn only_a_stale_reading_is_refreshed_and_at_most_once_per_max_age() {
        let f = freshen(Arc::default());
        let t0 = Instant::now();
        let ms = |n| t0 + Duration::from_millis(n);
        assert!(!f.take_poke(None, ms(5000)), "nothing published yet");
        assert!(!f.take_poke(Some(ms(1000)), ms(1150)), "150 ms old: a loop at its period");
        assert!(f.take_poke(Some(ms(1000)), ms(1300)), "300 ms old: stale");
        assert!(!f.take_poke(Some(ms(1000)), ms(1400)), "a second poke 100 ms after the first");
        assert!(f.take_poke(Some(ms(1000)), ms(1500)), "one max_age later");
    }

    fn runtime() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap()
    }

    #[test]
    fn a_scrape_of_a_stale_reading_waits_for_the_next_one() {
        let shared = Shared::default();
        shared.write().unwrap().published_at = Some(Instant::now() - Duration::from_secs(2));
        let s = shared.clone();
        // The "loop": publishes a new reading when poked.
        let f = Freshen::for_period(Duration::from_millis(100), move || {
            let s = s.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                let mut p = s.write().unwrap();
                p.generation += 1;
                p.published_at = Some(Instant::now());
            });
        });
        assert!(runtime().block_on(f.fresh(&shared)), "the scrape saw the refreshed reading");
        assert_eq!(shared.read().unwrap().generation, 1);
        // Fresh now: no poke, no wait.
        let t = Instant::now();
        assert!(!runtime().block_on(f.fresh(&shared)));
        assert!(t.elapsed() < Duration::from_millis(50), "{:?}", t.elapsed());
    }

    #[test]
    fn a_loop_that_does_not_answer_costs_the_scrape_only_the_wait() {
        let pokes = Arc::new(AtomicU32::new(0));
        let f = freshen(pokes.clone());
        let shared = Shared::default();
        shared.write().unwrap().published_at = Some(Instant::now() - Duration::from_secs(2));
        let t = Instant::now();
        assert!(!runtime().block_on(f.fresh(&shared)));
        let waited = t.elapsed();
        assert!(waited >= f.wait && waited < f.wait + Duration::from_millis(300), "{waited:?}");
        assert_eq!(pokes.load(Ordering::Relaxed), 1);
    }
}
