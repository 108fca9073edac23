/* The process monitor: every change that can change a process's class (a new process, an
 * exec, a rename, a move to another cgroup, a setuid, an exit), as an event through a ring
 * buffer. User space keeps the class membership from them instead of walking /proc every
 * period: its cost follows the churn, not the number of processes.
 *
 * With a filter (`filtering`, set before load), the classes' rules that the kernel can decide
 * (comm, uid, pid, cgroup/unit/slice as marks on cgroup directories, exe by the executable's
 * basename at an exec) are in maps, and an event
 * that cannot change any class stays here, counted per CPU in proc_dropped: a fork whose parent
 * user space does not follow, a rename or exec to a name no rule names, a move or setuid that
 * meets no class, the exit of a process nobody follows. Rules the kernel cannot decide (exe,
 * pod) let their candidates through; user space has the final word. The kernel may let too
 * much through, never too little: docs/bpf.md gives the reasoning per event.
 *
 * Followed processes are in proc_track: the kernel adds a process when it sends an event for
 * it (and every child a followed parent forks); user space settles each one it has decided
 * (a member, a non-member kept for its parent, or pruned) through the settle program, against
 * the entry's sequence number so a decision never undoes a newer event.
 *
 * All hooks are tp_btf (fentry and kprobes do not attach on the development kernel, see
 * nap.bpf.c). The uid hook (tp_btf/sys_exit, every syscall's exit) is loaded only when a class
 * matches by uid or grants something (`watch_creds`, see the agent's `watch_creds`): it costs every
 * syscall of the machine a task-storage lookup. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "intf.h"

char LICENSE[] SEC("license") = "GPL";

/* signal_struct.flags of a pid namespace's init (include/linux/sched/signal.h); not in BTF. */
#define SIGNAL_UNKILLABLE 0x00000040

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, JOULE_PROC_RINGBUF_BYTES);
} proc_events SEC(".maps");

/* [0]: events that did not fit in the ring buffer (or in proc_track) since load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} proc_lost SEC(".maps");

/* Per CPU, per kind (enum joule_proc_kind): events the filter kept in the kernel. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, JOULE_PROC_KINDS);
	__type(key, __u32);
	__type(value, __u64);
} proc_dropped SEC(".maps");

/* tgid → the process user space follows (struct joule_proc_track). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, JOULE_PROC_TRACK_MAX);
	__type(key, __u32);
	__type(value, struct joule_proc_track);
} proc_track SEC(".maps");

/* The rules, value → the classes (bits) whose rules of that kind it satisfies. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_PROC_MAX_RULES);
	__type(key, struct joule_proc_comm);
	__type(value, __u64);
} rule_comms SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_PROC_MAX_RULES);
	__type(key, __u32);
	__type(value, __u64);
} rule_uids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_PROC_MAX_RULES);
	__type(key, __u32);
	__type(value, __u64);
} rule_pids SEC(".maps");

/* Basenames of the directories cgroup, unit and slice rules name: a cgroup made (or renamed)
 * under one of these names is marked at once, wherever it is (a superset of the rules). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_PROC_MAX_RULES);
	__type(key, struct joule_proc_cg_name);
	__type(value, __u64);
} rule_cg_names SEC(".maps");

/* Basenames of the executables exe rules name. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_PROC_MAX_RULES);
	__type(key, struct joule_proc_cg_name);
	__type(value, __u64);
} rule_exes SEC(".maps");

/* Cgroup directory (kernfs id, any hierarchy) → the classes whose cgroup-kind rule it and
 * everything below it satisfy. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__uint(max_entries, JOULE_PROC_MAX_MARKS);
	__type(key, __u64);
	__type(value, __u64);
} cg_marks SEC(".maps");

/* Set before load. */
const volatile bool watch_creds = false;
const volatile bool filtering = false;
const volatile struct joule_proc_rules rules;
const volatile __u32 self_tgid = 0;

/* Written by user space through the skeleton's mmap of .bss. */
/* 0 while user space walks /proc (every event is sent, as a candidate), 1 once it follows. */
volatile __u32 filter_on;
/* Hierarchy ids and levels that have marks (bit n: id or level n; 63 stands for >= 63). */
volatile __u64 marked_hiers;
volatile __u64 marked_levels;
/* A mark could not be stored: cgroup rules then count as met everywhere. */
volatile __u32 marks_full;
struct joule_proc_settle settle_queue[JOULE_PROC_SETTLE_MAX];
volatile __u32 settle_len;

static __always_inline void count(void *map, __u32 idx)
{
	__u64 *c = bpf_map_lookup_elem(map, &idx);
	if (c)
		__sync_fetch_and_add(c, 1);
}

static __always_inline void dropped(__u32 kind)
{
	__u64 *c = bpf_map_lookup_elem(&proc_dropped, &kind);
	if (c)
		*c += 1; /* per CPU: nobody else writes this slot */
}

/* Sends one event. The consumer (the agent's loop) drains the buffer once per period, so only
 * the first record after it drained wakes it (it is asleep then); later ones wait for the
 * drain without a wake-up each, unless the buffer passes half full. */
static __always_inline void send(__u32 kind, struct task_struct *t, __u32 ppid, const char *comm, __u32 flags, __u64 seq)
{
	__u64 before = bpf_ringbuf_query(&proc_events, BPF_RB_AVAIL_DATA);
	__u64 half = bpf_ringbuf_query(&proc_events, BPF_RB_RING_SIZE) / 2;
	struct joule_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		count(&proc_lost, 0);
		return;
	}
	e->kind = kind;
	e->pid = BPF_CORE_READ(t, tgid);
	e->ppid = ppid;
	e->flags = flags;
	e->start_ns = BPF_CORE_READ(t, group_leader, start_boottime);
	e->seq = seq;
	if (comm)
		bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), comm);
	else
		BPF_CORE_READ_STR_INTO(&e->comm, t, group_leader, comm);
	__u64 wake = before == 0 || (before < half && before + sizeof(*e) + 8 >= half) ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	bpf_ringbuf_submit(e, wake);
}

static __always_inline int is_leader(struct task_struct *t)
{
	return BPF_CORE_READ(t, pid) == BPF_CORE_READ(t, tgid);
}

static __always_inline __u64 start_ticks(struct task_struct *t)
{
	return BPF_CORE_READ(t, group_leader, start_boottime) / (1000000000ULL / JOULE_USER_HZ);
}

/* The entry of process `tgid` started at `ticks`; an entry of an older process of that pid is
 * stale (user space adopted a process that was gone by then) and goes. */
static __always_inline struct joule_proc_track *tracked(__u32 tgid, __u64 ticks)
{
	struct joule_proc_track *e = bpf_map_lookup_elem(&proc_track, &tgid);
	if (e && e->start_ticks != ticks) {
		bpf_map_delete_elem(&proc_track, &tgid);
		return 0;
	}
	return e;
}

static __always_inline __u64 flags_of(struct joule_proc_track *e)
{
	return e ? e->state & JOULE_TRACK_FLAGS_MASK : JOULE_TRACK_PRUNED;
}

/* Followed: an entry that is not pruned. */
static __always_inline bool followed(struct joule_proc_track *e)
{
	return e && !(e->state & JOULE_TRACK_PRUNED);
}

/* A new entry for a process user space has not seen yet (a fork, an adoption). */
static __always_inline __u64 create(__u32 tgid, __u64 ticks)
{
	struct joule_proc_track n = { .start_ticks = ticks, .state = 1ULL << JOULE_TRACK_SEQ_SHIFT };
	if (bpf_map_update_elem(&proc_track, &tgid, &n, BPF_ANY)) {
		count(&proc_lost, 0); /* not followed although it must be: user space walks /proc */
		return 0;
	}
	return 1;
}

/* An event about to be sent for a process: its entry's seq moves on and its flags clear (the
 * event may change what user space decided), or it gets an entry. */
static __always_inline __u64 touch(__u32 tgid, __u64 ticks, struct joule_proc_track *e, __u32 *evflags)
{
	if (!e) {
		*evflags |= JOULE_PROC_F_ADOPTED;
		return create(tgid, ticks);
	}
	__u64 old = __sync_fetch_and_add(&e->state, 1ULL << JOULE_TRACK_SEQ_SHIFT);
	if (old & JOULE_TRACK_FLAGS_MASK)
		__sync_fetch_and_and(&e->state, ~(__u64)JOULE_TRACK_FLAGS_MASK);
	if (old & JOULE_TRACK_PRUNED)
		*evflags |= JOULE_PROC_F_ADOPTED;
	return (old >> JOULE_TRACK_SEQ_SHIFT) + 1;
}

/* Whether the process has children (checked on its leader; several threads: it may). */
static __always_inline bool has_children(struct task_struct *t)
{
	struct task_struct *leader = BPF_CORE_READ(t, group_leader);
	if (BPF_CORE_READ(leader, signal, nr_threads) > 1)
		return true;
	__u64 head = (__u64)leader + bpf_core_field_offset(struct task_struct, children);
	return (__u64)BPF_CORE_READ(leader, children.next) != head;
}

/* The classes (bits) whose cgroup-kind rules a cgroup or one of its ancestors is marked for.
 * A global function: verified once, not once per call site. */
__noinline __u64 joule_marks_up(__u64 cgrp)
{
	struct cgroup *cg = (struct cgroup *)cgrp;
	if (!cg)
		return 0;
	if (marks_full)
		return ~0ULL;
	__u32 hid = BPF_CORE_READ(cg, root, hierarchy_id);
	if (!(marked_hiers & (1ULL << (hid < 63 ? hid : 63))))
		return 0;
	__u64 bits = 0, levels = marked_levels;
	for (int d = 0; d < JOULE_PROC_CG_DEPTH; d++) {
		int level = BPF_CORE_READ(cg, level);
		if (levels & (1ULL << (level < 63 && level >= 0 ? level : 63))) {
			__u64 id = BPF_CORE_READ(cg, kn, id);
			__u64 *b = bpf_map_lookup_elem(&cg_marks, &id);
			if (b)
				bits |= *b;
		}
		if (level <= 0)
			return bits;
		cg = BPF_CORE_READ(cg, self.parent, cgroup);
		if (!cg)
			return bits;
	}
	return ~0ULL; /* deeper than looked at: any cgroup rule may hold */
}

/* The same for every hierarchy the task is in (its css_set's links, named v1 hierarchies too). */
static __always_inline __u64 cgroup_bits(struct task_struct *t)
{
	struct css_set *cset = BPF_CORE_READ(t, cgroups);
	if (!cset)
		return 0;
	__u64 head = (__u64)cset + bpf_core_field_offset(struct css_set, cgrp_links);
	__u64 link_off = bpf_core_field_offset(struct cgrp_cset_link, cset_link);
	__u64 pos = (__u64)BPF_CORE_READ(cset, cgrp_links.next);
	__u64 bits = 0;
	for (int i = 0; i < JOULE_PROC_MAX_HIERARCHIES; i++) {
		if (!pos || pos == head)
			return bits;
		struct cgrp_cset_link *link = (struct cgrp_cset_link *)(pos - link_off);
		bits |= joule_marks_up((__u64)BPF_CORE_READ(link, cgrp));
		pos = (__u64)BPF_CORE_READ(link, cset_link.next);
	}
	return ~0ULL;
}

static __always_inline __u32 real_uid(struct task_struct *t)
{
	return BPF_CORE_READ(t, real_cred, uid.val);
}

/* The classes among `relevant` whose kernel-decidable rules the task meets now (with `comm`
 * as its name, at an exec `exe` as its executable's basename, and, for a move, `dst` as one of
 * its cgroups); 0: no class among them can take it, so the event cannot change its class. */
static __always_inline __u64 candidate(struct task_struct *t, __u64 relevant, struct joule_proc_comm *comm, struct joule_proc_cg_name *exe,
				       struct cgroup *dst)
{
	__u64 ok = rules.classes & relevant;
	if (!ok)
		return 0;
	if (exe && (ok & rules.exe)) {
		__u64 *b = bpf_map_lookup_elem(&rule_exes, exe);
		ok &= ~rules.exe | (b ? *b : 0);
	}
	if (ok & rules.comm) {
		__u64 *b = bpf_map_lookup_elem(&rule_comms, comm);
		ok &= ~rules.comm | (b ? *b : 0);
	}
	if (ok & rules.uid) {
		__u32 uid = real_uid(t);
		__u64 *b = bpf_map_lookup_elem(&rule_uids, &uid);
		ok &= ~rules.uid | (b ? *b : 0);
	}
	if (ok & rules.pid) {
		__u32 pid = BPF_CORE_READ(t, tgid);
		__u64 *b = bpf_map_lookup_elem(&rule_pids, &pid);
		ok &= ~rules.pid | (b ? *b : 0);
	}
	if (!(ok & rules.cgroup) || (ok & ~rules.cgroup))
		return ok;
	return ok & (cgroup_bits(t) | joule_marks_up((__u64)dst));
}

static __always_inline void leader_comm(struct task_struct *t, struct joule_proc_comm *k)
{
	BPF_CORE_READ_STR_INTO(&k->comm, t, group_leader, comm);
}

/* Whether the children of an exiting process go to a followed reaper: the nearest ancestor that
 * is a child subreaper or a pid namespace's init (find_new_reaper). Global init takes orphans
 * as nobody's child (they follow no class). Deeper than looked at: it may. */
static __always_inline bool orphans_followed(struct task_struct *p)
{
	struct task_struct *a = BPF_CORE_READ(p, group_leader, real_parent);
	for (int d = 0; d < JOULE_PROC_REAPER_DEPTH; d++) {
		if (!a)
			return false;
		__u32 tgid = BPF_CORE_READ(a, tgid);
		if (tgid <= 1)
			return false;
		struct signal_struct *sig = BPF_CORE_READ(a, signal);
		bool reaper = BPF_CORE_READ_BITFIELD_PROBED(sig, is_child_subreaper) || (BPF_CORE_READ(sig, flags) & SIGNAL_UNKILLABLE);
		if (reaper)
			return followed(tracked(tgid, start_ticks(a)));
		a = BPF_CORE_READ(a, group_leader, real_parent);
	}
	return true;
}

/* Per task, the real uid it last had at a syscall's exit (or at its fork). */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} task_uid SEC(".maps");

SEC("tp_btf/sched_process_fork")
int BPF_PROG(joule_proc_fork, struct task_struct *parent, struct task_struct *child)
{
	if (watch_creds) {
		/* The child's uid before it runs: a setuid in its very first syscall is a change too. */
		__u32 uid = real_uid(child);
		bpf_task_storage_get(&task_uid, child, &uid, BPF_LOCAL_STORAGE_GET_F_CREATE);
	}
	if (!is_leader(child))
		return 0; /* a new thread, not a process */
	/* The child's parent is real_parent: a CLONE_PARENT fork's is the forker's parent. */
	struct task_struct *rp = BPF_CORE_READ(child, real_parent);
	__u32 ppid = BPF_CORE_READ(rp, tgid);
	if (!filtering) {
		send(JOULE_PROC_FORK, child, ppid, 0, 0, 0);
		return 0;
	}
	if (filter_on) {
		/* A child starts as its forker is (name, exe, uid, cgroups) and follows its parent,
		 * the same process but for a CLONE_PARENT fork (a container runtime's last init stage,
		 * made in the pod's cgroup, is runc's child). A process nobody follows is in no class:
		 * when neither is followed the child can be in none either, but for a pid rule. The
		 * agent's own children are never members, whatever they match, so they are sent too. */
		struct joule_proc_track *pe = tracked(ppid, start_ticks(rp));
		bool from_followed = followed(pe) && !(flags_of(pe) & JOULE_TRACK_NOFOLLOW);
		__u32 forker = BPF_CORE_READ(parent, tgid);
		if (!from_followed && forker != ppid) {
			struct joule_proc_track *fe = tracked(forker, start_ticks(parent));
			from_followed = followed(fe) && !(flags_of(fe) & JOULE_TRACK_NOFOLLOW);
		}
		if (!from_followed && ppid != self_tgid) {
			struct joule_proc_comm k = {};
			leader_comm(child, &k);
			if (!candidate(child, rules.pid, &k, 0, 0)) {
				dropped(JOULE_PROC_FORK);
				return 0;
			}
		}
	}
	__u32 tgid = BPF_CORE_READ(child, tgid);
	__u64 seq = create(tgid, start_ticks(child));
	send(JOULE_PROC_FORK, child, ppid, 0, 0, seq);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(joule_proc_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	if (!filtering) {
		send(JOULE_PROC_EXEC, p, 0, 0, 0, 0);
		return 0;
	}
	__u32 tgid = BPF_CORE_READ(p, tgid);
	__u64 ticks = start_ticks(p);
	struct joule_proc_track *e = tracked(tgid, ticks);
	if (filter_on && !followed(e)) {
		/* A new name and a new exe: only a class with a comm or an exe rule can now take it.
		 * The file it runs (an interpreter's, for a script) is /proc/PID/exe: a rule's path
		 * can only match where its basename is the file's name. */
		struct joule_proc_comm k = {};
		struct joule_proc_cg_name x = {};
		leader_comm(p, &k);
		bpf_probe_read_kernel_str(x.name, sizeof(x.name), BPF_CORE_READ(bprm, file, f_path.dentry, d_name.name));
		if (!candidate(p, rules.comm | rules.exe, &k, &x, 0)) {
			dropped(JOULE_PROC_EXEC);
			return 0;
		}
	}
	__u32 flags = 0;
	__u64 seq = touch(tgid, ticks, e, &flags);
	if (has_children(p))
		flags |= JOULE_PROC_F_CHILDREN;
	send(JOULE_PROC_EXEC, p, 0, 0, flags, seq);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(joule_proc_exit, struct task_struct *p, bool group_dead)
{
	/* The process ends with its last thread (which need not be the leader: the leader may
	 * have left first); do_exit has counted it down before this tracepoint. */
	if (BPF_CORE_READ(p, signal, live.counter) != 0)
		return 0;
	if (!filtering) {
		send(JOULE_PROC_EXIT, p, 0, 0, 0, 0);
		return 0;
	}
	__u32 tgid = BPF_CORE_READ(p, tgid);
	struct joule_proc_track *e = bpf_map_lookup_elem(&proc_track, &tgid);
	bool was_followed = followed(e) && e->start_ticks == start_ticks(p);
	if (e && e->start_ticks == start_ticks(p))
		bpf_map_delete_elem(&proc_track, &tgid);
	__u32 flags = 0;
	__u64 head = (__u64)p + bpf_core_field_offset(struct task_struct, children);
	if ((__u64)BPF_CORE_READ(p, children.next) != head) {
		flags |= JOULE_PROC_F_CHILDREN;
		if (orphans_followed(p))
			flags |= JOULE_PROC_F_ORPHANS_FOLLOWED;
	}
	/* Only a followed process's exit can change a class (a member's, a kept one's), and an
	 * unfollowed one's whose children a followed reaper takes in. */
	if (filter_on && !was_followed && !(flags & JOULE_PROC_F_ORPHANS_FOLLOWED)) {
		dropped(JOULE_PROC_EXIT);
		return 0;
	}
	send(JOULE_PROC_EXIT, p, 0, 0, flags, 0);
	return 0;
}

SEC("tp_btf/task_rename")
int BPF_PROG(joule_proc_rename, struct task_struct *t, const char *comm)
{
	if (!is_leader(t))
		return 0; /* /proc/PID/comm is the leader's */
	if (!filtering) {
		send(JOULE_PROC_RENAME, t, 0, comm, 0, 0);
		return 0;
	}
	__u32 tgid = BPF_CORE_READ(t, tgid);
	__u64 ticks = start_ticks(t);
	struct joule_proc_track *e = tracked(tgid, ticks);
	if (filter_on) {
		/* A member keeps its class whatever it is called; anyone else can only be taken by a
		 * class whose comm rule names the new name. */
		struct joule_proc_comm k = {};
		bpf_probe_read_kernel_str(k.comm, sizeof(k.comm), comm);
		if ((followed(e) && (flags_of(e) & JOULE_TRACK_MEMBER)) || !candidate(t, rules.comm, &k, 0, 0)) {
			dropped(JOULE_PROC_RENAME);
			return 0;
		}
	}
	__u32 flags = 0;
	__u64 seq = touch(tgid, ticks, e, &flags);
	if (has_children(t))
		flags |= JOULE_PROC_F_CHILDREN;
	send(JOULE_PROC_RENAME, t, 0, comm, flags, seq);
	return 0;
}

SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(joule_proc_cgroup, struct cgroup *dst, const char *path, struct task_struct *t, bool threadgroup)
{
	if (!filtering) {
		send(JOULE_PROC_CGROUP, t, 0, 0, 0, 0);
		return 0;
	}
	__u32 tgid = BPF_CORE_READ(t, tgid);
	__u64 ticks = start_ticks(t);
	struct joule_proc_track *e = tracked(tgid, ticks);
	if (filter_on && !followed(e)) {
		/* Cgroups decide cgroup, unit and slice rules, and whether a process is in a pod
		 * (pod classes hold only those, the others only the rest): any class may take it. */
		struct joule_proc_comm k = {};
		leader_comm(t, &k);
		/* Read back through its own css: a plain value, as joule_marks_up takes (a global
		 * function accepts no trusted pointer). */
		struct cgroup *d = BPF_CORE_READ(dst, self.cgroup);
		if (!candidate(t, ~0ULL, &k, 0, d)) {
			dropped(JOULE_PROC_CGROUP);
			return 0;
		}
	}
	__u32 flags = 0;
	__u64 seq = touch(tgid, ticks, e, &flags);
	if (has_children(t))
		flags |= JOULE_PROC_F_CHILDREN;
	send(JOULE_PROC_CGROUP, t, 0, 0, flags, seq);
	return 0;
}

/* A change of a task's real uid, seen at the exit of the syscall that made it, whichever it was:
 * setuid, setreuid, setresuid, their 32-bit compat forms (setuid32, a 32-bit program on a 64-bit
 * kernel), or a call added later. It compares the uid with the one the task had at its previous
 * syscall, so no syscall number, register layout or architecture is involved. */
SEC("tp_btf/sys_exit")
int BPF_PROG(joule_proc_creds, struct pt_regs *regs, long ret)
{
	struct task_struct *t = bpf_get_current_task_btf();
	__u32 uid = real_uid(t);
	__u32 *seen = bpf_task_storage_get(&task_uid, t, &uid, BPF_LOCAL_STORAGE_GET_F_CREATE);
	if (!seen || *seen == uid)
		return 0;
	*seen = uid;
	if (!filtering) {
		send(JOULE_PROC_CREDS, t, 0, 0, 0, 0);
		return 0;
	}
	__u32 tgid = BPF_CORE_READ(t, tgid);
	__u64 ticks = start_ticks(t);
	struct joule_proc_track *e = tracked(tgid, ticks);
	if (filter_on && !followed(e)) {
		/* Only a class with a uid rule can take a process nobody follows for its new uid
		 * (a kept child of a member, which may follow its parent again, is followed). */
		struct joule_proc_comm k = {};
		leader_comm(t, &k);
		if (!candidate(t, rules.uid, &k, 0, 0)) {
			dropped(JOULE_PROC_CREDS);
			return 0;
		}
	}
	__u32 flags = 0;
	__u64 seq = touch(tgid, ticks, e, &flags);
	if (has_children(t))
		flags |= JOULE_PROC_F_CHILDREN;
	send(JOULE_PROC_CREDS, t, 0, 0, flags, seq);
	return 0;
}

/* A cgroup made or renamed under a name a rule names is marked before any task can be in it. */
static __always_inline void mark(struct cgroup *cgrp)
{
	if (!filtering || !rules.cgroup)
		return;
	struct joule_proc_cg_name k = {};
	bpf_probe_read_kernel_str(k.name, sizeof(k.name), BPF_CORE_READ(cgrp, kn, name));
	__u64 *bits = bpf_map_lookup_elem(&rule_cg_names, &k);
	if (!bits)
		return;
	__u64 id = BPF_CORE_READ(cgrp, kn, id);
	__u64 v = *bits;
	__u64 *had = bpf_map_lookup_elem(&cg_marks, &id);
	if (had)
		v |= *had;
	if (bpf_map_update_elem(&cg_marks, &id, &v, BPF_ANY)) {
		marks_full = 1;
		return;
	}
	__u32 hid = BPF_CORE_READ(cgrp, root, hierarchy_id);
	int level = BPF_CORE_READ(cgrp, level);
	__sync_fetch_and_or(&marked_hiers, 1ULL << (hid < 63 ? hid : 63));
	__sync_fetch_and_or(&marked_levels, 1ULL << (level < 63 && level >= 0 ? level : 63));
}

SEC("tp_btf/cgroup_mkdir")
int BPF_PROG(joule_proc_cg_mkdir, struct cgroup *cgrp, const char *path)
{
	mark(cgrp);
	return 0;
}

SEC("tp_btf/cgroup_rename")
int BPF_PROG(joule_proc_cg_rename, struct cgroup *cgrp, const char *path)
{
	mark(cgrp);
	return 0;
}

SEC("tp_btf/cgroup_rmdir")
int BPF_PROG(joule_proc_cg_rmdir, struct cgroup *cgrp, const char *path)
{
	if (!filtering || !rules.cgroup)
		return 0;
	__u64 id = BPF_CORE_READ(cgrp, kn, id);
	bpf_map_delete_elem(&cg_marks, &id);
	return 0;
}

static long settle_one(__u64 i, void *ctx)
{
	if (i >= JOULE_PROC_SETTLE_MAX)
		return 1;
	struct joule_proc_settle *s = &settle_queue[i];
	__u32 pid = s->pid;
	struct joule_proc_track *e = bpf_map_lookup_elem(&proc_track, &pid);
	if (s->op == JOULE_SETTLE_FORGET) {
		if (e && e->start_ticks == s->start_ticks)
			bpf_map_delete_elem(&proc_track, &pid);
		return 0;
	}
	if (!e) {
		/* seq 0: a process user space found itself (a walk of /proc) and follows from now on. */
		if (s->seq == 0 && !(s->flags & JOULE_TRACK_PRUNED)) {
			struct joule_proc_track n = { .start_ticks = s->start_ticks, .state = (1ULL << JOULE_TRACK_SEQ_SHIFT) | s->flags };
			bpf_map_update_elem(&proc_track, &pid, &n, BPF_NOEXIST);
		}
		return 0;
	}
	if (e->start_ticks != s->start_ticks || s->seq == 0)
		return 0;
	__u64 old = e->state;
	if ((old >> JOULE_TRACK_SEQ_SHIFT) != s->seq)
		return 0; /* an event user space has not read yet came since: it decides again then */
	__sync_val_compare_and_swap(&e->state, old, (old & ~(__u64)JOULE_TRACK_FLAGS_MASK) | s->flags);
	return 0;
}

/* Run by user space (BPF_PROG_TEST_RUN) after it wrote settle_queue[0..settle_len): one
 * syscall for a whole period's decisions. */
SEC("syscall")
int joule_proc_settle(void *ctx)
{
	__u32 n = settle_len;
	if (n > JOULE_PROC_SETTLE_MAX)
		n = JOULE_PROC_SETTLE_MAX;
	bpf_loop(n, settle_one, 0, 0);
	return 0;
}
