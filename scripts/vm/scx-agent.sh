#!/usr/bin/env bash
# Inside the VM guest (a kernel with sched_ext and the ACPI thermal zone): `joule agent` with
# `[thermal] scheduler = "scx"` — its scheduler actuator, driven by the real zone. With
# JOULE_ZONE_TREE=DIR (the arm64 guest: qemu's arm virt machine has no thermal zone, docs/arm64.md)
# the zone is a sysfs tree of one `cpu-thermal` zone in DIR instead, which the agent reads through
# `telemetry.thermal_root` and feeds to the in-kernel stage, as it does `joule-bench thermal`'s
# plant; fio is left out where it is not installed (stress-ng alone is the load). Prints
# key=value lines (numbers measured under TCG: only their direction means anything) and leaves
# the agent's event log, plan and metrics in $JOULE_VM_OUT.
# Usage: scx-agent.sh PATH/TO/joule stage — the stage follows the zone across the thresholds,
#                                           as the agent's plan and the scheduler (in the
#                                           kernel) see it
#        scx-agent.sh PATH/TO/joule load  — 60 s of stress-ng (a best-effort class) + fio + a
#                                           labelled waking task: stage 0 for 25 s, stage 3
#                                           for 35 s; then SIGKILL of the agent and `joule
#                                           restore`
#        scx-agent.sh PATH/TO/joule eject — sysrq-S throws the scheduler out at stage 3; the
#                                           agent reports it and the cgroup path caps the
#                                           best-effort class's cpu.max
#        scx-agent.sh PATH/TO/joule held  — another sched_ext scheduler (`jother`, joule-bpf's
#                                           test-only example scx_other, next to joule in
#                                           target/release/examples) holds the slot first: the
#                                           agent leaves it alone, reports it once and acts
#                                           through the cgroup path; once jother exits, joule's
#                                           scheduler loads
set -euo pipefail
J=${1:?usage: scx-agent.sh PATH/TO/joule stage|load|eject|held}
MODE=${2:?stage, load, eject or held}
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${JOULE_VM_OUT:?}
S=/sys/kernel/sched_ext
URL=http://127.0.0.1:9977
EV=$OUT/events-$MODE.jsonl
CFG=$OUT/joule-$MODE.toml
pids=()
agent=
sysrq_was=$(cat /proc/sys/kernel/sysrq)
# set_temp CELSIUS|off: what the zone reports (off: the ACPI zone's triangle wave, the tree's 45 °C).
set_temp() {
	if [ -n "${JOULE_ZONE_TREE:-}" ]; then
		local z=$JOULE_ZONE_TREE/class/thermal/thermal_zone0
		mkdir -p "$z" && echo cpu-thermal >"$z/type"
		if [ "$1" = off ]; then echo 45000; else echo $(($1 * 1000)); fi >"$z/temp.new"
		mv "$z/temp.new" "$z/temp" # whole, never half a number
	else
		bash "$HERE/set-temp.sh" "$1"
	fi
}
cleanup() {
	[ -n "$agent" ] && kill "$agent" 2>/dev/null && wait "$agent" 2>/dev/null
	kill "${pids[@]}" 2>/dev/null || true
	wait 2>/dev/null || true
	set_temp off >/dev/null 2>&1 || true
	echo "$sysrq_was" >/proc/sys/kernel/sysrq
	rm -f /tmp/joule-fio.dat
}
trap cleanup EXIT

# config LABELLED_PID: the agent's config, with a best-effort class (every stress-ng task) and
# a labelled one (the given pid) when asked.
config() {
	cat >"$CFG" <<EOF
[agent]
period_ms = 100
metrics_addr = "127.0.0.1:9977"
journal_dir = "/run/joule"
event_log = "$EV"
status_interval_ms = 0
[thermal]
stage_thresholds_celsius = [70.0, 80.0, 90.0]
hysteresis_celsius = 3.0
scheduler = "scx"
EOF
	if [ -n "${JOULE_ZONE_TREE:-}" ]; then
		set_temp off
		printf '[telemetry]\nthermal_root = "%s"\n' "$JOULE_ZONE_TREE" >>"$CFG"
	fi
	if [ -n "${1:-}" ]; then
		cat >>"$CFG" <<EOF
[[class]]
name = "batch"
thermal = "best_effort"
match = { exe = ["$(command -v stress-ng)"] }
[[class]]
name = "ui"
thermal = "labelled"
match = { pid = [$1], uid = [0] }
EOF
	fi
}

start_agent() {
	"$J" agent --config "$CFG" >/dev/null 2>"$OUT/agent-$MODE.log" &
	agent=$!
}

# until SECONDS COMMAND...: polls COMMAND every 0.2 s; false after SECONDS.
until_s() {
	local t=$(($1 * 5)); shift
	for _ in $(seq "$t"); do "$@" && return 0; sleep 0.2; done
	return 1
}
ours() { [ "$(cat $S/state)" = enabled ] && [ "$(cat $S/root/ops 2>/dev/null)" = joule ]; }
# The scx actuator's state in /plan.json, as "key=value" for the given Python expressions of
# `a` (its state) and `d` (the ThermalStage decision).
plan() {
	curl -sf "$URL/plan.json" | python3 -c '
import json, sys
p = json.load(sys.stdin)
a = next((x["state"] for x in p["actuators"] if x["name"] == "scx"), {})
d = next((x for x in p["plan"]["decisions"] if x["want"]["kind"] == "thermal_stage"), {})
for e in sys.argv[1:]:
    print(eval(e, {"a": a, "d": d}), end=" ")
print()' "$@"
}
scx_stage() { plan 'a.get("stats", {}) and a["stats"]["stage"]' | tr -d ' '; }
scx_stage_is() { [ "$(scx_stage)" = "$1" ]; }
snap_stage_is() { [ "$(curl -sf $URL/snapshot.json | python3 -c 'import json,sys; print(json.load(sys.stdin)["stage"]["value"])')" = "$1" ]; }
path_is() { [ "$(plan 'd["want"]["path"]' | tr -d ' ')" = "$1" ]; }
state_is() { [ "$(cat $S/state)" = "$1" ]; }
has_procs() { [ -n "$(cat "$1/cgroup.procs")" ]; } # cgroupfs files have no size
reported() { grep -q '"event":"scx_ejected"' "$EV"; }
ejected() { grep -c '"event":"scx_ejected"' "$EV" || true; }

case $MODE in
stage)
	config
	start_agent
	until_s 60 ours || { echo "never_ours=1"; cat "$OUT/agent-$MODE.log"; exit 1; }
	echo "ops=$(cat $S/root/ops)"
	echo "ops_path=$(plan 'd["want"]["path"]' | tr -d ' ')"
	# 75, 85, 95 °C: stages 1, 2, 3; 60 °C: back to 0 (below every threshold less hysteresis).
	for step in 75:1 85:2 95:3 60:0; do
		c=${step%:*} want=${step#*:}
		set_temp "$c"
		t0=$(date +%s%N)
		until_s 20 snap_stage_is "$want" || true
		until_s 10 scx_stage_is "$want" || true
		ms=$((($(date +%s%N) - t0) / 1000000))
		echo "step_${c}=plan:$(plan 'd["want"]["stage"]' | tr -d ' ') scx:$(scx_stage) path:$(plan 'd["want"]["path"]' | tr -d ' ') ms:$ms"
	done
	echo "ejections=$(ejected)"
	;;
load)
	cd /tmp # stress-ng and fio want a writable working directory; the guest's / is read-only
	# A labelled task that wakes every 5 ms; its wait for a CPU is in its schedstat.
	sh -c 'while :; do sleep 0.005; done' &
	lab=$!
	pids+=("$lab")
	# Bounded by the cleanup, not by its own timeout: TCG makes the phases' length unpredictable.
	stress-ng --cpu 2 --timeout 600s >"$OUT/stress-ng.log" 2>&1 &
	pids+=($!)
	load_t0=$(date +%s)
	fio_pid=
	if command -v fio >/dev/null; then
		fio --name=rw --filename=/tmp/joule-fio.dat --size=16m --rw=randrw --bs=4k --ioengine=psync --direct=0 \
			--time_based --runtime=60 --output-format=json --output="$OUT/fio.json" >/dev/null 2>&1 &
		pids+=($!)
		fio_pid=$!
	else
		echo "fio=absent"
	fi
	config "$lab"
	start_agent
	until_s 60 ours || { echo "never_ours=1"; cat "$OUT/agent-$MODE.log"; exit 1; }
	be=/sys/fs/cgroup/joule.batch
	until_s 20 has_procs "$be" || { echo "be_cgroup_empty=1"; ps -eo pid,ppid,comm,stat,cgroup; cat "$OUT/stress-ng.log"; }
	echo "be_tasks=$(wc -l <"$be/cgroup.procs")"
	echo "cpus_online=$(nproc) cpus_possible=$(cat /sys/devices/system/cpu/possible)"
	echo "lab_cgroup=$(cut -d: -f3 /proc/$lab/cgroup)"
	# sample: BE usage (µs), the labelled task's run delay (ns) and timeslices, wall ns.
	sample() { echo "$(awk '/^usage_usec/ {print $2}' $be/cpu.stat) $(cut -d' ' -f2,3 /proc/$lab/schedstat) $(date +%s%N) $(plan 'a["stats"]["best_effort_held"]' 'a["stats"]["dispatched"][4]')"; }
	phase() { # phase NAME SECONDS: BE share of the machine and the labelled task's mean wait
		local a b
		a=($(sample)); sleep "$2"; b=($(sample))
		local wall_us=$(((b[3] - a[3]) / 1000))
		python3 -c "
import sys
be_us, wall_us, ncpu = ${b[0]} - ${a[0]}, $wall_us, $(nproc)
delay_ns, slices = ${b[1]} - ${a[1]}, ${b[2]} - ${a[2]}
print(f'$1_be_share={be_us / (wall_us * ncpu):.3f}')
print(f'$1_lab_wait_mean_us={delay_ns / max(slices, 1) / 1000:.0f}')
print(f'$1_lab_slices={slices}')
print(f'$1_held={${b[4]} - ${a[4]}}')
print(f'$1_labelled_dispatches={${b[5]} - ${a[5]}}')"
	}
	set_temp off
	phase stage0 20
	set_temp 95
	until_s 20 scx_stage_is 3 || echo "stage3_never=1"
	echo "stage_seen=$(scx_stage)"
	phase stage3 25
	echo "be_tasks_after=$(wc -l <"$be/cgroup.procs")"
	# 60 s of load in all: fio's runtime, or the rest of it slept.
	if [ -n "$fio_pid" ]; then
		wait "$fio_pid" || echo "fio_rc=$?"
	else
		left=$((60 - ($(date +%s) - load_t0)))
		[ "$left" -gt 0 ] && sleep "$left"
	fi
	echo "load_s=$(($(date +%s) - load_t0))"
	echo "state_after_60s=$(cat $S/state) ops=$(cat $S/root/ops 2>/dev/null || echo none)"
	echo "ejections=$(ejected)"
	[ -n "$fio_pid" ] && python3 -c "
import json
j = json.load(open('$OUT/fio.json'))['jobs'][0]
print(f\"fio_read_mib_s={j['read']['bw'] / 1024:.2f}\")
print(f\"fio_write_mib_s={j['write']['bw'] / 1024:.2f}\")"
	curl -sf "$URL/metrics" | grep '^joule_scx' >"$OUT/metrics-load.txt" || true
	# SIGKILL: the struct_ops link dies with the agent; then restore removes what it left. Its
	# guardian (which would replay the journal at once) is killed first, so `joule restore` has
	# something to prove here; the host's root tier tests the guardian itself.
	pkill -KILL -P "$agent" -x joule-guardian || echo "guardian_missing=1"
	kill -9 "$agent"
	wait "$agent" 2>/dev/null || true
	agent=
	t0=$(date +%s%N)
	until_s 5 state_is disabled || true
	echo "kill_fallback_ms=$((($(date +%s%N) - t0) / 1000000))"
	echo "kill_state=$(cat $S/state)"
	echo "pins_before_restore=$(ls /sys/fs/bpf/joule 2>/dev/null | wc -l)"
	"$J" restore >"$OUT/restore.log" 2>&1 && echo "restore_rc=0" || echo "restore_rc=$?"
	echo "pins_after_restore=$(ls /sys/fs/bpf/joule 2>/dev/null | wc -l)"
	echo "cgroups_after_restore=$(ls -d /sys/fs/cgroup/joule 2>/dev/null | wc -l)"
	;;
eject)
	cd /tmp # stress-ng wants a writable working directory
	# A best-effort class with a CPU hog and a hot zone: while joule's scheduler runs the class is
	# not CFS-capped (the scheduler degrades it); after the ejection the cgroup path must cap it.
	stress-ng --cpu 1 --timeout 600s >"$OUT/stress-ng-eject.log" 2>&1 &
	pids+=($!)
	sleep 1000 &
	pids+=($!)
	config "$!"
	set_temp 95
	start_agent
	until_s 60 ours || { echo "never_ours=1"; cat "$OUT/agent-$MODE.log"; exit 1; }
	be=/sys/fs/cgroup/joule.batch
	until_s 20 has_procs "$be" || echo "be_cgroup_empty=1"
	until_s 20 snap_stage_is 3 || echo "stage3_never=1"
	echo "path_before=$(plan 'd["want"]["path"]' | tr -d ' ')"
	echo "be_cpu_max_before=$(cat $be/cpu.max | tr ' ' '/')"
	echo 1 >/proc/sys/kernel/sysrq
	echo S >/proc/sysrq-trigger
	until_s 20 reported || echo "never_reported=1"
	until_s 10 path_is cgroup || true
	echo "path_after=$(plan 'd["want"]["path"]' | tr -d ' ')"
	capped() { [ "$(cut -d' ' -f1 $be/cpu.max)" != max ]; }
	until_s 10 capped || true
	echo "be_cpu_max_after=$(cat $be/cpu.max | tr ' ' '/')"
	echo "running_after=$(plan 'a["running"]' | tr -d ' ')"
	echo "retry_in_s=$(plan 'a["retry_in_s"]' | tr -d ' ')"
	grep '"event":"scx_ejected"' "$EV" | head -1 | sed 's/^/ejected_event=/'
	curl -sf "$URL/metrics" | grep '^joule_scx' | sed 's/^/metric:/'
	sleep 3 # inside the 30 s back-off: no new load, no second ejection
	echo "loads=$(grep -c '"event":"scx_loaded"' "$EV" || true)"
	echo "ejections=$(ejected)"
	echo "state_later=$(cat $S/state)"
	kill "$agent"
	rc=0; wait "$agent" || rc=$?
	agent=
	echo "agent_rc=$rc"
	;;
held)
	other=$(dirname "$J")/examples/scx_other
	"$other" >"$OUT/scx-other.log" 2>&1 &
	other_pid=$!
	pids+=("$other_pid")
	is_other() { [ "$(cat $S/state)" = enabled ] && [ "$(cat $S/root/ops 2>/dev/null)" = jother ]; }
	until_s 30 is_other || { echo "other_never=1"; cat "$OUT/scx-other.log"; exit 1; }
	config
	# What holds the slot, every 0.2 s from before the agent starts until jother is told to go.
	(while :; do cat $S/root/ops 2>/dev/null || echo none; sleep 0.2; done) >"$OUT/ops-held.txt" &
	sampler=$!
	pids+=("$sampler")
	start_agent
	# The agent's conflict events about the slot, one JSON object a line.
	conflicts() { python3 -c '
import json, sys
for l in open(sys.argv[1]):
    try:
        e = json.loads(l)
    except ValueError:
        continue
    if e.get("event") == "conflict" and e.get("knob") == "sched_ext":
        print(json.dumps(e))' "$EV" 2>/dev/null; }
	reported_held() { [ -n "$(conflicts)" ]; }
	until_s 60 reported_held || { echo "never_reported=1"; cat "$OUT/agent-$MODE.log"; }
	until_s 20 path_is cgroup || true
	sleep 5 # periods in which the agent must keep its hands off
	echo "path_held=$(plan 'd["want"]["path"]' | tr -d ' ')"
	echo "held_by=$(plan 'a["held_by"]' | tr -d ' ')"
	echo "down_reason=$(plan 'a["down_reason"]')"
	curl -sf "$URL/metrics" | grep -E '^joule_(knob_held_by_other|scx_running)' | sed 's/^/metric:/'
	echo "loads_while_held=$(grep -c '"event":"scx_loaded"' "$EV" || true)"
	kill "$sampler"
	wait "$sampler" 2>/dev/null || true
	echo "ops_while_agent_ran=$(sort -u "$OUT/ops-held.txt" | tr '\n' ',' | sed 's/,$//')"
	# jother goes: the slot is free, and the agent takes it (no back-off: that is not fighting).
	kill "$other_pid"
	wait "$other_pid" 2>/dev/null || true
	t0=$(date +%s%N)
	until_s 30 ours && echo "ours_after_ms=$((($(date +%s%N) - t0) / 1000000))" || echo "ours_after=never"
	until_s 10 path_is scx || true
	echo "path_after=$(plan 'd["want"]["path"]' | tr -d ' ')"
	conflicts | sed 's/^/conflict_event=/'
	kill "$agent"
	rc=0; wait "$agent" || rc=$?
	agent=
	echo "agent_rc=$rc"
	echo "state_later=$(cat $S/state)"
	;;
esac
