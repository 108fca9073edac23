//! Fuzz target: the config loader never panics, whatever the text (issue 17).
#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    if let Ok(text) = std::str::from_utf8(data) {
        let _ = joule_core::config::Config::parse(text);
    }
});
