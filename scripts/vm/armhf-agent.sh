#!/usr/bin/env bash
# Inside the armhf guest (Debian's armmp-lpae kernel: no BTF, so no eBPF; docs/arm64.md): the
# agent with the shipped config (/joule/deploy/joule.toml), as an Odroid-XU4 running Debian
# would start it. Prints key=value lines and leaves the agent's log and events in $JOULE_VM_OUT.
# Usage: armhf-agent.sh PATH/TO/joule cap    — a class capping a busy loop to 30 ms per 100 ms:
#                                              the agent starts without eBPF and says why, the
#                                              class's cpu.max gets the quota and holds the loop
#                                              to it; then SIGKILL of the agent and its guardian
#                                              and `joule restore`
#        armhf-agent.sh PATH/TO/joule energy — placement on the shipped XU4 model
#                                              (deploy/energy/odroid-xu4.toml): a light class
#                                              and a heavy one pinned to the cluster each
#                                              target needs; then SIGKILL and `joule restore`
set -euo pipefail
J=${1:?usage: armhf-agent.sh PATH/TO/joule cap|energy}
MODE=${2:?cap or energy}
OUT=${JOULE_VM_OUT:?}
CFG=$OUT/joule-$MODE.toml
EV=/run/joule/events.jsonl
pids=()
agent=
cleanup() {
	[ -n "$agent" ] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
	kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	cp "$EV" "$OUT/events-$MODE.jsonl" 2>/dev/null || true
	"$J" restore >/dev/null 2>&1 || true
}
trap cleanup EXIT

# until_s SECONDS COMMAND...: polls COMMAND every 0.2 s.
until_s() {
	local end=$(($(date +%s) + $1))
	shift
	until "$@"; do
		[ "$(date +%s)" -lt "$end" ] || return 1
		sleep 0.2
	done
}
event() { grep -m1 "\"event\":\"$1\"" "$EV" 2>/dev/null; }
has_event() { [ -n "$(event "$1")" ]; }
cgroup_of() { cut -d: -f3 "/proc/$1/cgroup"; }
cpus_of() { awk '/^Cpus_allowed_list:/ {print $2}' "/proc/$1/status"; }
start_agent() {
	"$J" agent --config "$CFG" >"$OUT/agent-$MODE.log" 2>&1 &
	agent=$!
	until_s 60 has_event listening || { echo "never_listening=1"; cat "$OUT/agent-$MODE.log"; exit 1; }
}
# The guardian would replay the journal at once; killing it first leaves the work to restore.
sigkill_agent() {
	pkill -KILL -P "$agent" -x joule-guardian || echo "guardian_missing=1"
	kill -9 "$agent"
	wait "$agent" 2>/dev/null || true
	agent=
}

cd /tmp
rm -rf /run/joule
case $MODE in
cap)
	sh -c 'while :; do :; done' &
	busy=$!
	pids+=("$busy")
	echo "cgroup_before=$(cgroup_of "$busy")"
	{ cat /joule/deploy/joule.toml
	  printf '\n[[class]]\nname = "capped"\nmatch = { pid = [%s] }\nquota_us = 30000\nperiod_us = 100000\n' "$busy"; } >"$CFG"
	start_agent
	echo "ebpf_off=$(event ebpf_off)"
	capped() { [ "$(cat "/sys/fs/cgroup$(cgroup_of "$busy")/cpu.max" 2>/dev/null)" = "30000 100000" ]; }
	until_s 60 capped || echo "never_capped=1"
	cg=/sys/fs/cgroup$(cgroup_of "$busy")
	echo "capped_cgroup=$(cgroup_of "$busy")"
	echo "capped_cpu_max=$(cat "$cg/cpu.max" | tr ' ' /)"
	# The loop's share of one CPU over 5 s of guest time, under the cap.
	u0=$(awk '/^usage_usec/ {print $2}' "$cg/cpu.stat") t0=$(date +%s%N)
	sleep 5
	u1=$(awk '/^usage_usec/ {print $2}' "$cg/cpu.stat") t1=$(date +%s%N)
	echo "capped_share=$(awk -v u=$((u1 - u0)) -v t=$((t1 - t0)) 'BEGIN { printf "%.3f", u * 1000 / t }')"
	echo "metric:$(curl -s http://127.0.0.1:9977/metrics | grep '^joule_bpf_enabled')"
	echo "status:$("$J" status 2>&1 | grep -m1 'eBPF off' | sed 's/^ *//')"
	sigkill_agent
	echo "cpu_max_after_kill=$(cat "$cg/cpu.max" 2>/dev/null | tr ' ' /)"
	"$J" restore >"$OUT/restore-$MODE.log" 2>&1 && echo "restore_rc=0" || echo "restore_rc=$?"
	echo "cgroup_after_restore=$(cgroup_of "$busy")"
	echo "cpu_max_after_restore=$(cat "$cg/cpu.max" 2>/dev/null | tr ' ' / || echo gone)"
	echo "cgroups_after_restore=$(ls -d /sys/fs/cgroup/joule* 2>/dev/null | wc -l)"
	;;
energy)
	sleep 600 &
	light=$!
	sleep 600 &
	heavy=$!
	pids+=("$light" "$heavy")
	echo "cpus_before=$(cpus_of "$light") $(cpus_of "$heavy")"
	# A light CPU app fits an A7 at a low OPP; a heavy one only an A15 near its top.
	{ cat /joule/deploy/joule.toml
	  printf '\n[[class]]\nname = "light"\nmatch = { pid = [%s], uid = [0] }\n' "$light"
	  printf '\n[[class]]\nname = "heavy"\nmatch = { pid = [%s], uid = [0] }\n' "$heavy"
	  printf '\n[energy]\nenabled = true\nmodel = "file"\nmodel_file = "/joule/deploy/energy/odroid-xu4.toml"\n'
	  printf '\n[[energy.target]]\nclass = "light"\nperf_fraction = 0.2\n'
	  printf '\n[[energy.target]]\nclass = "heavy"\nperf_fraction = 0.9\n'; } >"$CFG"
	start_agent
	placed() { [ "$(cpus_of "$light")" != "$(cpus_of 1)" ] && [ "$(cpus_of "$heavy")" != "$(cpus_of 1)" ]; }
	until_s 60 placed || echo "never_placed=1"
	echo "light_cpus=$(cpus_of "$light")"
	echo "heavy_cpus=$(cpus_of "$heavy")"
	sigkill_agent
	echo "heavy_cpus_after_kill=$(cpus_of "$heavy")"
	"$J" restore >"$OUT/restore-$MODE.log" 2>&1 && echo "restore_rc=0" || echo "restore_rc=$?"
	echo "cpus_after_restore=$(cpus_of "$light") $(cpus_of "$heavy")"
	;;
*) echo "unknown mode $MODE" >&2; exit 2 ;;
esac
