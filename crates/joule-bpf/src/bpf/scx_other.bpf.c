/* A sched_ext scheduler that is not joule's, for tests only (the VM tier's coexistence check,
 * docs/vm.md): no callback at all, so the kernel's defaults schedule every task (one global
 * FIFO), and a name the agent must leave alone. Loaded and held by joule-bpf's example
 * `scx_other`, never by the agent. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

char LICENSE[] SEC("license") = "GPL";

SEC(".struct_ops.link")
struct sched_ext_ops jother_ops = {
	.name = "jother",
};
