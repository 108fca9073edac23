//! The bench's network: two network namespaces (`jnet-<pid>-a`, `jnet-<pid>-b`) joined by a
//! veth pair (`jnq<pid>a` in a, `jnq<pid>b` in b), created with `ip` (bench scaffolding, not
//! the product's limiter, which speaks netlink) and deleted on every exit path by `Drop`,
//! which also kills the processes the bench started inside them.

use anyhow::{bail, Context};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

pub struct Topo {
    pub ns_a: String,
    pub ns_b: String,
    pub if_a: String,
    pub if_b: String,
    pub addr_a: String,
    pub addr_b: String,
    children: Vec<Child>,
}

fn ip(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).stderr(Stdio::piped()).output().context("while running ip (iproute2)")?;
    if !out.status.success() {
        bail!("ip {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    Ok(())
}

impl Topo {
    pub fn create() -> anyhow::Result<Topo> {
        let pid = std::process::id();
        let sub = pid % 250 + 1;
        let t = Topo {
            ns_a: format!("jnet-{pid}-a"),
            ns_b: format!("jnet-{pid}-b"),
            if_a: format!("jnq{pid}a"),
            if_b: format!("jnq{pid}b"),
            addr_a: format!("10.201.{sub}.1"),
            addr_b: format!("10.201.{sub}.2"),
            children: Vec::new(),
        };
        ip(&["netns", "add", &t.ns_a])?;
        ip(&["netns", "add", &t.ns_b])?; // from here on, Drop deletes both
        ip(&["link", "add", &t.if_a, "netns", &t.ns_a, "type", "veth", "peer", "name", &t.if_b, "netns", &t.ns_b])?;
        for (ns, ifname, addr) in [(&t.ns_a, &t.if_a, &t.addr_a), (&t.ns_b, &t.if_b, &t.addr_b)] {
            ip(&["-n", ns, "addr", "add", &format!("{addr}/24"), "dev", ifname])?;
            ip(&["-n", ns, "link", "set", ifname, "up"])?;
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
        }
        Ok(t)
    }

    pub fn netns_path(ns: &str) -> PathBuf {
        PathBuf::from(format!("/run/netns/{ns}"))
    }

    /// A command run inside namespace `ns` (`ip netns exec`, which also gives it that
    /// namespace's /sys).
    pub fn exec(ns: &str, prog: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns, prog]);
        c
    }

    /// Starts a long-running process (a server) that `Drop` kills.
    pub fn spawn(&mut self, mut c: Command) -> anyhow::Result<()> {
        let child = c.stdout(Stdio::null()).stderr(Stdio::null()).spawn().context("while starting a process in the bench's netns")?;
        self.children.push(child);
        Ok(())
    }

    /// Steers the receive processing of `if_b` (NET_RX softirq) to `cpu` with RPS.
    pub fn rps_to(&self, cpu: usize) -> anyhow::Result<()> {
        let script = format!("echo {:x} > /sys/class/net/{}/queues/rx-0/rps_cpus", 1u64 << cpu, self.if_b);
        let st = Self::exec(&self.ns_b, "sh").args(["-c", &script]).status()?;
        if !st.success() {
            bail!("setting rps_cpus of {} failed", self.if_b);
        }
        Ok(())
    }
}

impl Drop for Topo {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        // Deleting a namespace deletes the veth end in it, and its peer with it.
        for ns in [&self.ns_a, &self.ns_b] {
            let _ = ip(&["netns", "del", ns]);
        }
    }
}
