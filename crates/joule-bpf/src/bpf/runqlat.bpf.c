/* Run-queue latency (wake-up -> on CPU) per cgroup, as log-linear histograms, and per thread,
 * as cumulative wait; user space reads both and differences them. The kernel never resets
 * them, so a reader can never lose a race with it. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "intf.h"

char LICENSE[] SEC("license") = "GPL";

#define TASK_RUNNING 0

/* Set by user space before load: enum joule_hierarchy. */
const volatile __u32 hierarchy = JOULE_HIER_V1_CPU;

/* pid -> time it became runnable (ns). */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_RUNQ_MAX_PENDING);
	__type(key, __u32);
	__type(value, __u64);
} start SEC(".maps");

/* cgroup kernfs id -> histogram. Per-CPU so sched_switch needs no atomics; not preallocated
 * because an entry is ~2 KiB per CPU and most machines use far fewer cgroups than the limit
 * (user space sets max_entries). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_HASH);
	__uint(max_entries, JOULE_RUNQ_MAX_CGROUPS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, __u64);
	__type(value, struct joule_runq_hist);
} hists SEC(".maps");

/* tid -> cumulative wait of that thread: O(live threads that waited since load) to read, unlike
 * walking /proc/PID/task/TID/schedstat. sched_process_exit deletes an exited thread's entry;
 * LRU is the safety net when more live threads wait than the map holds (the least recently
 * waiting make room). LRU maps are preallocated: ~100 bytes of kernel memory per entry (user
 * space sets max_entries). */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, JOULE_RUNQ_MAX_TASKS);
	__type(key, __u32);
	__type(value, struct joule_task_wait);
} task_waits SEC(".maps");

/* Initial value for a new cgroup's histogram (too big for the BPF stack). */
static struct joule_runq_hist zero_hist;

/* Kernels before 5.14 called the field `state`. */
struct task_struct___pre514 {
	long state;
} __attribute__((preserve_access_index));

static __always_inline long task_state(struct task_struct *p)
{
	if (bpf_core_field_exists(p->__state))
		return BPF_CORE_READ(p, __state);
	return BPF_CORE_READ((struct task_struct___pre514 *)p, state);
}

static __always_inline __u32 log2_u64(__u64 v)
{
	__u32 r = 0, shift;

	shift = (v > 0xffffffffULL) << 5; v >>= shift; r |= shift;
	shift = (v > 0xffff) << 4; v >>= shift; r |= shift;
	shift = (v > 0xff) << 3; v >>= shift; r |= shift;
	shift = (v > 0xf) << 2; v >>= shift; r |= shift;
	shift = (v > 0x3) << 1; v >>= shift; r |= shift;
	r |= (v >> 1);
	return r;
}

/* The slot layout is documented with enum joule_hist in intf.h. */
static __always_inline __u32 hist_slot(__u64 v)
{
	__u32 m, slot;

	if (v < JOULE_HIST_SUB)
		return v;
	m = log2_u64(v);
	if (m >= JOULE_HIST_MAX_LOG2)
		return JOULE_HIST_SLOTS - 1;
	slot = ((m - JOULE_HIST_SUB_BITS + 1) << JOULE_HIST_SUB_BITS) |
	       ((v >> (m - JOULE_HIST_SUB_BITS)) & (JOULE_HIST_SUB - 1));
	return slot < JOULE_HIST_SLOTS ? slot : JOULE_HIST_SLOTS - 1;
}

static __always_inline __u64 task_cgroup_id(struct task_struct *p)
{
	struct cgroup_subsys_state *css;
	struct css_set *cset;
	struct cgroup *cgrp;
	int id;

	if (hierarchy == JOULE_HIER_V1_CPU &&
	    bpf_core_enum_value_exists(enum cgroup_subsys_id, cpu_cgrp_id)) {
		/* Both from the running kernel, not from vmlinux.h: which controllers exist, and so
		 * the ids and the size of subsys[], depends on the kernel's config. */
		id = bpf_core_enum_value(enum cgroup_subsys_id, cpu_cgrp_id);
		if (id < 0 || id >= bpf_core_enum_value(enum cgroup_subsys_id, CGROUP_SUBSYS_COUNT))
			return 0;
		cset = BPF_CORE_READ(p, cgroups);
		if (bpf_core_read(&css, sizeof(css), &cset->subsys[id]))
			return 0;
		cgrp = BPF_CORE_READ(css, cgroup);
	} else {
		cgrp = BPF_CORE_READ(p, cgroups, dfl_cgrp);
	}
	return BPF_CORE_READ(cgrp, kn, id);
}

static __always_inline void mark_runnable(struct task_struct *p)
{
	__u32 pid = BPF_CORE_READ(p, pid);
	__u64 ts;

	if (!pid) /* the idle task never waits */
		return;
	ts = bpf_ktime_get_ns();
	bpf_map_update_elem(&start, &pid, &ts, BPF_ANY);
}

SEC("tp_btf/sched_wakeup")
int BPF_PROG(joule_sched_wakeup, struct task_struct *p)
{
	mark_runnable(p);
	return 0;
}

SEC("tp_btf/sched_wakeup_new")
int BPF_PROG(joule_sched_wakeup_new, struct task_struct *p)
{
	mark_runnable(p);
	return 0;
}

/* A thread exits: free its entry now rather than when the LRU gets to it, so the map (which
 * user space reads whole) holds live threads only, and a reused tid starts a fresh entry with
 * its own comm and tgid. Once per thread exit, off the sched_switch path. */
SEC("tp_btf/sched_process_exit")
int BPF_PROG(joule_sched_process_exit, struct task_struct *p)
{
	__u32 pid = BPF_CORE_READ(p, pid);

	bpf_map_delete_elem(&task_waits, &pid);
	return 0;
}

/* The name of a thread changes after its first wait (a new thread inherits its creator's comm
 * until it calls prctl(PR_SET_NAME); exec renames too): keep the entry's comm current here
 * rather than copying comm on every sched_switch. */
SEC("tp_btf/task_rename")
int BPF_PROG(joule_sched_rename, struct task_struct *task, const char *comm)
{
	struct joule_task_wait *tw;
	__u32 pid = BPF_CORE_READ(task, pid);

	tw = bpf_map_lookup_elem(&task_waits, &pid);
	if (tw)
		bpf_probe_read_kernel_str(tw->comm, sizeof(tw->comm), comm);
	return 0;
}

/* Adds one finished wait of `p` to its thread's entry: a lookup and one atomic add, or, for a
 * thread's first wait, one insert (comm and tgid are read only then). */
static __always_inline void account_task_wait(struct task_struct *p, __u32 pid, __u64 delta_ns)
{
	struct joule_task_wait *tw, init = {};

	tw = bpf_map_lookup_elem(&task_waits, &pid);
	if (!tw) {
		init.wait_ns = delta_ns;
		init.tgid = BPF_CORE_READ(p, tgid);
		BPF_CORE_READ_STR_INTO(&init.comm, p, comm);
		/* Only this CPU switches `p` in, so nothing races this insert; if the LRU cannot
		 * allocate, this one wait goes uncounted. */
		bpf_map_update_elem(&task_waits, &pid, &init, BPF_NOEXIST);
		return;
	}
	__sync_fetch_and_add(&tw->wait_ns, delta_ns);
}

SEC("tp_btf/sched_switch")
int BPF_PROG(joule_sched_switch, bool preempt, struct task_struct *prev, struct task_struct *next)
{
	struct joule_runq_hist *h;
	__u64 *tsp, delta_ns, cg;
	__u32 pid, slot;

	/* Preempted while runnable: it waits in the run queue again from now. */
	if (task_state(prev) == TASK_RUNNING)
		mark_runnable(prev);

	pid = BPF_CORE_READ(next, pid);
	tsp = bpf_map_lookup_elem(&start, &pid);
	if (!tsp)
		return 0;
	delta_ns = bpf_ktime_get_ns() - *tsp;
	bpf_map_delete_elem(&start, &pid);
	if ((__s64)delta_ns < 0)
		return 0;

	account_task_wait(next, pid, delta_ns);

	cg = task_cgroup_id(next);
	h = bpf_map_lookup_elem(&hists, &cg);
	if (!h) {
		bpf_map_update_elem(&hists, &cg, &zero_hist, BPF_NOEXIST);
		h = bpf_map_lookup_elem(&hists, &cg);
		if (!h)
			return 0;
	}
	slot = hist_slot(delta_ns);
	if (slot >= JOULE_HIST_SLOTS)
		return 0;
	h->slots[slot]++;
	if (delta_ns > h->max_ns)
		h->max_ns = delta_ns;
	return 0;
}
