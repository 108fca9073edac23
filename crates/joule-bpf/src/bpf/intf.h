/* The only contract between joule's BPF programs and Rust: constants and shared structs.
 * Rust bindings are generated from this file by bindgen in build.rs; never mirror it by hand.
 * Keep every struct free of implicit padding (explicit _pad fields) so both sides agree. */
#ifndef __JOULE_INTF_H
#define __JOULE_INTF_H

#ifndef __bpf__
/* BPF code gets these from vmlinux.h; bindgen (host) gets them here. */
typedef unsigned char __u8;
typedef unsigned short __u16;
typedef unsigned int __u32;
typedef int __s32;
typedef unsigned long long __u64;
typedef long long __s64;
#endif

enum joule_limits {
	/* Thermal thresholds a config may give; stage n (1..=8) starts at threshold[n-1]. */
	JOULE_MAX_STAGES = 8,
	/* Thermal zones tracked at once (tz->id values; the model uses its own id). */
	JOULE_MAX_ZONES = 64,
	/* Zone id under which user space feeds its thermal model (far above real tz->id values). */
	JOULE_MODEL_ZONE = 1000,
	/* Pseudo-zone of the power budget: user space computes the power stage (watts against
	 * thermal.power_thresholds_watts) and feeds, under this id, the temperature threshold of
	 * that stage, so power raises the stage through the same rule and the same map. */
	JOULE_POWER_ZONE = 1001,
	/* Zone ids of hwmon temperature sensors fed by user space: hwmonX/tempY is base + 64*X + Y
	 * (they have no tz->id; thermal_zoneN uses N, which the tracepoint reports too). */
	JOULE_HWMON_ZONE_BASE = 2000,
	/* Default number of cgroups the run-queue latency histogram map holds (a knob). */
	JOULE_RUNQ_MAX_CGROUPS = 4096,
	/* Tasks waiting for a CPU that have a wake-up timestamp pending. */
	JOULE_RUNQ_MAX_PENDING = 16384,
	/* Default number of threads the per-task wait map holds (a knob); LRU beyond it. */
	JOULE_RUNQ_MAX_TASKS = 16384,
	/* Bytes of a task's comm (TASK_COMM_LEN), NUL included. */
	JOULE_COMM_LEN = 16,
};

/* Run-queue latency histogram: log-linear over nanoseconds. Values below 2^SUB_BITS ns have
 * their own exact slot; above, each power of two [2^m, 2^(m+1)) is cut into 2^SUB_BITS equal
 * slots, so a slot spans at most 1/8 of its lower bound. Reporting the slot midpoint bounds the
 * relative error of any percentile at 1/16 = 6.25%. Slot i >= 2^SUB_BITS covers
 * [(2^SUB_BITS + (i & mask)) << (g - 1), +1 << (g - 1)) with g = i >> SUB_BITS.
 * The last slot also takes everything >= 2^36 ns (~69 s). */
enum joule_hist {
	JOULE_HIST_SUB_BITS = 3,
	JOULE_HIST_SUB = 1 << JOULE_HIST_SUB_BITS,
	JOULE_HIST_MAX_LOG2 = 36,
	JOULE_HIST_SLOTS = (JOULE_HIST_MAX_LOG2 - JOULE_HIST_SUB_BITS + 1) << JOULE_HIST_SUB_BITS,
};

/* Which cgroup hierarchy keys the histogram (const volatile `hierarchy` in runqlat.bpf.c). */
enum joule_hierarchy {
	JOULE_HIER_V2 = 0,     /* cgroup v2 default hierarchy: task->cgroups->dfl_cgrp */
	JOULE_HIER_V1_CPU = 1, /* cgroup v1 `cpu` controller hierarchy */
};

/* Cumulative run-queue latency of one cgroup on one CPU (the map is per-CPU: no atomics on
 * the sched_switch path). User space sums CPUs and subtracts its previous read; the number of
 * waits is the sum of the slots. */
struct joule_runq_hist {
	__u64 max_ns;
	__u64 slots[JOULE_HIST_SLOTS];
};

/* task_waits[tid]: cumulative run-queue wait of one thread since the first time it waited after
 * load; deleted when the thread exits. wait_ns only grows, by atomic adds, so user space
 * differences two reads. comm is the thread's name when the entry was created, kept current by
 * tp_btf/task_rename (prctl PR_SET_NAME, exec). */
struct joule_task_wait {
	__u64 wait_ns;
	char comm[JOULE_COMM_LEN];
	__u32 tgid;    /* the process the thread belongs to */
	__u32 _pad;
};

/* Where a temperature came from. 0 is what an entry nobody wrote holds, so it must never
 * mean a measurement. */
enum joule_temp_source {
	JOULE_TEMP_NONE = 0,   /* no reading yet */
	JOULE_TEMP_SENSOR = 1, /* a thermal zone, through tp_btf/thermal_temperature */
	JOULE_TEMP_MODEL = 2,  /* user space's thermal model, through the `feed` syscall program */
	JOULE_TEMP_POWER = 3,  /* the power budget's pseudo-zone (JOULE_POWER_ZONE): not a temperature */
};

/* thermal_config[0], written by user space before it feeds anything. Thresholds ascend.
 *
 * stale_ns: a zone whose last reading is older than this does not count in the machine-wide
 * stage (its own entry in thermal_zones keeps its last temperature and stage), so a sensor that
 * stops reporting, or a model that is no longer fed, cannot hold the stage up; 0 means zones
 * never go stale. The stage is recomputed only when a reading arrives. When no zone is fresh
 * because none reports any more, nothing runs and thermal_stage keeps its last value, with
 * updated_ns saying how old it is: we chose keeping over dropping to stage 0 because a machine
 * whose readings stopped is not known to have cooled (failing towards throttling is the safe
 * side), and a reader that wants its own rule has updated_ns to apply it. */
struct joule_thermal_config {
	__s64 thresholds_mc[JOULE_MAX_STAGES];
	__s64 hysteresis_mc;
	__u64 stale_ns;
	__u32 nr_thresholds;
	/* 1: the tracepoint counts only the zones marked in thermal_tp_zones (the CPU sensors
	 * user space chose; a drive or a NIC zone then never moves the stage). 0: every zone. */
	__u32 tp_filter;
};

/* thermal_zones[zone id]: the last reading of one zone and that zone's own stage. */
struct joule_zone_state {
	__s64 temp_mc;
	__u64 updated_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 stage;
	__u32 source;     /* enum joule_temp_source */
};

/* thermal_stage[0]: the machine-wide stage (max over zones) that a scheduler reads. zone,
 * temp_mc and source describe the zone that set it (the hottest among ties). */
struct joule_stage {
	__u32 stage;
	__u32 zone;
	__s64 temp_mc;
	__u32 source;     /* enum joule_temp_source */
	__u32 _pad;
	__u64 updated_ns; /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u64 transitions; /* changes of `stage` since load */
};

/* Context of the `feed` SEC("syscall") program, passed through BPF_PROG_TEST_RUN. */
struct joule_feed_ctx {
	__u32 zone;
	__u32 source; /* enum joule_temp_source */
	__s64 temp_mc;
};

/* Return values of `feed`. */
enum joule_feed_ret {
	JOULE_FEED_OK = 0,
	JOULE_FEED_NO_CONFIG = 1,
	JOULE_FEED_ZONES_FULL = 2,
};

/* scx.bpf.c, the thermal-aware sched_ext scheduler: its queues. Score queues are custom DSQs
 * 0..JOULE_SCX_SCORE_DSQS-1, queue 0 for the highest score (interactive, I/O-bound), the last
 * for CPU hogs; the labelled queue is served before them at every stage; the best-effort
 * queue (CPU hogs of best-effort cgroups) after them, within the stage's CPU budget. */
enum joule_scx_dsqs {
	JOULE_SCX_SCORE_DSQS = 4,
	JOULE_SCX_DSQ_LABELLED = JOULE_SCX_SCORE_DSQS,
	JOULE_SCX_DSQ_BEST_EFFORT = JOULE_SCX_SCORE_DSQS + 1,
	JOULE_SCX_NR_DSQS = JOULE_SCX_SCORE_DSQS + 2,
	/* The best-effort budget is counted per window of this many ms, across all CPUs. */
	JOULE_SCX_BE_WINDOW_MS = 100,
	/* Rows of the per-stage table: stage 0 (cool) .. JOULE_MAX_STAGES. */
	JOULE_SCX_STAGE_ROWS = JOULE_MAX_STAGES + 1,
	/* Bytes of the exit reason and message kept from the kernel's scx_exit_info. */
	JOULE_SCX_REASON_LEN = 128,
	JOULE_SCX_MSG_LEN = 1024,
};

/* One row of the per-stage table (const volatile, set from Rust before load): at this stage
 * the first `queues` score queues (1..=JOULE_SCX_SCORE_DSQS) are served round-robin, and every
 * task gets `slice_us` of CPU per dispatch. The others wait for aging. The best-effort queue
 * is dispatched at most `best_effort_permille` of the machine's CPU time per window (1000: no
 * limit); past it its tasks wait and CPUs go idle rather than run them (aging still bounds
 * their wait). */
struct joule_scx_stage_cfg {
	__u32 queues;
	__u32 slice_us;
	__u32 best_effort_permille;
	__u32 _pad;
};

/* scx_stats[0], per CPU (no atomics in the callbacks); user space sums the CPUs. */
struct joule_scx_stats {
	__u64 dispatched[JOULE_SCX_NR_DSQS]; /* tasks moved from each custom DSQ to a CPU */
	__u64 direct;       /* woken onto an idle CPU, straight to its local DSQ */
	__u64 aged;         /* of `dispatched`: served only because their queue waited past age_us */
	__u64 enqueued;     /* ops.enqueue calls */
	__u64 stage;        /* the stage this CPU last read from thermal_stage */
	__u64 stage_seen_ns; /* when it read it (bpf_ktime_get_ns), 0: never */
	__u64 best_effort_run_ns; /* CPU time tasks of best-effort cgroups ran */
	__u64 best_effort_held;   /* dispatch rounds that left best-effort tasks waiting: budget spent */
};

/* scx_exit[0]: how the scheduler ended, copied from the kernel's scx_exit_info in ops.exit.
 * kind is enum scx_exit_kind (0: still running); >= 1024 (SCX_EXIT_ERROR) means ejected. */
struct joule_scx_exit {
	__s64 exit_code;
	__u32 kind;
	__u32 _pad;
	char reason[JOULE_SCX_REASON_LEN];
	char msg[JOULE_SCX_MSG_LEN];
};

/* Nap fast wake (nap.bpf.c). nap_ports[key] holds a watched port: key = proto << 16 | port
 * (host byte order). JOULE_NAP_MAX_PORTS bounds the map. */
enum joule_nap {
	JOULE_NAP_TCP = 1,
	JOULE_NAP_UDP = 2,
	JOULE_NAP_MAX_PORTS = 64,
	JOULE_NAP_RINGBUF_BYTES = 4096,
};

/* thermal.bpf.c: one change of the machine-wide stage, sent through `thermal_events` so a
 * loop asleep (a napped agent) learns of it at once instead of at its next period. */
struct joule_stage_event {
	__u64 at_ns;      /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__s64 temp_mc;    /* the hottest fresh zone's reading */
	__u32 stage;      /* the new stage */
	__u32 old_stage;
	__u32 zone;
	__u32 source;     /* enum joule_temp_source */
};

/* One wake, sent through the ring buffer the first time a watched port sees a SYN (to a
 * listener) or a datagram while the trigger is armed; arming again allows the next one. */
struct joule_nap_wake {
	__u64 at_ns;      /* bpf_ktime_get_ns(): CLOCK_MONOTONIC */
	__u32 proto;      /* JOULE_NAP_TCP or JOULE_NAP_UDP */
	__u32 port;
};

/* flow.bpf.c, the flow monitor: per flow (5-tuple, direction, cgroup) byte and packet counts
 * from cgroup_skb programs on the cgroup2 root, TCP retransmits from tp_btf/tcp_retransmit_skb,
 * and per-CPU softirq time from tp_btf/softirq_entry+exit. Everything is cumulative since load;
 * user space differences two reads for rates. */
enum joule_flow_limits {
	/* Flows tracked at once; LRU beyond (the least recently active make room). */
	JOULE_FLOW_MAX = 16384,
	/* (cgroup, direction) pairs in cgroup_net; LRU beyond. Small, because user space reads
	 * the whole map every control period (a read walks every bucket). */
	JOULE_CGROUP_NET_MAX = 1024,
	/* Softirq vectors (NR_SOFTIRQS); NET_TX = 2 and NET_RX = 3 are the network ones. */
	JOULE_SOFTIRQ_VECS = 10,
	JOULE_SOFTIRQ_NET_TX = 2,
	JOULE_SOFTIRQ_NET_RX = 3,
};

enum joule_flow_dir {
	JOULE_FLOW_EGRESS = 0,
	JOULE_FLOW_INGRESS = 1,
};

/* flows key. Addresses are IPv4-mapped IPv6 (::ffff:a.b.c.d) for IPv4, in network byte order;
 * ports in host byte order. `local` is this host's end: the source on egress, the destination
 * on ingress, so both directions of one connection share local/remote. */
struct joule_flow_key {
	__u64 cgroup_id;   /* the socket's cgroup2 id (bpf_skb_cgroup_id) */
	__u32 local[4];
	__u32 remote[4];
	__u16 local_port;
	__u16 remote_port;
	__u8 proto;        /* IPPROTO_TCP = 6, IPPROTO_UDP = 17 */
	__u8 dir;          /* enum joule_flow_dir */
	__u8 _pad[2];
};

/* flows value: cumulative since the flow's first packet; atomic adds. bytes are IP bytes of
 * the skb the socket layer handed over (a GSO packet counts its headers once), packets count
 * GSO segments. */
struct joule_flow_stats {
	__u64 bytes;
	__u64 packets;
	__u64 retransmits; /* TCP segments retransmitted (egress only) */
	__u64 first_ns;    /* bpf_ktime_get_ns() of the first packet */
	__u64 last_ns;     /* of the latest */
};

/* cgroup_net key: one cgroup2 and direction, the sum of all of its sockets' flows, so that
 * per-cgroup rates need no read of the flow table. */
struct joule_cgroup_net_key {
	__u64 cgroup_id;
	__u8 dir;          /* enum joule_flow_dir */
	__u8 _pad[7];
};

/* cgroup_net value: cumulative, atomic adds, as joule_flow_stats. */
struct joule_cgroup_net {
	__u64 bytes;
	__u64 packets;
	__u64 retransmits;
};

/* softirq_time[vec], per CPU: cumulative time and runs of each softirq vector. */
struct joule_softirq_time {
	__u64 ns;
	__u64 count;
};

/* netlimit.bpf.c, the limiter's classifier (cls_bpf, direct action, under joule's HTB root):
 * a packet takes the class of the first flow rule it matches, else its cgroup's class, else
 * the HTB default. */
enum joule_netlimit_limits {
	JOULE_NETLIMIT_RULES = 16,
	JOULE_NETLIMIT_CGROUPS = 256,
};

/* netlimit_rules[i], i < nr: 0 in a field means "any". */
struct joule_netlimit_rule {
	__u32 classid;     /* the HTB class (major:minor); 0 ends the list */
	__u32 daddr;       /* IPv4, network byte order */
	__u16 sport;       /* host byte order */
	__u16 dport;
	__u8 proto;
	__u8 _pad[3];
};

/* procmon.bpf.c, the process monitor: what changes a process's class, as events through a ring
 * buffer, so user space keeps class membership without walking /proc every period (the way
 * Tetragon keeps its process cache). Events for processes only (thread-group leaders), except
 * JOULE_PROC_CREDS, sent by any thread whose setuid-family syscall succeeded. A reservation that
 * fails (the buffer full) is counted in proc_lost; user space then walks /proc again.
 *
 * With a filter (the classes' rules compiled into maps, docs/bpf.md), an event that cannot
 * change any class stays in the kernel and is counted in proc_dropped instead. */
enum joule_proc_kind {
	JOULE_PROC_FORK = 1,   /* a new process (not a thread): pid, ppid, start */
	JOULE_PROC_EXEC = 2,   /* pid ran execve: new comm; exe and uid are read from /proc */
	JOULE_PROC_EXIT = 3,   /* the process's last thread exited */
	JOULE_PROC_RENAME = 4, /* the leader's comm changed (prctl, /proc/PID/comm) */
	JOULE_PROC_CGROUP = 5, /* pid (and its threads) moved to another cgroup, by anyone */
	JOULE_PROC_CREDS = 6,  /* a setuid/setreuid/setresuid succeeded in pid (its uids may differ) */
	/* Entries of proc_dropped: one per kind above, index = kind. */
	JOULE_PROC_KINDS = 7,
};

enum joule_proc_limits {
	JOULE_PROC_COMM_LEN = 16,
	/* Default ring buffer: ~10,000 events, 0.1 s of a 100,000 starts/s storm. */
	JOULE_PROC_RINGBUF_BYTES = 512 * 1024,
	/* The kernel's USER_HZ: /proc/PID/stat's start time is in 1/100 s. */
	JOULE_USER_HZ = 100,
	/* Classes one filter can tell apart (a bit each); more and the filter is not used. */
	JOULE_PROC_MAX_CLASSES = 64,
	/* Values of each kind of rule (comm, uid, pid, cgroup name) the rule maps hold. */
	JOULE_PROC_MAX_RULES = 1024,
	/* Processes whose events user space follows (members, their children, candidates). */
	JOULE_PROC_TRACK_MAX = 262144,
	/* Cgroup directories marked as satisfying a class's cgroup, unit or slice rule. */
	JOULE_PROC_MAX_MARKS = 16384,
	/* A cgroup's or an executable's basename as the kernel compares it (longer names compare
	 * truncated). */
	JOULE_PROC_CG_NAME_LEN = 64,
	/* Ancestors looked at for a mark, and hierarchies per task; deeper means "may match". */
	JOULE_PROC_CG_DEPTH = 16,
	JOULE_PROC_MAX_HIERARCHIES = 16,
	/* Ancestors looked at for the reaper of an exiting process's children. */
	JOULE_PROC_REAPER_DEPTH = 16,
	/* Settlements one run of the settle program applies. */
	JOULE_PROC_SETTLE_MAX = 1024,
};

/* joule_proc_event.flags */
enum joule_proc_event_flags {
	/* The process was not followed before this event: what the cache knew of it is gone. */
	JOULE_PROC_F_ADOPTED = 1,
	/* It has children now (or may: it has several threads), which may be unknown to user space. */
	JOULE_PROC_F_CHILDREN = 2,
	/* EXIT: its children go to a reaper (a subreaper, a pid namespace's init) that is followed,
	 * whose class they may follow. */
	JOULE_PROC_F_ORPHANS_FOLLOWED = 4,
};

struct joule_proc_event {
	__u32 kind;        /* enum joule_proc_kind */
	__u32 pid;         /* the process (tgid) */
	__u32 ppid;        /* FORK: the parent process */
	__u32 flags;       /* enum joule_proc_event_flags */
	__u64 start_ns;    /* the process's start_boottime (ns since boot, as /proc/PID/stat's field 22 before its division) */
	__u64 seq;         /* the process's proc_track sequence after this event (0: not followed) */
	char comm[JOULE_PROC_COMM_LEN];
};

/* proc_track's value: a process whose events user space follows. `state` is seq << 8 | flags:
 * every event delivered for the process adds one to seq and clears the flags, so a settlement
 * user space decided before it (with an older seq) no longer applies. */
struct joule_proc_track {
	__u64 start_ticks; /* the process's start time in USER_HZ ticks: with the pid, its identity */
	__u64 state;
};

enum joule_proc_track_flags {
	JOULE_TRACK_SEQ_SHIFT = 8,
	JOULE_TRACK_FLAGS_MASK = 0xff,
	/* In a class: a rename changes nothing (membership is sticky), so renames stay here. */
	JOULE_TRACK_MEMBER = 1,
	/* Not in a class, followed for its parent's sake (a uid change may make it follow its
	 * parent): its children cannot follow it, so its forks stay here. */
	JOULE_TRACK_NOFOLLOW = 2,
	/* Not followed: its events pass the rules like any other process's; the entry waits for
	 * the process's exit (or its next candidate event). */
	JOULE_TRACK_PRUNED = 4,
};

/* What the classes' rules ask for, one bit per class (bit i: the i-th class in config order).
 * A class's bit is in a kind's mask when the class has rules of that kind; `classes` has the
 * classes that can match at all. The kernel cannot read an exe's path, but an exec opened the
 * file, whose name is the path's basename: exe rules narrow by it at an exec only. Pod rules
 * it cannot decide: they never narrow. */
struct joule_proc_rules {
	__u64 classes;
	__u64 comm;
	__u64 uid;
	__u64 pid;
	__u64 cgroup;      /* cgroup, unit and slice rules: marks on cgroup directories */
	__u64 exe;         /* exe rules: at an exec, by the executable's basename */
};

struct joule_proc_comm {
	char comm[JOULE_PROC_COMM_LEN];
};

struct joule_proc_cg_name {
	char name[JOULE_PROC_CG_NAME_LEN];
};

enum joule_proc_settle_op {
	/* Set the flags if the entry's seq is still `seq`; seq 0: insert the entry if absent. */
	JOULE_SETTLE_FLAGS = 1,
	/* Delete the entry of this process (pid and start time). */
	JOULE_SETTLE_FORGET = 2,
};

/* One settlement, in the settle program's queue (.bss, written by user space). */
struct joule_proc_settle {
	__u32 pid;
	__u8 op;           /* enum joule_proc_settle_op */
	__u8 flags;        /* enum joule_proc_track_flags */
	__u16 _pad;
	__u64 start_ticks;
	__u64 seq;
};

#endif /* __JOULE_INTF_H */
