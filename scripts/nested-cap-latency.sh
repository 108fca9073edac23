#!/usr/bin/env bash
# What a CFS cap costs a task outside the capped group, by the depth of that group (issue 18,
# docs/results/thermal.md): stress-ng (2 workers) in a cgroup capped at 70 ms per 100 ms, one
# level below the root of the v1 cpu hierarchy or two (the shape of joule's `joule/<class>`),
# with and without cpu.idle, while `joule bench thermal-probe` (at the root) sleeps 2 ms to
# absolute deadlines. Prints the probe's lateness p50/p99/max in µs per layout. Root, cgroup v1
# cpu; removes its groups. About 1 minute.
#   scripts/nested-cap-latency.sh [ROUNDS]
set -euo pipefail
cd "$(dirname "$0")/.."
J=target/release/joule
C=/sys/fs/cgroup/cpu
[[ -f $C/cpu.cfs_quota_us ]] || { echo "no v1 cpu hierarchy at $C" >&2; exit 2; }
rounds=${1:-1}
top=$C/joule-nested-cap-$$
cleanup() { for d in "$top/x/batch" "$top/x" "$top-flat" "$top"; do [[ -d $d ]] && rmdir "$d" 2>/dev/null; done; true; }
trap cleanup EXIT
mkdir -p "$top/x"
probe() {
	"$J" bench thermal-probe --period-us 2000 --duration-s 10 | sort -n -k2 |
		awk '{a[NR]=$2} END{printf "p50 %.0f  p99 %.0f  max %.0f\n", a[int(NR*0.5)]/1000, a[int(NR*0.99)]/1000, a[NR]/1000}'
}
run() { # group idle
	mkdir -p "$1"
	echo 70000 >"$1/cpu.cfs_quota_us"
	echo "$2" >"$1/cpu.idle"
	sh -c "echo \$\$ >$1/cgroup.procs; exec stress-ng --cpu 2 --timeout 12" >/dev/null 2>&1 &
	sleep 1
	printf '%-8s idle=%s: ' "$3" "$2"
	probe
	wait
}
for _ in $(seq "$rounds"); do
	run "$top-flat" 0 flat
	run "$top/x/batch" 0 nested
	run "$top-flat" 1 flat
	run "$top/x/batch" 1 nested
done
