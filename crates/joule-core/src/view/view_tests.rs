//! The view as the agent sends it and its clients read it: a current agent's view reads back
//! whole and writes out the same; the nap's and the caps' parts read through their types; an
//! older agent's view reads with its missing parts as None and a note, never as 0.

use super::*;

fn fixture() -> serde_json::Value {
    let text = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../../testdata/view/status-v1.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// Every key the fixture names is in what the typed view writes back, with the same value:
/// nothing the agent sends is dropped or changed on the way through the one type.
fn contains(whole: &serde_json::Value, part: &serde_json::Value, at: &str) {
    match (whole, part) {
        (serde_json::Value::Object(w), serde_json::Value::Object(p)) => {
            for (k, v) in p {
                contains(w.get(k).unwrap_or_else(|| panic!("{at}.{k} was dropped")), v, &format!("{at}.{k}"));
            }
        }
        (serde_json::Value::Array(w), serde_json::Value::Array(p)) => {
            assert_eq!(w.len(), p.len(), "{at} changed length");
            for (i, (w, p)) in w.iter().zip(p).enumerate() {
                contains(w, p, &format!("{at}[{i}]"));
            }
        }
        (w, p) => assert_eq!(w, p, "{at} changed"),
    }
}

#[test]
fn a_current_agents_view_round_trips_through_the_one_type() {
    // The fixture names what `joule status` shows; the rest of a view is its default.
    let sent = fixture();
    let view = over_default(&sent).expect("the fixture is a view");
    assert_eq!(view.version, Some(VERSION));
    assert_eq!(view.version_note(), None);
    let back = serde_json::to_value(&view).unwrap();
    contains(&back, &sent, "view");
    let again: View = serde_json::from_value(back.clone()).unwrap();
    assert_eq!(serde_json::to_value(&again).unwrap(), back, "a second trip changes nothing");
    let caps = view.actuator("cgroup_cpu").and_then(|a| a.state_as::<CapsView>()).unwrap();
    assert_eq!(caps.caps["batch"].ratio, 0.35);
    let nap = view.nap().expect("the nap actuator's state");
    assert_eq!((nap.status.napping, nap.status.naps_total, nap.class.as_deref(), nap.fast_wake), (true, 7, Some("web"), true));
    assert_eq!(nap.status.last_wake.unwrap().leave_us, 850);
    assert!(view.actuator("tc").and_then(|a| a.state_as::<CapsView>()).is_none(), "another actuator's state is not the caps");
}

/// An agent from before the view had a version (and before `limits`, `recovered`): its
/// view reads, the missing parts are None, and the note says the agent is too old.
#[test]
fn an_older_agents_view_reads_with_its_missing_parts_as_none() {
    let mut sent = fixture();
    let o = sent.as_object_mut().unwrap();
    o.remove("version");
    o["agent"].as_object_mut().unwrap().remove("limits");
    o["agent"].as_object_mut().unwrap().remove("recovered");
    let view = over_default(&sent).unwrap();
    assert_eq!((view.version, view.agent.limits.is_none(), view.agent.recovered.is_none()), (None, true, true));
    assert!(view.version_note().unwrap().contains("missing (agent too old"), "{:?}", view.version_note());
    let newer = View { version: Some(VERSION + 1), ..View::default() };
    assert!(newer.version_note().unwrap().contains("newer than this joule's"), "{:?}", newer.version_note());
}

#[test]
fn a_partial_fixture_is_laid_over_the_default_view() {
    let v = over_default(&serde_json::json!({ "budget": { "pid": 7 }, "agent": { "pace": { "why": "stage" } } })).unwrap();
    assert_eq!((v.budget.pid, v.agent.pace.why), (7, crate::control::pace::Why::Stage));
    assert!(over_default(&serde_json::json!({ "budget": { "pid": "seven" } })).is_err(), "a wrong type is an error, not a default");
}
