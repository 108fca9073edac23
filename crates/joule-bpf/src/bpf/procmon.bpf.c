/* The process monitor: every change that can change a process's class (a new process, an
 * exec, a rename, a move to another cgroup, a setuid, an exit), as an event through a ring
 * buffer. User space keeps the class membership from them instead of walking /proc every
 * period: its cost follows the churn, not the number of processes.
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

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, JOULE_PROC_RINGBUF_BYTES);
} proc_events SEC(".maps");

/* [0]: events that did not fit in the ring buffer since load. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} proc_lost SEC(".maps");

static __always_inline void send(__u32 kind, struct task_struct *t, __u32 ppid, const char *comm)
{
	struct joule_proc_event *e = bpf_ringbuf_reserve(&proc_events, sizeof(*e), 0);
	if (!e) {
		__u32 zero = 0;
		__u64 *lost = bpf_map_lookup_elem(&proc_lost, &zero);
		if (lost)
			__sync_fetch_and_add(lost, 1);
		return;
	}
	e->kind = kind;
	e->pid = BPF_CORE_READ(t, tgid);
	e->ppid = ppid;
	e->_pad = 0;
	e->start_ns = BPF_CORE_READ(t, group_leader, start_boottime);
	if (comm)
		bpf_probe_read_kernel_str(e->comm, sizeof(e->comm), comm);
	else
		BPF_CORE_READ_STR_INTO(&e->comm, t, group_leader, comm);
	bpf_ringbuf_submit(e, 0);
}

static __always_inline int is_leader(struct task_struct *t)
{
	return BPF_CORE_READ(t, pid) == BPF_CORE_READ(t, tgid);
}

/* Set before load when the uid hook is: every new task then starts with its uid recorded. */
const volatile bool watch_creds = false;

/* Per task, the real uid it last had at a syscall's exit (or at its fork). */
struct {
	__uint(type, BPF_MAP_TYPE_TASK_STORAGE);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, int);
	__type(value, __u32);
} task_uid SEC(".maps");

static __always_inline __u32 real_uid(struct task_struct *t)
{
	return BPF_CORE_READ(t, real_cred, uid.val);
}

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
	send(JOULE_PROC_FORK, child, BPF_CORE_READ(parent, tgid), 0);
	return 0;
}

SEC("tp_btf/sched_process_exec")
int BPF_PROG(joule_proc_exec, struct task_struct *p, pid_t old_pid, struct linux_binprm *bprm)
{
	send(JOULE_PROC_EXEC, p, 0, 0);
	return 0;
}

SEC("tp_btf/sched_process_exit")
int BPF_PROG(joule_proc_exit, struct task_struct *p, bool group_dead)
{
	if (!is_leader(p))
		return 0;
	send(JOULE_PROC_EXIT, p, 0, 0);
	return 0;
}

SEC("tp_btf/task_rename")
int BPF_PROG(joule_proc_rename, struct task_struct *t, const char *comm)
{
	if (!is_leader(t))
		return 0; /* /proc/PID/comm is the leader's */
	send(JOULE_PROC_RENAME, t, 0, comm);
	return 0;
}

SEC("tp_btf/cgroup_attach_task")
int BPF_PROG(joule_proc_cgroup, struct cgroup *dst, const char *path, struct task_struct *t, bool threadgroup)
{
	send(JOULE_PROC_CGROUP, t, 0, 0);
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
	send(JOULE_PROC_CREDS, t, 0, 0);
	return 0;
}
