/* The bandwidth limiter's classifier, at the clsact egress hook of the limited interface
 * (before its qdisc). It only picks the HTB class, by writing the classid into skb->priority,
 * which HTB looks up before anything else; HTB does the shaping. (A cls_bpf filter under HTB
 * cannot name a class: its skb->tc_classid is 16 bits, the minor only.) A packet takes the
 * class of the first flow rule it matches (protocol, ports, IPv4 destination), else the class
 * of its socket's cgroup, else it is left alone and HTB's default class takes it. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_endian.h>
#include "intf.h"

char LICENSE[] SEC("license") = "GPL";

#define ETH_P_IP 0x0800
#define TC_ACT_OK 0

/* Set before load: how many entries of netlimit_rules are used, and for the ingress redirect the
 * ifb device's index. */
const volatile __u32 ifb_ifindex = 0;
const volatile __u32 nr_rules = 0;

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, JOULE_NETLIMIT_RULES);
	__type(key, __u32);
	__type(value, struct joule_netlimit_rule);
} netlimit_rules SEC(".maps");

/* cgroup2 id -> HTB classid. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_NETLIMIT_CGROUPS);
	__type(key, __u64);
	__type(value, __u32);
} netlimit_cgroups SEC(".maps");

static __always_inline void classify(struct __sk_buff *skb)
{
	void *data = (void *)(long)skb->data;
	void *end = (void *)(long)skb->data_end;
	struct ethhdr *eth = data;
	__u16 sport = 0, dport = 0;
	__u32 daddr = 0;
	__u8 proto = 0;

	if ((void *)(eth + 1) <= end && eth->h_proto == bpf_htons(ETH_P_IP)) {
		struct iphdr *ip = (void *)(eth + 1);
		if ((void *)(ip + 1) <= end) {
			proto = ip->protocol;
			daddr = ip->daddr;
			__u16 *ports = (void *)ip + ip->ihl * 4;
			if ((void *)(ports + 2) <= end) {
				sport = bpf_ntohs(ports[0]);
				dport = bpf_ntohs(ports[1]);
			}
		}
	}
	/* The lookup gets a copy of the counter: a stack slot whose address goes to a helper
	 * loses its value for the verifier, and the verifiers of older kernels (Debian's 6.1 and
	 * 6.12; not 6.18's) then see the same state at the loop's back-edge and refuse the
	 * program ("infinite loop detected"). */
	for (__u32 i = 0; i < JOULE_NETLIMIT_RULES && i < nr_rules; i++) {
		__u32 key = i;
		struct joule_netlimit_rule *r = bpf_map_lookup_elem(&netlimit_rules, &key);
		if (!r || !r->classid)
			break;
		if ((r->proto && r->proto != proto) || (r->sport && r->sport != sport) || (r->dport && r->dport != dport) ||
		    (r->daddr && r->daddr != daddr))
			continue;
		skb->priority = r->classid;
		return;
	}
	__u64 cg = bpf_skb_cgroup_id(skb);
	__u32 *classid = bpf_map_lookup_elem(&netlimit_cgroups, &cg);
	if (classid)
		skb->priority = *classid;
}

SEC("tc")
int joule_netlimit_classify(struct __sk_buff *skb)
{
	classify(skb);
	return TC_ACT_OK;
}

/* Ingress limits: at the limited interface's clsact ingress, every packet goes to the egress
 * of joule's ifb device, whose HTB root shapes it; the ifb then hands it back to the stack as
 * if it had arrived on the interface. */

SEC("tc")
int joule_netlimit_to_ifb(struct __sk_buff *skb)
{
	if (!ifb_ifindex)
		return TC_ACT_OK;
	classify(skb); /* the flow rules pick the ifb's HTB class */
	return bpf_redirect(ifb_ifindex, 0);
}
