//! The pod tracker against a scripted runtime: one question per new pod within the gap, a
//! runtime that fails leaves the pods unnamed (counted, with since when) and is asked again
//! after a wait, a pod with no task left is forgotten.

use super::*;

const UID: &str = "0b1e5c2a-4f3d-4e8a-9c1b-2d3e4f5a6b7c";
const OTHER: &str = "1c2f6d3b-5a4e-4f9b-8d2c-3e4f5a6b7c8d";
const ID: &str = "4a5f0e3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f";
const ID2: &str = "5b6f0e3b2c1d0e9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f";

/// What the scripted runtime knows, whether it answers, and the questions it was asked.
#[derive(Default)]
struct Runtime {
    pods: PodIndex,
    down: bool,
    asked: Vec<Vec<PodQuery>>,
}

struct Scripted(Arc<std::sync::Mutex<Runtime>>);

impl PodSource for Scripted {
    fn lookup(&mut self, pods: &[PodQuery]) -> Result<PodIndex, String> {
        let mut g = self.0.lock().unwrap();
        g.asked.push(pods.to_vec());
        if g.down {
            return Err("connection refused".into());
        }
        Ok(pods.iter().filter_map(|q| Some((q.uid.clone(), g.pods.get(&q.uid)?.clone()))).collect())
    }
    fn describe(&self) -> String {
        "test".into()
    }
}

fn tracker() -> (PodTracker, Arc<std::sync::Mutex<Runtime>>) {
    let rt = Arc::new(std::sync::Mutex::new(Runtime::default()));
    (PodTracker::new(Some(Box::new(Scripted(rt.clone())))), rt)
}

fn meta(ns: &str, containers: &[&str]) -> PodMeta {
    PodMeta { namespace: ns.into(), containers: containers.iter().map(|c| (c.to_string(), "app".to_string())).collect(), ..Default::default() }
}

fn path(uid: &str, id: &str) -> String {
    format!("/kubepods/besteffort/pod{uid}/{id}")
}

#[test]
fn an_unknown_container_asks_about_its_pod_alone_once_within_the_gap() {
    let (mut t, rt) = tracker();
    let p = path(UID, ID);
    assert!(t.knows(["/system.slice/x.service"]), "not in a pod: nothing to ask");
    assert!(t.saw([p.as_str()]));
    assert_eq!(t.stats().unnamed, 1, "seen and not named yet: unnamed at once");
    assert_eq!(t.shared_unnamed()[UID].qos, Qos::BestEffort);
    assert!(!t.refresh_if_wanted(), "the runtime does not list it yet: no change");
    assert_eq!(rt.lock().unwrap().asked, vec![vec![PodQuery { uid: UID.into(), ids: [ID.to_string()].into() }]], "one question, about that pod");
    rt.lock().unwrap().pods.insert(UID.into(), meta("batch", &[ID]));
    assert!(t.saw([p.as_str()]));
    assert!(!t.refresh_if_wanted(), "within the gap: no second question");
    std::thread::sleep(backoff(1));
    assert!(t.refresh_if_wanted(), "after its wait the pod is named");
    assert!(t.knows([p.as_str()]) && !t.saw([p.as_str()]));
    assert!(!t.refresh_if_wanted(), "nothing waits: no question");
    let s = t.stats();
    assert_eq!((s.refreshes_total, s.pods, s.unnamed, s.stale_since_unix_ms), (2, 1, 0, None), "{s:?}");
    // A second pod seen: only it is asked about, not the one named.
    std::thread::sleep(MIN_REFRESH_GAP);
    t.saw([path(OTHER, ID2).as_str()]);
    t.refresh_if_wanted();
    assert_eq!(rt.lock().unwrap().asked.last().unwrap().iter().map(|q| q.uid.as_str()).collect::<Vec<_>>(), [OTHER]);
    assert!(PodTracker::default().knows([p.as_str()]), "no runtime: nothing to wait for");
    assert!(!PodTracker::default().saw([p.as_str()]), "no runtime: no pod is unnamed");
}

#[test]
fn a_runtime_that_fails_leaves_its_pods_unnamed_since_then_and_is_asked_again_after_a_wait() {
    let (mut t, rt) = tracker();
    rt.lock().unwrap().pods.insert(UID.into(), meta("batch", &[ID]));
    t.saw([path(UID, ID).as_str()]);
    assert!(t.refresh_if_wanted());
    // The runtime goes down; a new pod appears.
    rt.lock().unwrap().down = true;
    rt.lock().unwrap().pods.insert(OTHER.into(), meta("batch", &[ID2]));
    std::thread::sleep(MIN_REFRESH_GAP);
    let before = crate::clock::now_ms();
    t.saw([path(OTHER, ID2).as_str()]);
    assert!(!t.refresh_if_wanted());
    let s = t.stats().clone();
    assert_eq!((s.pods, s.unnamed, s.errors_total), (1, 1, 1), "the named pod stays named; the new one is unnamed: {s:?}");
    assert!(s.stale_since_unix_ms.is_some_and(|t| t >= before), "{s:?}");
    assert_eq!(s.last_error.as_deref(), Some("connection refused"));
    assert_eq!(t.shared_unnamed()[OTHER].pod_path, format!("/kubepods/besteffort/pod{OTHER}"));
    // No question before the wait is over, however many tasks of the pod are seen.
    std::thread::sleep(MIN_REFRESH_GAP);
    t.saw([path(OTHER, ID2).as_str()]);
    assert!(!t.refresh_if_wanted());
    assert_eq!(rt.lock().unwrap().asked.len(), 2);
    // It answers again: named, nothing stale.
    rt.lock().unwrap().down = false;
    std::thread::sleep(backoff(1));
    assert!(t.refresh_if_wanted());
    let s = t.stats();
    assert_eq!((s.pods, s.unnamed, s.stale_since_unix_ms, s.last_error.as_deref()), (2, 0, None, None), "{s:?}");
    assert_eq!(backoff(20), MAX_RETRY_GAP);
}

#[test]
fn an_answer_keeps_the_sandboxes_named_before_and_a_pod_with_no_task_left_is_forgotten() {
    let (mut t, rt) = tracker();
    rt.lock().unwrap().pods.insert(UID.into(), meta("batch", &[ID]));
    t.saw([path(UID, ID).as_str()]);
    t.refresh_if_wanted();
    // The sandbox was re-created: the runtime's answer about the new container names only it.
    rt.lock().unwrap().pods.insert(UID.into(), meta("batch", &[ID2]));
    std::thread::sleep(MIN_REFRESH_GAP);
    t.saw([path(UID, ID2).as_str()]);
    assert!(t.refresh_if_wanted());
    assert!(t.knows([path(UID, ID).as_str(), path(UID, ID2).as_str()]), "both containers are the pod's");
    t.saw([path(OTHER, ID).as_str()]);
    assert_eq!(t.stats().unnamed, 1);
    t.prune([path(UID, ID2).as_str(), "/system.slice/x.service"]);
    assert_eq!((t.index().len(), t.stats().unnamed), (1, 0), "the pod with no task is forgotten, named or not");
    t.prune(std::iter::empty());
    assert_eq!(t.index().len(), 1, "at most one prune per gap");
}
