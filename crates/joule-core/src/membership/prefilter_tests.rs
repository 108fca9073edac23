//! The compiled rules held to the matcher: whatever a class's rules accept, the kernel's
//! decision lets through (random configs and processes from small pools of values, so that
//! matches are frequent), and an event that cannot bring a process into a class is named as
//! such only when no class can take it.

use super::*;
use crate::config::{MatchRules, PodIndex};
use crate::procfs::TaskCgroups;

/// xorshift64: a fixed sequence, so a failure repeats.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[(self.next() % v.len() as u64) as usize]
    }
    fn some<T: Clone>(&mut self, v: &[T], most: usize) -> Vec<T> {
        let n = (self.next() % (most as u64 + 1)) as usize;
        (0..n).map(|_| self.pick(v).clone()).collect()
    }
}

const COMMS: &[&str] = &["nginx", "worker", "a-very-long-process-name", "a-very-long-pro", "sh"];
const UIDS: &[u32] = &[0, 33, 1001];
const PIDS: &[i32] = &[100, 200, 300];
const EXES: &[&str] = &["/usr/bin/nginx", "/bin/sh"];
const CGROUPS: &[&str] = &[
    "/",
    "/batch",
    "/batch/a",
    "/system.slice/web.service",
    "/system.slice/web.service/x",
    "/user.slice/user-1001.slice/user@1001.service/web.service",
    "/other",
];
const UNITS: &[&str] = &["web.service", "system.slice", "user.slice"];

fn random_classes(r: &mut Rng) -> Vec<ClassConfig> {
    (0..1 + r.next() % 4)
        .map(|i| {
            let s = |v: &[&str], r: &mut Rng| r.some(v, 2).into_iter().map(String::from).collect::<Vec<_>>();
            let matches = MatchRules {
                comm: s(COMMS, r),
                uid: r.some(UIDS, 2),
                pid: if r.next().is_multiple_of(4) { r.some(PIDS, 1) } else { vec![] },
                exe: if r.next().is_multiple_of(3) { s(EXES, r) } else { vec![] },
                cgroup: if r.next().is_multiple_of(2) { s(&CGROUPS[1..], r) } else { vec![] },
                unit: if r.next().is_multiple_of(4) { vec![r.pick(&UNITS[..1]).to_string()] } else { vec![] },
                slice: if r.next().is_multiple_of(4) { vec![r.pick(&UNITS[1..]).to_string()] } else { vec![] },
                ..Default::default()
            };
            ClassConfig { name: format!("c{i}"), matches, ..Default::default() }
        })
        .collect()
}

struct Proc {
    pid: i32,
    comm: String,
    exe: String,
    uid: u32,
    cgroups: Vec<String>,
}

fn random_proc(r: &mut Rng) -> Proc {
    Proc {
        pid: *r.pick(&[100, 200, 300, 400]),
        comm: r.pick(&["nginx", "worker", "a-very-long-pro", "sh", "bash"]).to_string(),
        exe: r.pick(EXES).to_string(),
        uid: *r.pick(&[0, 33, 1001, 2000]),
        cgroups: (0..1 + r.next() % 2).map(|_| r.pick(CGROUPS).to_string()).collect(),
    }
}

/// The classes (bits) whose rules `p` meets, as the matcher says.
fn matched(classes: &[ClassConfig], p: &Proc) -> u64 {
    let cg = TaskCgroups::parse(&p.cgroups.iter().enumerate().map(|(i, c)| format!("{i}:x:{c}\n")).collect::<String>());
    classes
        .iter()
        .enumerate()
        .filter(|(_, c)| c.matches.matches(p.pid, p.comm.as_bytes(), Some(std::path::Path::new(&p.exe)), Some(p.uid), cg.raw_paths(), &PodIndex::new()))
        .fold(0, |bits, (i, _)| bits | 1 << i)
}

/// The kernel's decision about `p`; `exec`: at an exec, which sees the executable's name.
fn decided(f: &Prefilter, relevant: u64, p: &Proc, exec: bool) -> u64 {
    let cg = p.cgroups.iter().fold(0, |b, c| b | f.cgroup_bits(c));
    f.candidates(relevant, p.comm.as_bytes(), exec.then_some(p.exe.as_str()), p.uid, p.pid as u32, cg)
}

#[test]
fn whatever_a_class_accepts_the_kernel_lets_through() {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15);
    let mut matches = 0;
    for _ in 0..400 {
        let classes = random_classes(&mut r);
        let f = Prefilter::compile(&classes).unwrap();
        for _ in 0..50 {
            let p = random_proc(&mut r);
            let want = matched(&classes, &p);
            let got = decided(&f, f.relevant(Change::Cgroup), &p, false) & decided(&f, f.relevant(Change::Cgroup), &p, true);
            assert_eq!(want & !got, 0, "classes {want:b} match {} but the filter says {got:b}: {classes:#?}", p.comm);
            matches += want.count_ones();
        }
    }
    assert!(matches > 1000, "the pools give too few matches ({matches}) to prove anything");
}

#[test]
fn an_event_that_brings_a_process_into_a_class_is_relevant_to_it() {
    let mut r = Rng(0x2545_f491_4f6c_dd1d);
    let mut joins = 0;
    for _ in 0..400 {
        let classes = random_classes(&mut r);
        let f = Prefilter::compile(&classes).unwrap();
        for _ in 0..50 {
            let before = random_proc(&mut r);
            let mut after = Proc { cgroups: before.cgroups.clone(), comm: before.comm.clone(), exe: before.exe.clone(), ..before };
            let change = *r.pick(&[Change::Exec, Change::Rename, Change::Cgroup, Change::Creds]);
            match change {
                Change::Exec => (after.comm, after.exe) = (r.pick(COMMS).to_string(), r.pick(EXES).to_string()),
                Change::Rename => after.comm = r.pick(COMMS).to_string(),
                Change::Cgroup => after.cgroups = vec![r.pick(CGROUPS).to_string()],
                Change::Creds => after.uid = *r.pick(UIDS),
                Change::Fork => unreachable!(),
            }
            let joined = matched(&classes, &after) & !matched(&classes, &before);
            let got = decided(&f, f.relevant(change), &after, change == Change::Exec);
            assert_eq!(joined & !got, 0, "{change:?} brings {} into {joined:b}, the filter lets {got:b} through", after.comm);
            joins += joined.count_ones();
        }
    }
    assert!(joins > 300, "too few joins ({joins}) to prove anything");
}

#[test]
fn a_child_of_a_parent_in_no_class_differs_only_by_its_pid() {
    let classes = vec![
        ClassConfig { name: "byname".into(), matches: MatchRules { comm: vec!["nginx".into()], ..Default::default() }, ..Default::default() },
        ClassConfig { name: "bypid".into(), matches: MatchRules { pid: vec![4242], uid: vec![0], ..Default::default() }, ..Default::default() },
    ];
    let f = Prefilter::compile(&classes).unwrap();
    let relevant = f.relevant(Change::Fork);
    assert_eq!(f.candidates(relevant, b"nginx", None, 0, 4243, 0), 0, "only a pid rule can tell a child from its parent");
    assert_eq!(f.candidates(relevant, b"sh", None, 0, 4242, 0), 0b10, "the pid a pid rule names");
    assert_eq!(f.candidates(relevant, b"sh", None, 1000, 4242, 0), 0, "and the rest of its rules");
}

#[test]
fn values_compile_to_the_classes_that_name_them() {
    let cfg = crate::config::Config::parse(
        "[[class]]\nname = \"a\"\nmatch = { comm = [\"nginx\", \"abcdefghijklmno\"], uid = [33] }\n\
         [[class]]\nname = \"empty\"\n\
         [[class]]\nname = \"b\"\nmatch = { comm = [\"nginx\"], cgroup = [\"/batch/jobs/\"], unit = [\"web.service\"], exe = [\"/bin/x\"] }\n",
    )
    .unwrap();
    let f = Prefilter::compile(&cfg.classes).unwrap();
    assert_eq!((f.classes, f.comm, f.uid, f.cgroup, f.exe), (0b101, 0b101, 0b001, 0b100, 0b100), "the class without rules matches nothing");
    assert_eq!(f.comms[&comm_key(b"nginx")], 0b101);
    assert_eq!(f.comms[&comm_key(b"abcdefghijklmno")], 0b001);
    assert_eq!(comm_key(b"abcdefghijklmnopqrstuvwxyz"), comm_key(b"abcdefghijklmno"), "cut to a comm's 15 bytes: the kernel sees no longer name");
    assert_eq!(f.cgroup_paths["/batch/jobs"], 0b100);
    assert_eq!(f.cgroup_names[&b"jobs".to_vec()], 0b100);
    assert_eq!(f.cgroup_names[&b"web.service".to_vec()], 0b100);
    assert_eq!(f.cgroup_bits("/batch/jobs/x"), 0b100);
    assert_eq!(f.cgroup_bits("/batch/jobsx"), 0);
    assert_eq!(f.cgroup_bits("/system.slice/web.service"), 0b100);
    assert_eq!(f.exes[&b"x".to_vec()], 0b100);
    let exec = f.relevant(Change::Exec);
    assert_eq!(f.candidates(exec, b"nginx", Some("/opt/x"), 33, 1, 0b100), 0b101, "an exe of that basename may be the rule's");
    assert_eq!(f.candidates(exec, b"nginx", Some("/bin/y"), 33, 1, 0b100), 0b001, "another cannot");
    let many: Vec<ClassConfig> = (0..65).map(|i| ClassConfig { name: format!("c{i}"), ..Default::default() }).collect();
    assert_eq!(Prefilter::compile(&many), None, "65 classes do not fit in one filter's bits");
}
