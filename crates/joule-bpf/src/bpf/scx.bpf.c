/* Mechanism 1's scheduler half: a sched_ext scheduler that reads the thermal stage from the
 * very `thermal_stage` map thermal.bpf.c writes (user space hands the pinned map's fd over
 * before load), so a hotter machine is scheduled differently with no user-space hop.
 *
 * Tasks are scored from how they behave (sleep/wake pattern, length of their runs, time spent
 * waiting for a CPU) and from their class into JOULE_SCX_SCORE_DSQS custom DSQs, queue 0 the
 * best. A labelled queue (cgroups user space puts in `labelled`) is served first at every
 * stage. Tasks of best-effort cgroups (`best_effort`) rank one queue lower, and their CPU hogs
 * go to a best-effort queue served last, at most the stage's share of the machine per 100 ms
 * window: past it the CPUs go idle rather than run them (idle injected, so the package cools).
 * At stage 0 every score queue is served round-robin with the longest slice and the share is
 * unlimited; as the stage rises, the per-stage table serves fewer queues round-robin (the
 * low-score ones only once nothing better waits: no CPU idles while a task outside the
 * best-effort class waits), shortens the slice and cuts the best-effort share. Aging bounds
 * every wait:
 * a queue that was not served for age_ns has its whole backlog served anyway, and a timer
 * kicks idle CPUs so an aged queue is noticed, so the kernel's watchdog never has a reason to
 * eject us. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "intf.h"
#include "thermal_stage_map.h"

char LICENSE[] SEC("license") = "GPL";

/* The sched_ext kfuncs used here, as the 7.3 kernel's BTF declares them (not in vmlinux.h). */
s32 scx_bpf_create_dsq(u64 dsq_id, s32 node) __ksym;
void scx_bpf_dsq_insert(struct task_struct *p, u64 dsq_id, u64 slice, u64 enq_flags) __ksym;
bool scx_bpf_dsq_move_to_local(u64 dsq_id) __ksym;
s32 scx_bpf_dsq_nr_queued(u64 dsq_id) __ksym;
void scx_bpf_kick_cpu(s32 cpu, u64 flags) __ksym;
s32 scx_bpf_select_cpu_dfl(struct task_struct *p, s32 prev_cpu, u64 wake_flags, bool *is_idle) __ksym;

#define BPF_STRUCT_OPS(name, args...) SEC("struct_ops/" #name) BPF_PROG(name, ##args)
#define BPF_STRUCT_OPS_SLEEPABLE(name, args...) SEC("struct_ops.s/" #name) BPF_PROG(name, ##args)

/* Set from Rust before load (ScxOpts). Zeros are guarded so an unset table still schedules. */
const volatile struct joule_scx_stage_cfg stage_cfg[JOULE_SCX_STAGE_ROWS];
const volatile __u64 age_ns = 100000000ULL;      /* a waiting queue is served after this */
const volatile __u64 be_age_ns = 1000000000ULL; /* the same for the best-effort queue */
const volatile __u64 wait_boost_ns = 10000000ULL; /* a task that waits this long ranks up */
const volatile __u32 nr_cpus = 1;                 /* possible CPUs, for the aging timer's kicks */
const volatile __u32 nr_online_cpus = 1;          /* online CPUs at load: the best-effort budget's base */

/* JOULE_SCX_SCORE_DSQS is small; a CPU loop bound the verifier can walk. */
#define MAX_KICK_CPUS 512
#define DEFAULT_SLICE_NS 5000000ULL
#define MSEC 1000000ULL
#define CLOCK_MONOTONIC 1 /* uapi linux/time.h; vmlinux.h has no macros */
#define BE_WINDOW_NS ((__u64)JOULE_SCX_BE_WINDOW_MS * MSEC)
/* The timer's period: short enough that a CPU left idle by a spent best-effort budget is
 * kicked soon after the next window opens, and an aged queue soon after it ages. */
#define TICK_NS (10 * MSEC)
/* Slots of the per-queue aging state: every custom DSQ, rounded up to a power of two so an
 * index can be masked for the verifier. */
#define AGE_SLOTS 8
_Static_assert(JOULE_SCX_NR_DSQS <= AGE_SLOTS, "one aging slot per DSQ");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct joule_scx_stats);
} scx_stats SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct joule_scx_exit);
} scx_exit SEC(".maps");

/* cgroup ids of the labelled classes (v2 default hierarchy, the cgroup directory's inode
 * number) -> unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u32);
} labelled SEC(".maps");

/* cgroup ids of the best-effort classes -> unused. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u32);
} best_effort SEC(".maps");

/* What the score is computed from, per task; exponentially weighted (1/4 per sample). */
struct task_ctx {
	__u64 ready_ns;     /* when it last became ready to run (woken or put back) */
	__u64 start_ns;     /* when it last started running */
	__u64 wait_ewma_ns; /* time ready but not running */
	__u64 run_ewma_ns;  /* length of a run */
	__u32 sleep_ewma;   /* share of runs that ended in a sleep, 0..1024 */
	__u32 cls;          /* enum task_class, refreshed each time it starts running */
	__u64 charged_ns;   /* best-effort budget charged when its current run started (0: none) */
};

/* A task's class, from the cgroups user space put in `labelled` / `best_effort`: the task's
 * own cgroup or one of its CLASS_DEPTH - 1 nearest ancestors (a class's sub-cgroups belong
 * to it). */
enum task_class {
	CLS_NORMAL = 0,
	CLS_LABELLED = 1,
	CLS_BEST_EFFORT = 2,
};
#define CLASS_DEPTH 4

struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, struct task_ctx);
} task_ctxs SEC(".maps");

struct aging_timer {
	struct bpf_timer timer;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct aging_timer);
} scx_timer SEC(".maps");

/* When each score queue was last served, or became non-empty (so an empty queue does not look
 * starved the moment a task arrives). Racy across CPUs by design: a lost update only shifts
 * one aging decision by one dispatch. */
__u64 queue_since_ns[AGE_SLOTS];
/* Tasks an aged queue still has to hand out before its clock restarts: every task that was in
 * it when it aged, so one aging serves the whole backlog, not one task per age_ns. */
__s32 aged_left[AGE_SLOTS];
__u32 rr_cursor;
/* The best-effort budget's window: when it opened, and the CPU time best-effort tasks used in
 * it (all CPUs): each run is charged its slice (or its usual run length, when longer) when
 * it starts, so the other CPUs see it at once, and settled with what it really ran when it stops (a run lasts until the next tick,
 * often past its slice). What a window overdrew is carried into the next one (at most one
 * window's budget). Racy by design like the above: a lost update shifts one window. */
__u64 be_window_start_ns;
__s64 be_used_ns;

static __always_inline struct joule_scx_stats *stats(void)
{
	__u32 zero = 0;

	return bpf_map_lookup_elem(&scx_stats, &zero);
}

static __always_inline __u32 current_stage(void)
{
	__u32 zero = 0, stage = 0;
	struct joule_stage *st = bpf_map_lookup_elem(&thermal_stage, &zero);

	if (st)
		stage = st->stage;
	return stage > JOULE_MAX_STAGES ? JOULE_MAX_STAGES : stage;
}

static __always_inline __u32 served_queues(__u32 stage)
{
	__u32 n;

	if (stage > JOULE_MAX_STAGES)
		stage = JOULE_MAX_STAGES;
	n = stage_cfg[stage].queues;
	if (n == 0 || n > JOULE_SCX_SCORE_DSQS)
		n = JOULE_SCX_SCORE_DSQS;
	return n;
}

static __always_inline __u64 slice_ns(__u32 stage)
{
	__u64 us;

	if (stage > JOULE_MAX_STAGES)
		stage = JOULE_MAX_STAGES;
	us = stage_cfg[stage].slice_us;
	return us ? us * 1000 : DEFAULT_SLICE_NS;
}

/* The best-effort budget of this stage's window in ns of CPU time, or 0 when unlimited. */
static __always_inline __u64 be_budget_ns(__u32 stage)
{
	__u32 permille;

	if (stage > JOULE_MAX_STAGES)
		stage = JOULE_MAX_STAGES;
	permille = stage_cfg[stage].best_effort_permille;
	if (permille == 0 || permille >= 1000)
		return 0;
	return BE_WINDOW_NS * nr_online_cpus * permille / 1000;
}

/* True while best-effort tasks may be dispatched at `stage`: an unlimited stage, or budget
 * left in the current window (which opens anew every BE_WINDOW_NS). */
static __always_inline bool be_allowed(__u32 stage, __u64 now)
{
	__u64 budget = be_budget_ns(stage);
	__u64 start = be_window_start_ns;

	if (!budget)
		return true;
	if ((__s64)(now - start) >= (__s64)BE_WINDOW_NS &&
	    __sync_bool_compare_and_swap(&be_window_start_ns, start, now)) {
		__s64 debt = be_used_ns - (__s64)budget;

		be_used_ns = debt < 0 ? 0 : (debt > (__s64)budget ? (__s64)budget : debt);
	}
	return be_used_ns < (__s64)budget;
}

static __always_inline __u64 ewma(__u64 old, __u64 sample)
{
	return old - (old >> 2) + (sample >> 2);
}

/* Higher score, lower queue index. A task earns points for sleeping between runs (I/O-bound,
 * interactive), for short runs, and for having waited long for a CPU (the seed's one axis,
 * kept as a boost so a starved task climbs instead of sinking); a CPU hog earns none. */
static __always_inline __u32 score_queue(const struct task_ctx *c)
{
	__u32 points = 0;

	if (c->sleep_ewma >= 512)
		points += 2;
	else if (c->sleep_ewma >= 128)
		points += 1;
	if (c->run_ewma_ns < MSEC)
		points += 1;
	if (c->wait_ewma_ns >= wait_boost_ns)
		points += 1;
	if (points > JOULE_SCX_SCORE_DSQS - 1)
		points = JOULE_SCX_SCORE_DSQS - 1;
	return JOULE_SCX_SCORE_DSQS - 1 - points;
}

/* Looked up when a task is created and each time it starts running (a few hash lookups),
 * then read from its task_ctx by the hotter enqueue and select_cpu paths. */
static __always_inline __u32 task_class(struct task_struct *p)
{
	struct kernfs_node *kn = BPF_CORE_READ(p, cgroups, dfl_cgrp, kn);
	__u32 i;

	for (i = 0; i < CLASS_DEPTH && kn; i++) {
		__u64 id = BPF_CORE_READ(kn, id);

		if (bpf_map_lookup_elem(&labelled, &id))
			return CLS_LABELLED;
		if (bpf_map_lookup_elem(&best_effort, &id))
			return CLS_BEST_EFFORT;
		kn = BPF_CORE_READ(kn, __parent);
	}
	return CLS_NORMAL;
}

/* The DSQ a task goes to: its class first (labelled: the always-served queue), then its score.
 * A best-effort task ranks one queue lower and its CPU hogs go to the best-effort queue; at a
 * stage with a best-effort budget the whole class goes there, as the cgroup path's quota caps
 * the whole class: a throttled hog waits long, and the wait boost would otherwise lift it into
 * a score queue the budget does not gate. */
static __always_inline __u32 task_queue(const struct task_ctx *c, __u32 stage)
{
	__u32 q;

	if (!c)
		return JOULE_SCX_SCORE_DSQS - 1;
	q = score_queue(c);
	if (c->cls == CLS_LABELLED)
		return JOULE_SCX_DSQ_LABELLED;
	if (c->cls != CLS_BEST_EFFORT)
		return q;
	if (be_budget_ns(stage))
		return JOULE_SCX_DSQ_BEST_EFFORT;
	return q + 1 >= JOULE_SCX_SCORE_DSQS ? JOULE_SCX_DSQ_BEST_EFFORT : q + 1;
}

/* Whether queue q is served first at `stage` (a task of it may go straight to an idle CPU). */
static __always_inline bool queue_served(__u32 q, __u32 stage, __u64 now)
{
	if (q == JOULE_SCX_DSQ_LABELLED)
		return true;
	if (q == JOULE_SCX_DSQ_BEST_EFFORT)
		return be_allowed(stage, now);
	return q < served_queues(stage);
}

static __always_inline struct task_ctx *task_ctx(struct task_struct *p)
{
	return bpf_task_storage_get(&task_ctxs, p, 0, 0);
}

s32 BPF_STRUCT_OPS(joule_select_cpu, struct task_struct *p, s32 prev_cpu, u64 wake_flags)
{
	struct joule_scx_stats *s;
	struct task_ctx *c;
	bool is_idle = false;
	__u32 stage;
	s32 cpu;

	__u64 now;

	cpu = scx_bpf_select_cpu_dfl(p, prev_cpu, wake_flags, &is_idle);
	if (!is_idle)
		return cpu;
	/* Straight onto an idle CPU only when its queue is served at this stage: a throttled
	 * queue (or a spent best-effort budget) must not be bypassed by waking onto an idle CPU. */
	stage = current_stage();
	c = task_ctx(p);
	now = bpf_ktime_get_ns();
	if (c && !queue_served(task_queue(c, stage), stage, now))
		return cpu;
	if (c)
		c->ready_ns = now;
	scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns(stage), 0);
	s = stats();
	if (s)
		s->direct++;
	return cpu;
}

void BPF_STRUCT_OPS(joule_enqueue, struct task_struct *p, u64 enq_flags)
{
	struct joule_scx_stats *s = stats();
	struct task_ctx *c = task_ctx(p);
	__u64 now = bpf_ktime_get_ns();
	__u32 stage = current_stage();
	__u32 q = task_queue(c, stage);

	if (c)
		c->ready_ns = now;
	/* The last runnable task of a CPU whose slice ran out (SCX_OPS_ENQ_LAST): keep it running,
	 * as the kernel would without the flag, unless it is a best-effort hog past its budget:
	 * then it is queued, and the CPU goes idle. */
	if ((enq_flags & SCX_ENQ_LAST) && (q != JOULE_SCX_DSQ_BEST_EFFORT || be_allowed(stage, now))) {
		scx_bpf_dsq_insert(p, SCX_DSQ_LOCAL, slice_ns(stage), enq_flags);
		if (s)
			s->enqueued++;
		return;
	}
	if (q != JOULE_SCX_DSQ_LABELLED && q < AGE_SLOTS && scx_bpf_dsq_nr_queued(q) == 0)
		queue_since_ns[q] = now;
	scx_bpf_dsq_insert(p, q, slice_ns(stage), enq_flags);
	if (s)
		s->enqueued++;
}

_Static_assert((AGE_SLOTS & (AGE_SLOTS - 1)) == 0, "serve() masks a queue index");

/* Moves the first task of queue q (a score queue or the best-effort one) to this CPU. */
static __always_inline bool serve(__u64 q, __u64 now, bool aged, struct joule_scx_stats *s)
{
	/* Hide what clang knows about q (a modulo) and mask it, so the verifier, which cannot
	 * bound a modulo by a variable, sees the array index bounded. q is already in range. */
	asm volatile("" : "+r"(q));
	q &= AGE_SLOTS - 1;
	if (!scx_bpf_dsq_move_to_local(q))
		return false;
	if (!aged || __sync_fetch_and_add(&aged_left[q], -1) <= 1) {
		aged_left[q] = 0;
		queue_since_ns[q] = now;
	}
	if (s) {
		if (q < JOULE_SCX_NR_DSQS)
			s->dispatched[q]++;
		if (aged)
			s->aged++;
	}
	return true;
}

/* How long queue q may wait before aging serves it. The best-effort queue waits longer: a
 * spent budget holds it back by design, and aging it every age_ns would hand each of its tasks
 * a run per age_ns past the budget. */
static __always_inline __u64 queue_age_ns(__u32 q)
{
	return q == JOULE_SCX_DSQ_BEST_EFFORT ? be_age_ns : age_ns;
}

static __always_inline bool serve_labelled(struct joule_scx_stats *s)
{
	if (!scx_bpf_dsq_move_to_local(JOULE_SCX_DSQ_LABELLED))
		return false;
	if (s)
		s->dispatched[JOULE_SCX_DSQ_LABELLED]++;
	return true;
}

void BPF_STRUCT_OPS(joule_dispatch, s32 cpu, struct task_struct *prev)
{
	struct joule_scx_stats *s = stats();
	__u64 now = bpf_ktime_get_ns();
	__u32 stage = current_stage(), n, start, q, k;

	if (s) {
		s->stage = stage;
		s->stage_seen_ns = now;
	}
	if (serve_labelled(s))
		return;
	/* Aging first, whatever the stage and budget: a queue that has waited past age_ns is
	 * served until its backlog at that moment has gone. Signed: another CPU may have stamped
	 * the queue after this one read the clock. */
	for (q = 0; q < JOULE_SCX_NR_DSQS; q++) {
		s32 nr;

		if (q == JOULE_SCX_DSQ_LABELLED)
			continue;
		nr = scx_bpf_dsq_nr_queued(q);

		if (nr <= 0) {
			aged_left[q] = 0;
			continue;
		}
		if (aged_left[q] <= 0 && (__s64)(now - queue_since_ns[q]) >= (__s64)queue_age_ns(q))
			aged_left[q] = nr;
		if (aged_left[q] > 0 && serve(q, now, true, s))
			return;
	}
	n = served_queues(stage);
	start = __sync_fetch_and_add(&rr_cursor, 1);
	for (k = 0; k < JOULE_SCX_SCORE_DSQS; k++) {
		if (k >= n)
			break;
		if (serve((start + k) % n, now, false, s))
			return;
	}
	/* The queues this stage does not serve first come next, best first: a CPU never idles
	 * while a task outside the best-effort class waits (work-conserving at every stage). */
	for (q = n; q < JOULE_SCX_SCORE_DSQS; q++)
		if (serve(q, now, false, s))
			return;
	/* Best-effort hogs last, while the stage's budget lasts; else this CPU may go idle. */
	if (scx_bpf_dsq_nr_queued(JOULE_SCX_DSQ_BEST_EFFORT) <= 0)
		return;
	if (queue_served(JOULE_SCX_DSQ_BEST_EFFORT, stage, now))
		serve(JOULE_SCX_DSQ_BEST_EFFORT, now, false, s);
	else if (s)
		s->best_effort_held++;
}

void BPF_STRUCT_OPS(joule_runnable, struct task_struct *p, u64 enq_flags)
{
	struct task_ctx *c = task_ctx(p);

	if (c)
		c->ready_ns = bpf_ktime_get_ns();
}

void BPF_STRUCT_OPS(joule_running, struct task_struct *p)
{
	struct task_ctx *c = task_ctx(p);
	__u64 now = bpf_ktime_get_ns();

	if (!c)
		return;
	if (c->ready_ns && now > c->ready_ns)
		c->wait_ewma_ns = ewma(c->wait_ewma_ns, now - c->ready_ns);
	c->start_ns = now;
	c->cls = task_class(p);
	c->charged_ns = 0;
	if (c->cls == CLS_BEST_EFFORT && be_budget_ns(current_stage())) {
		/* What it will likely run: its slice, or its usual run when that is longer (a run
		 * ends at a tick, not at the slice). */
		c->charged_ns = slice_ns(current_stage());
		if (c->run_ewma_ns > c->charged_ns)
			c->charged_ns = c->run_ewma_ns;
		__sync_fetch_and_add(&be_used_ns, (__s64)c->charged_ns);
	}
}

void BPF_STRUCT_OPS(joule_stopping, struct task_struct *p, bool runnable)
{
	struct task_ctx *c = task_ctx(p);
	__u64 now = bpf_ktime_get_ns();

	if (!c)
		return;
	if (c->start_ns && now > c->start_ns) {
		__u64 ran = now - c->start_ns;
		struct joule_scx_stats *s;

		c->run_ewma_ns = ewma(c->run_ewma_ns, ran);
		if (c->charged_ns) {
			__sync_fetch_and_add(&be_used_ns, (__s64)ran - (__s64)c->charged_ns);
			c->charged_ns = 0;
		}
		if (c->cls == CLS_BEST_EFFORT) {
			s = stats();
			if (s)
				s->best_effort_run_ns += ran;
		}
	}
	/* Not runnable any more: it went to sleep (I/O, a lock, a timer) rather than being
	 * preempted at the end of its slice. */
	c->sleep_ewma = ewma(c->sleep_ewma, runnable ? 0 : 1024);
}

s32 BPF_STRUCT_OPS(joule_init_task, struct task_struct *p, struct scx_init_task_args *args)
{
	/* A new task starts in the middle: it has to sleep to rank up, or hog to rank down. */
	struct task_ctx init = { .sleep_ewma = 256, .run_ewma_ns = MSEC };
	struct task_ctx *c = bpf_task_storage_get(&task_ctxs, p, &init, BPF_LOCAL_STORAGE_GET_F_CREATE);

	if (!c)
		return -12; /* -ENOMEM */
	c->cls = task_class(p);
	return 0;
}

/* Kicks idle CPUs while any queue holds tasks, so an aged queue is served even when every CPU
 * went idle at a stage that does not serve it. */
static int aging_tick(void *map, int *key, struct bpf_timer *timer)
{
	bool waiting = false;
	__u32 q, cpu;

	for (q = 0; q < JOULE_SCX_NR_DSQS; q++)
		if (scx_bpf_dsq_nr_queued(q) > 0)
			waiting = true;
	if (waiting)
		for (cpu = 0; cpu < MAX_KICK_CPUS && cpu < nr_cpus; cpu++)
			scx_bpf_kick_cpu(cpu, SCX_KICK_IDLE);
	bpf_timer_start(timer, TICK_NS, 0);
	return 0;
}

s32 BPF_STRUCT_OPS_SLEEPABLE(joule_init)
{
	struct aging_timer *t;
	__u32 zero = 0, q;
	s32 err;

	for (q = 0; q < JOULE_SCX_NR_DSQS; q++) {
		err = scx_bpf_create_dsq(q, -1);
		if (err)
			return err;
	}
	t = bpf_map_lookup_elem(&scx_timer, &zero);
	if (!t)
		return -2; /* -ENOENT */
	bpf_timer_init(&t->timer, &scx_timer, CLOCK_MONOTONIC);
	bpf_timer_set_callback(&t->timer, aging_tick);
	return bpf_timer_start(&t->timer, TICK_NS, 0);
}

void BPF_STRUCT_OPS(joule_exit, struct scx_exit_info *ei)
{
	__u32 zero = 0;
	struct joule_scx_exit *e = bpf_map_lookup_elem(&scx_exit, &zero);

	if (!e)
		return;
	bpf_probe_read_kernel_str(e->reason, sizeof(e->reason), ei->reason);
	bpf_probe_read_kernel_str(e->msg, sizeof(e->msg), ei->msg);
	e->exit_code = ei->exit_code;
	/* Last: a reader that sees a kind sees the reason and message too. */
	__sync_lock_test_and_set(&e->kind, ei->kind);
}

SEC(".struct_ops.link")
struct sched_ext_ops joule_ops = {
	.select_cpu = (void *)joule_select_cpu,
	.enqueue = (void *)joule_enqueue,
	.dispatch = (void *)joule_dispatch,
	.runnable = (void *)joule_runnable,
	.running = (void *)joule_running,
	.stopping = (void *)joule_stopping,
	.init_task = (void *)joule_init_task,
	.init = (void *)joule_init,
	.exit = (void *)joule_exit,
	/* Lets a spent best-effort budget idle a CPU whose only task is a best-effort hog (see
	 * joule_enqueue); without it the kernel would keep running that task. */
	.flags = SCX_OPS_ENQ_LAST,
	.name = "joule",
};
