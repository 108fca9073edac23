#!/usr/bin/env bash
# Inside the VM guest (a kernel with sched_ext): runs `joule scx` for a bounded time while CPU
# hogs, a sleeping/waking task and a labelled sleeping/waking task run, and prints what the
# kernel said before, during and after, then the scheduler's JSON lines.
# Usage: scx.sh PATH/TO/joule run   — the 8 s run
#        scx.sh PATH/TO/joule kill  — SIGKILL a running `joule scx`, time the kernel's fallback
#        scx.sh PATH/TO/joule stage — the guest's ACPI zone at 95 °C, `joule agent` pinning the
#                                     stage it computes in the kernel, `joule scx` reading it
#                                     while 8 CPU hogs compete
set -euo pipefail
J=${1:?usage: scx.sh PATH/TO/joule run|kill}
S=/sys/kernel/sched_ext/state
pids=()
lab=/sys/fs/cgroup/joule-scx-label
trap 'kill "${pids[@]}" 2>/dev/null || true; bash "$(dirname "$0")/set-temp.sh" off >/dev/null 2>&1 || true; wait 2>/dev/null || true; rmdir "$lab" 2>/dev/null || true' EXIT
echo "state_before=$(cat $S)"
case ${2:?run or kill} in
run)
	for _ in 1 2; do timeout 12 sh -c 'while :; do :; done' & pids+=($!); done
	timeout 12 sh -c 'while :; do sleep 0.005; done' & pids+=($!)
	mkdir -p "$lab"
	timeout 12 sh -c 'while :; do sleep 0.005; done' & pids+=($!)
	echo "${pids[-1]}" >"$lab/cgroup.procs"
	"$J" scx --duration-s 8 --stats --json --label-cgroup "$lab" >"$JOULE_VM_OUT/scx.jsonl" & j=$!
	sleep 4
	echo "state_during=$(cat $S)"
	echo "ops_during=$(cat /sys/kernel/sched_ext/root/ops 2>/dev/null || echo none)"
	rc=0; wait $j || rc=$?
	echo "joule_rc=$rc"
	echo "state_after=$(cat $S)"
	cat "$JOULE_VM_OUT/scx.jsonl"
	;;
kill)
	timeout 12 sh -c 'while :; do :; done' & pids+=($!)
	"$J" scx >/dev/null & j=$!
	for _ in $(seq 100); do [ "$(cat $S)" = enabled ] && break; sleep 0.1; done
	echo "state_during=$(cat $S)"
	kill -9 $j
	t0=$(date +%s%N)
	until [ "$(cat $S)" = disabled ]; do
		[ $(( ($(date +%s%N) - t0) / 1000000 )) -gt 5000 ] && break
		sleep 0.01
	done
	echo "fallback_ms=$(( ($(date +%s%N) - t0) / 1000000 ))"
	echo "state_after=$(cat $S)"
	;;
stage)
	for _ in $(seq 8); do timeout 20 sh -c 'while :; do :; done' & pids+=($!); done
	timeout 20 sh -c 'while :; do sleep 0.005; done' & pids+=($!)
	bash "$(dirname "$0")/set-temp.sh" 95
	"$J" agent --config "$(dirname "$0")/../../deploy/joule.toml" >/dev/null 2>"$JOULE_VM_OUT/agent.log" & pids+=($!)
	for _ in $(seq 100); do [ -e /sys/fs/bpf/joule/thermal_stage ] && break; sleep 0.1; done
	sleep 2 # a poll of the zone (1 s) reaches the stage
	rc=0; "$J" scx --duration-s 4 --stats --json || rc=$?
	echo "joule_rc=$rc"
	;;
esac
