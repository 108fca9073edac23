//! The status client against servers of its own making in a directory of ours: nothing there
//! is no agent (and nothing is created), a view is read through the directory's fd even where
//! its path is too long for a socket address, a shared directory or a file posing as the
//! socket is refused, an answer too large or too slow is cut off, and the peer must be root.

use super::*;
use std::io::Write;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::UnixListener;

/// A directory of ours, 0700, with a path longer than a socket address may be.
fn journal() -> (tempfile::TempDir, PathBuf) {
    let t = tempfile::tempdir().unwrap();
    let dir = t.path().join("j".repeat(120));
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700)).unwrap();
    (t, dir)
}

/// Binds `dir`'s socket through an fd of the directory (its path is too long to bind).
fn listen(dir: &Path) -> UnixListener {
    let d = std::fs::File::open(dir).unwrap();
    UnixListener::bind(format!("/proc/self/fd/{}/{SOCKET}", d.as_raw_fd())).unwrap()
}

/// Serves one connection with `serve`, on a thread of its own.
fn serve_one(l: UnixListener, serve: impl FnOnce(UnixStream) + Send + 'static) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        if let Ok((c, _)) = l.accept() {
            serve(c);
        }
    })
}

#[test]
fn nothing_there_is_no_agent_and_nothing_is_created() {
    let (_t, dir) = journal();
    let missing = dir.join("none");
    assert!(matches!(read(&missing), Err(ClientError::NoAgent(_))));
    assert!(!missing.exists(), "the client created the agent's directory");
    assert!(matches!(read(&dir), Err(ClientError::NoAgent(_))), "no socket");
    drop(listen(&dir)); // a killed agent's socket: nobody listens
    let e = read(&dir).unwrap_err();
    assert!(matches!(e, ClientError::NoAgent(_)), "{e}");
}

#[test]
fn a_view_is_read_through_the_directorys_fd() {
    let (_t, dir) = journal();
    let view = View { budget: crate::view::Budget { pid: 4242, ..Default::default() }, ..Default::default() };
    let body = serde_json::to_vec(&view).unwrap();
    let server = serve_one(listen(&dir), move |mut c| c.write_all(&body).unwrap());
    let v = read(&dir).unwrap();
    assert_eq!(v.budget.pid, 4242);
    server.join().unwrap();
}

#[test]
fn a_shared_directory_or_a_file_posing_as_the_socket_is_refused() {
    let (t, dir) = journal();
    std::fs::write(dir.join(SOCKET), "{}").unwrap();
    let e = read(&dir).unwrap_err();
    assert!(matches!(&e, ClientError::Refused(w) if w.contains("not a socket")), "{e}");
    std::fs::remove_file(dir.join(SOCKET)).unwrap();
    // A link to a real socket elsewhere is not the agent's socket either.
    let other = t.path().join("other");
    std::fs::create_dir(&other).unwrap();
    let _l = listen(&other);
    std::os::unix::fs::symlink(other.join(SOCKET), dir.join(SOCKET)).unwrap();
    let e = read(&dir).unwrap_err();
    assert!(matches!(&e, ClientError::Refused(w) if w.contains("not a socket")), "{e}");
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o733)).unwrap();
    let e = read(&dir).unwrap_err();
    assert!(matches!(&e, ClientError::Refused(w) if w.contains("writable by group or others")), "{e}");
}

#[test]
fn an_answer_too_large_or_too_slow_is_cut_off() {
    let (_t, dir) = journal();
    let server = serve_one(listen(&dir), |mut c| {
        let _ = c.write_all(&vec![b' '; 4097]);
    });
    let e = read_within(&dir, 4096, DEADLINE).unwrap_err();
    assert!(matches!(&e, ClientError::Failed(w) if w.contains("larger than 4096 bytes")), "{e}");
    server.join().unwrap();
    std::fs::remove_file(dir.join(SOCKET)).unwrap();
    // One byte every 50 ms: each read is quick, the whole never ends. The deadline is the
    // whole read's, not each read's.
    let server = serve_one(listen(&dir), |mut c| {
        for _ in 0..100 {
            if c.write_all(b" ").is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    let t0 = Instant::now();
    let e = read_within(&dir, 4096, Duration::from_millis(300)).unwrap_err();
    assert!(matches!(&e, ClientError::Failed(w) if w.contains("within the deadline")), "{e}");
    assert!(t0.elapsed() < Duration::from_secs(2), "the client waited {:?}", t0.elapsed());
    server.join().unwrap();
}

#[test]
fn the_peer_must_be_root_or_ourselves() {
    let p = Path::new("/run/joule/agent.sock");
    judge_peer(p, 0, 10, 1000).unwrap();
    judge_peer(p, 1000, 10, 1000).unwrap();
    let e = judge_peer(p, 64001, 4321, 0).unwrap_err().to_string();
    assert!(e.contains("refusing /run/joule/agent.sock") && e.contains("(pid 4321) runs as uid 64001, not as root"), "{e}");
}

#[test]
fn a_file_the_agent_keeps_is_read_only_when_it_is_a_private_regular_file() {
    let (_t, dir) = journal();
    let f = dir.join("left.json");
    std::fs::write(&f, "{}").unwrap();
    assert_eq!(read_file(&dir, "left.json", 1024).unwrap(), "{}");
    assert!(matches!(read_file(&dir, "none.json", 1024), Err(ClientError::NoAgent(_))));
    let e = read_file(&dir, "left.json", 1).unwrap_err();
    assert!(matches!(&e, ClientError::Failed(w) if w.contains("larger than 1 bytes")), "{e}");
    std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o666)).unwrap();
    let e = read_file(&dir, "left.json", 1024).unwrap_err();
    assert!(matches!(&e, ClientError::Refused(w) if w.contains("others may write it")), "{e}");
    std::fs::remove_file(&f).unwrap();
    std::os::unix::fs::symlink("/etc/hostname", &f).unwrap();
    let e = read_file(&dir, "left.json", 1024).unwrap_err();
    assert!(matches!(&e, ClientError::Refused(w) if w.contains("symlink")), "{e}");
    std::fs::remove_file(&f).unwrap();
    // A FIFO would hang a plain read: refused without blocking.
    nix::unistd::mkfifo(&f, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
    let e = read_file(&dir, "left.json", 1024).unwrap_err();
    assert!(matches!(&e, ClientError::Refused(w) if w.contains("not a regular file")), "{e}");
}
