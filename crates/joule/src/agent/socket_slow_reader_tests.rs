//! The status socket serves one client at a time: a client reading its view slowly is cut off
//! after [`WRITE_TIMEOUT`] in all, so the next `joule status` is answered.

use super::*;
use std::io::Read;

#[test]
fn regression_a_slow_reader_holds_the_status_socket_no_longer_than_the_write_timeout() {
    let dir = tempfile::tempdir().unwrap();
    // A view of 4 MB, far more than a socket buffers.
    let budget = Budget { sensors: vec!["x".repeat(1 << 20); 4], ..Budget::default() };
    let _socket = StatusSocket::open(dir.path(), Shared::default(), budget).unwrap();
    let path = dir.path().join(SOCKET);
    // 4 KiB every 100 ms: each write makes progress well within its own timeout.
    let mut slow = UnixStream::connect(&path).unwrap();
    let reader = std::thread::spawn(move || {
        let (mut buf, mut got) = ([0u8; 4096], 0);
        let t = Instant::now();
        while t.elapsed() < WRITE_TIMEOUT + Duration::from_secs(1) {
            got += slow.read(&mut buf).unwrap();
            std::thread::sleep(Duration::from_millis(100));
        }
        // Then all that is left, at full speed: what the agent sent before it gave up.
        slow.set_read_timeout(Some(WRITE_TIMEOUT)).unwrap();
        let mut rest = Vec::new();
        slow.read_to_end(&mut rest).unwrap();
        got + rest.len()
    });
    std::thread::sleep(Duration::from_millis(100));
    let t = Instant::now();
    let mut next = UnixStream::connect(&path).unwrap();
    next.set_read_timeout(Some(WRITE_TIMEOUT * 3)).unwrap();
    let mut view = Vec::new();
    next.read_to_end(&mut view).unwrap();
    let waited = t.elapsed();
    assert!(serde_json::from_slice::<serde_json::Value>(&view).is_ok(), "the next client's view is whole ({} bytes)", view.len());
    assert!(waited < WRITE_TIMEOUT + Duration::from_millis(500), "the next client waited {waited:?} behind a slow reader");
    let slow_got = reader.join().unwrap();
    assert!(slow_got < view.len(), "the slow reader got the whole view ({slow_got} bytes): it was never cut off");
}
