/* The flow monitor: bytes and packets per flow and per cgroup as sockets send and receive them
 * (cgroup_skb on the cgroup2 root sees every socket's traffic with the socket's cgroup, in
 * every network namespace), TCP retransmits per flow, and the time each CPU spends in each
 * softirq vector (NET_RX/NET_TX run above every thread). Counters only grow; user space
 * differences two reads. The cgroup_skb programs always let the packet through. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "intf.h"

char LICENSE[] SEC("license") = "GPL";

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define PROTO_TCP 6
#define PROTO_UDP 17
#define AF_INET 2
#define AF_INET6 10

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, JOULE_FLOW_MAX);
	__type(key, struct joule_flow_key);
	__type(value, struct joule_flow_stats);
} flows SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, JOULE_CGROUP_NET_MAX);
	__type(key, struct joule_cgroup_net_key);
	__type(value, struct joule_cgroup_net);
} cgroup_net SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, JOULE_SOFTIRQ_VECS);
	__type(key, __u32);
	__type(value, struct joule_softirq_time);
} softirq_time SEC(".maps");

/* When the softirq running on this CPU entered (0: none). */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} softirq_start SEC(".maps");

static __always_inline void account_cgroup(__u64 cgroup_id, __u8 dir, __u64 bytes, __u64 packets, __u64 retrans)
{
	struct joule_cgroup_net_key k = { .cgroup_id = cgroup_id, .dir = dir };
	struct joule_cgroup_net *c = bpf_map_lookup_elem(&cgroup_net, &k);
	if (!c) {
		struct joule_cgroup_net fresh = {};
		bpf_map_update_elem(&cgroup_net, &k, &fresh, BPF_NOEXIST);
		c = bpf_map_lookup_elem(&cgroup_net, &k);
		if (!c)
			return;
	}
	__sync_fetch_and_add(&c->bytes, bytes);
	__sync_fetch_and_add(&c->packets, packets);
	if (retrans)
		__sync_fetch_and_add(&c->retransmits, retrans);
}

static __always_inline void account(struct joule_flow_key *k, __u64 bytes, __u64 packets, __u64 retrans)
{
	__u64 now = bpf_ktime_get_ns();
	account_cgroup(k->cgroup_id, k->dir, bytes, packets, retrans);
	struct joule_flow_stats *s = bpf_map_lookup_elem(&flows, k);
	if (!s) {
		struct joule_flow_stats fresh = { .first_ns = now, .last_ns = now };
		bpf_map_update_elem(&flows, k, &fresh, BPF_NOEXIST);
		s = bpf_map_lookup_elem(&flows, k);
		if (!s)
			return;
	}
	__sync_fetch_and_add(&s->bytes, bytes);
	__sync_fetch_and_add(&s->packets, packets);
	if (retrans)
		__sync_fetch_and_add(&s->retransmits, retrans);
	s->last_ns = now;
}

static __always_inline void v4_mapped(__u32 a[4], __u32 addr)
{
	a[0] = 0;
	a[1] = 0;
	a[2] = bpf_htonl(0xffff);
	a[3] = addr;
}

static __always_inline int on_skb(struct __sk_buff *skb, __u8 dir)
{
	struct joule_flow_key k = {};
	__u32 saddr[4], daddr[4];
	__u32 l4;
	__u8 proto;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		struct iphdr ip;
		if (bpf_skb_load_bytes(skb, 0, &ip, sizeof(ip)))
			return 1;
		proto = ip.protocol;
		v4_mapped(saddr, ip.saddr);
		v4_mapped(daddr, ip.daddr);
		l4 = ip.ihl * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		struct ipv6hdr ip6;
		if (bpf_skb_load_bytes(skb, 0, &ip6, sizeof(ip6)))
			return 1;
		proto = ip6.nexthdr; /* extension headers are not followed */
		__builtin_memcpy(saddr, &ip6.saddr, 16);
		__builtin_memcpy(daddr, &ip6.daddr, 16);
		l4 = sizeof(ip6);
	} else {
		return 1;
	}
	if (proto != PROTO_TCP && proto != PROTO_UDP)
		return 1;
	__u16 ports[2] = {};
	bpf_skb_load_bytes(skb, l4, ports, sizeof(ports));
	k.proto = proto;
	k.dir = dir;
	k.cgroup_id = bpf_skb_cgroup_id(skb);
	if (dir == JOULE_FLOW_EGRESS) {
		__builtin_memcpy(k.local, saddr, 16);
		__builtin_memcpy(k.remote, daddr, 16);
		k.local_port = bpf_ntohs(ports[0]);
		k.remote_port = bpf_ntohs(ports[1]);
	} else {
		__builtin_memcpy(k.local, daddr, 16);
		__builtin_memcpy(k.remote, saddr, 16);
		k.local_port = bpf_ntohs(ports[1]);
		k.remote_port = bpf_ntohs(ports[0]);
	}
	__u32 segs = skb->gso_segs;
	account(&k, skb->len, segs ? segs : 1, 0);
	return 1;
}

SEC("cgroup_skb/egress")
int joule_flow_egress(struct __sk_buff *skb)
{
	return on_skb(skb, JOULE_FLOW_EGRESS);
}

SEC("cgroup_skb/ingress")
int joule_flow_ingress(struct __sk_buff *skb)
{
	return on_skb(skb, JOULE_FLOW_INGRESS);
}

SEC("tp_btf/tcp_retransmit_skb")
int BPF_PROG(joule_flow_retransmit, const struct sock *sk)
{
	struct joule_flow_key k = {};
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);

	if (family == AF_INET) {
		v4_mapped(k.local, BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr));
		v4_mapped(k.remote, BPF_CORE_READ(sk, __sk_common.skc_daddr));
	} else if (family == AF_INET6) {
		BPF_CORE_READ_INTO(&k.local, sk, __sk_common.skc_v6_rcv_saddr.in6_u.u6_addr32);
		BPF_CORE_READ_INTO(&k.remote, sk, __sk_common.skc_v6_daddr.in6_u.u6_addr32);
	} else {
		return 0;
	}
	k.local_port = BPF_CORE_READ(sk, __sk_common.skc_num);
	k.remote_port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
	k.proto = PROTO_TCP;
	k.dir = JOULE_FLOW_EGRESS;
	k.cgroup_id = BPF_CORE_READ(sk, sk_cgrp_data.cgroup, kn, id);
	account(&k, 0, 0, 1);
	return 0;
}

SEC("tp_btf/softirq_entry")
int BPF_PROG(joule_softirq_entry, unsigned int vec)
{
	/* Only the network vectors are read: the others (timers, RCU, …) cost nothing here. */
	if (vec != JOULE_SOFTIRQ_NET_RX && vec != JOULE_SOFTIRQ_NET_TX)
		return 0;
	__u32 zero = 0;
	__u64 *start = bpf_map_lookup_elem(&softirq_start, &zero);
	if (start)
		*start = bpf_ktime_get_ns();
	return 0;
}

SEC("tp_btf/softirq_exit")
int BPF_PROG(joule_softirq_exit, unsigned int vec)
{
	if (vec != JOULE_SOFTIRQ_NET_RX && vec != JOULE_SOFTIRQ_NET_TX)
		return 0;
	__u32 zero = 0;
	__u64 *start = bpf_map_lookup_elem(&softirq_start, &zero);
	if (!start || !*start)
		return 0;
	__u64 d = bpf_ktime_get_ns() - *start;
	*start = 0;
	struct joule_softirq_time *t = bpf_map_lookup_elem(&softirq_time, &vec);
	if (t) {
		t->ns += d;
		t->count++;
	}
	return 0;
}
