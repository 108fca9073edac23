#!/usr/bin/env bash
# What a capped best-effort group costs the work beside it (issue 18, docs/qos.md "Best-effort
# classes"): fio (4 KiB random read/write, psync, O_DIRECT, at the root of the cgroup tree)
# while stress-ng (2 workers) runs in a group capped at 70 ms per 100 ms, flat (one level down)
# or nested (two levels: the shape of `joule/<class>`), with and without cpu.idle, and with the
# group uncapped. Prints fio's MiB/s per layout. Root, cgroup v1 cpu, fio, stress-ng, python3;
# removes its groups and its 256 MiB file. About 70 s per round.
#   scripts/best-effort-neighbour.sh [ROUNDS]
set -euo pipefail
C=/sys/fs/cgroup/cpu
[[ -f $C/cpu.idle ]] || { echo "no v1 cpu hierarchy with cpu.idle at $C" >&2; exit 2; }
rounds=${1:-1}
top=$C/joule-be-neighbour-$$
work=$(mktemp -d /var/tmp/joule-be-neighbour.XXXXXX)
cleanup() {
	for d in "$top/x/batch" "$top/x" "$top-flat" "$top"; do [[ -d $d ]] && rmdir "$d" 2>/dev/null; done
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$top/x/batch" "$top-flat"
fio_args=(--name=randrw --rw=randrw --rwmixread=50 --bs=4k --ioengine=psync --iodepth=1 --filename="$work/f" --size=256M --direct=1)
fio "${fio_args[@]}" --create_only=1 >/dev/null
mib_s() {
	fio "${fio_args[@]}" --time_based --runtime=10 --output-format=json |
		python3 -c 'import json,sys; j=json.load(sys.stdin)["jobs"][0]; print("%.1f" % ((j["read"]["bw_bytes"]+j["write"]["bw_bytes"])/2**20))'
}
run() { # group quota idle layout
	echo "$2" >"$1/cpu.cfs_quota_us"
	echo "$3" >"$1/cpu.idle"
	sh -c "echo \$\$ >$1/cgroup.procs; exec stress-ng --cpu 2 --cpu-method matrixprod --timeout 11" >/dev/null 2>&1 &
	sleep 0.5
	printf '%-7s quota=%-6s idle=%s fio MiB/s %s\n' "$4" "$2" "$3" "$(mib_s)"
	wait
	echo -1 >"$1/cpu.cfs_quota_us"
	echo 0 >"$1/cpu.idle"
}
for _ in $(seq "$rounds"); do
	run "$top-flat" -1 0 flat
	run "$top-flat" 70000 0 flat
	run "$top-flat" 70000 1 flat
	run "$top/x/batch" 70000 0 nested
	run "$top/x/batch" 70000 1 nested
	run "$top-flat" -1 1 flat
done
