/* Nap fast wake: sees the first SYN, or the first datagram, to a watched port and wakes the
 * agent's waiter thread through a ring buffer, which thaws the frozen service. The kernel keeps
 * the connection in the listener's SYN/accept queue (and a datagram in the socket's queue)
 * until the frozen process runs again, so nothing is dropped. `armed` is a one-shot: user space
 * sets it before its last idle check (closing the race of a request that arrives while going
 * to sleep), the program clears it with the event it sends, so a burst sends one event, not
 * one per packet.
 *
 * The hook: tp_btf/netif_receive_skb, every packet the stack receives (loopback, veth and real
 * NICs alike, after GRO), with no qdisc and nothing attached to the interface. Measured on the
 * development kernel (6.18, Firecracker): fentry programs (fentry/tcp_conn_request,
 * fentry/tcp_v4_rcv) fail to load with EPERM and kprobes cannot attach (no kprobe support:
 * -ENOENT), while tp_btf loads and attaches; so the program reads the IPv4/IPv6 and TCP/UDP
 * headers itself (no IP options beyond IHL, no IPv6 extension headers, no fragments). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include "intf.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_NAP_MAX_PORTS);
	__type(key, __u32);
	__type(value, __u8);
} nap_ports SEC(".maps");

/* [0]: armed (1) or not (0); written by user space, cleared here when an event is sent. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} nap_armed SEC(".maps");

/* [0]: packets seen on watched ports since load (armed or not): activity for the policy. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} nap_hits SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, JOULE_NAP_RINGBUF_BYTES);
} nap_wakes SEC(".maps");

/* [0]: TCP sockets on the watched ports in a live state (anything but LISTEN, TIME_WAIT and
 * CLOSE, as the /proc monitor counts them), kept from state changes instead of a walk of the
 * whole established hash (262,144 buckets on this machine, 1.5 ms per read of /proc/net/tcp).
 * User space sets it from one walk after attaching (sockets older than the program never
 * counted up) and again now and then. */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __s64);
} nap_conns SEC(".maps");

static __always_inline void seen(__u32 proto, __u32 port)
{
	__u32 key = proto << 16 | port, zero = 0;
	if (!bpf_map_lookup_elem(&nap_ports, &key))
		return;
	__u64 *hits = bpf_map_lookup_elem(&nap_hits, &zero);
	if (hits)
		__sync_fetch_and_add(hits, 1);
	__u32 *armed = bpf_map_lookup_elem(&nap_armed, &zero);
	/* Only the CPU that turns 1 into 0 sends: one event per arming. */
	if (!armed || __sync_val_compare_and_swap(armed, 1, 0) != 1)
		return;
	struct joule_nap_wake *w = bpf_ringbuf_reserve(&nap_wakes, sizeof(*w), 0);
	if (!w) {
		*armed = 1; /* the buffer is full of unread wakes: the next packet tries again */
		return;
	}
	w->at_ns = bpf_ktime_get_ns();
	w->proto = proto;
	w->port = port;
	bpf_ringbuf_submit(w, 0);
}

#define ETH_P_IP 0x0800
#define ETH_P_IPV6 0x86DD
#define IPPROTO_TCP_ 6
#define IPPROTO_UDP_ 17
#define TCP_SYN 0x02
#define TCP_ACK 0x10

SEC("tp_btf/netif_receive_skb")
int BPF_PROG(nap_rx, struct sk_buff *skb)
{
	unsigned char *head = skb->head;
	__u16 nh = skb->network_header;
	__u8 l4, ip[40];
	__u32 off;

	if (skb->protocol == bpf_htons(ETH_P_IP)) {
		if (bpf_probe_read_kernel(ip, 20, head + nh))
			return 0;
		if (ip[6] & 0x3f || ip[7]) /* a fragment (MF or offset): no transport header */
			return 0;
		l4 = ip[9];
		off = nh + (ip[0] & 0xf) * 4;
	} else if (skb->protocol == bpf_htons(ETH_P_IPV6)) {
		if (bpf_probe_read_kernel(ip, 40, head + nh))
			return 0;
		l4 = ip[6];
		off = nh + 40;
	} else {
		return 0;
	}
	__u8 th[14];
	if (l4 == IPPROTO_TCP_) {
		if (bpf_probe_read_kernel(th, 14, head + off))
			return 0;
		if ((th[13] & (TCP_SYN | TCP_ACK)) == TCP_SYN)
			seen(JOULE_NAP_TCP, (__u32)th[2] << 8 | th[3]);
	} else if (l4 == IPPROTO_UDP_) {
		if (bpf_probe_read_kernel(th, 4, head + off))
			return 0;
		seen(JOULE_NAP_UDP, (__u32)th[2] << 8 | th[3]);
	}
	return 0;
}

#define TCP_CLOSE_ 7
#define TCP_LISTEN_ 10
#define TCP_TIME_WAIT_ 6

static __always_inline int live(int state)
{
	return state != TCP_CLOSE_ && state != TCP_LISTEN_ && state != TCP_TIME_WAIT_;
}

SEC("tp_btf/inet_sock_set_state")
int BPF_PROG(nap_sock_state, const struct sock *sk, const int oldstate, const int newstate)
{
	if (BPF_CORE_READ(sk, sk_protocol) != IPPROTO_TCP_)
		return 0;
	int delta = live(newstate) - live(oldstate);
	if (!delta)
		return 0;
	/* The local port from inet_sport, not skc_num: on the way to CLOSE the kernel releases
	 * the port (inet_put_port zeroes skc_num) before this tracepoint fires, while inet_sport
	 * stays, so a close would never count down. */
	__u16 sport = bpf_ntohs(BPF_CORE_READ((const struct inet_sock *)sk, inet_sport));
	__u32 key = JOULE_NAP_TCP << 16 | sport, zero = 0;
	if (!bpf_map_lookup_elem(&nap_ports, &key))
		return 0;
	__s64 *conns = bpf_map_lookup_elem(&nap_conns, &zero);
	if (conns)
		__sync_fetch_and_add(conns, delta);
	return 0;
}
