#!/usr/bin/env bash
# What a CFS cap costs a task outside the capped group (issue 18, docs/qos.md "Latency slice"):
# stress-ng (2 workers) in a cgroup capped at 70 ms per 100 ms, one level below the root of the
# v1 cpu hierarchy (flat) or two (nested: the shape of joule's `joule/<class>`), while
# `joule-bench thermal-probe` (at the root) sleeps 2 ms to absolute deadlines with the kernel's
# default EEVDF slice, a 1 ms one or joule's labelled default (300 µs). Prints the probe's
# lateness p50/p99/max in µs per layout and slice. Root, cgroup v1 cpu, Linux 6.12+ for the
# slices; removes its groups. About 1 minute per round.
#   scripts/nested-cap-latency.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
J=target/release/joule-bench
C=/sys/fs/cgroup/cpu
[[ -f $C/cpu.cfs_quota_us ]] || { echo "no v1 cpu hierarchy at $C" >&2; exit 2; }
rounds=${1:-1}
top=$C/joule-nested-cap-$$
cleanup() { for d in "$top/x/batch" "$top/x" "$top-flat" "$top"; do [[ -d $d ]] && rmdir "$d" 2>/dev/null; done; true; }
trap cleanup EXIT
mkdir -p "$top/x"
probe() { # [slice-us]
	"$J" thermal-probe --period-us 2000 --duration-s 8 ${1:+--slice-us "$1"} | sort -n -k2 |
		awk '{a[NR]=$2} END{printf "p50 %.0f  p99 %.0f  max %.0f\n", a[int(NR*0.5)]/1000, a[int(NR*0.99)]/1000, a[NR]/1000}'
}
run() { # group layout [slice-us]
	mkdir -p "$1"
	echo 70000 >"$1/cpu.cfs_quota_us"
	sh -c "echo \$\$ >$1/cgroup.procs; exec stress-ng --cpu 2 --timeout 10" >/dev/null 2>&1 &
	sleep 1
	printf '%-7s slice=%-8s ' "$2" "${3:-default}"
	probe "${3:-}"
	wait
}
for _ in $(seq "$rounds"); do
	for slice in "" 1000 300; do
		run "$top-flat" flat "$slice"
		run "$top/x/batch" nested "$slice"
	done
done
