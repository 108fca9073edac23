//! Fuzz target: the journal reader never panics, whatever the bytes, and a replay of what it
//! reads on the fake effects never panics either (issue 17).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let path = std::path::Path::new("fuzz.jsonl");
    if let Ok((entries, _)) = joule_core::journal::parse_entries(data, path) {
        let undos: Vec<_> = entries.into_iter().map(|e| e.undo).collect();
        let _ = joule_core::journal::replay_checked_all(&undos, &joule_core::effects::FakeEffects::default());
    }
});
