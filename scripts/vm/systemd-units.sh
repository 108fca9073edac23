#!/usr/bin/env bash
# In the systemd guest (scripts/vm/systemd-guest.sh; tests/vm_systemd.rs runs it): the agent
# with a class naming nginx.service. Prints key=value lines the test asserts on:
#   round 1: the agent, started as the shipped joule.service (its capability bounding set
#            printed), sets the unit's CPU quota and cpuset through systemd; the unit keeps its
#            processes; nothing is created outside it; SIGKILL to joule.service, and its
#            ExecStopPost restore leaves every property as found.
#   round 2: an administrator's `systemctl set-property` on a property joule set is reported as
#            drift (event and metric) and survives the agent's own stop.
#   round 3: nap of a slice holding nginx.service (FreezeUnit): FreezerState agrees, the first
#            request wakes it, SIGKILL + ExecStopPost thaws it and stops the gate units, and
#            an operator's reload, restart and stop of the napped service work the first
#            time (its gates thaw the slice before systemd runs the job).
#   round 4: a `joule/web` tree as an earlier version left it, holding an nginx worker:
#            `joule restore` puts the worker back into nginx.service and removes the tree.
#   round 5: a class matched by comm + uid (nginx's master and workers, and the sleeps of a
#            transient service that also runs a shell): its quota and cpuset reach
#            nginx.service, which holds only the class's processes; the other unit is shared
#            and refused with a note; nothing moves.
#   round 6: an RT class of units (no RT group scheduling here) gets SCHED_DEADLINE
#            reservations; after a SIGKILL (the guardian) and a restore the thread is back at
#            SCHED_OTHER. An unprivileged user's delegated service that names a cgroup of its
#            own like the unit gets nothing.
set -u
mkdir -p /etc/joule
out=${JOULE_VM_OUT:-/tmp}
# The config's head every round shares: the agent and a class that is nginx.service.
config_head() {
  cat <<'EOF'
[agent]
journal_dir = "/run/joule"
event_log = "/run/joule-events.jsonl"
status_interval_ms = 0

[[class]]
name = "web"
match = { unit = ["nginx.service"] }
EOF
}
{ config_head; cat <<'EOF'; } >/etc/joule/joule.toml
quota_us = 30000
period_us = 100000
cpus = "1"
EOF
props() { systemctl show -p CPUQuotaPerSecUSec -p AllowedCPUs nginx.service | sort | tr '\n' ' '; }
wait_for() { # PATTERN: until `props` matches, at most 60 s (TCG)
  local i
  for i in $(seq 300); do props | grep -q -- "$1" && return 0; sleep 0.2; done
  return 1
}
echo "t_round1=$(date +%s)"
echo "found=$(props)"
echo "tasks_found=$(systemctl show -p TasksCurrent --value nginx.service)"

# Round 1: the agent as the shipped unit runs it (the test installed deploy/joule.service).
systemctl start joule.service
wait_for 'CPUQuotaPerSecUSec=300ms' && echo applied=yes || echo applied=no
echo "applied_props=$(props)"
echo "tasks_applied=$(systemctl show -p TasksCurrent --value nginx.service)"
echo "procs_in_unit=$(wc -l </sys/fs/cgroup/system.slice/nginx.service/cgroup.procs)"
# What the unit's CapabilityBoundingSet left the agent that did the above, and its guardian.
agent_pid=$(systemctl show -p MainPID --value joule.service)
echo "agent_cap_bnd=$(awk '/^CapBnd:/ {print $2}' /proc/"$agent_pid"/status)"
echo "guardian_cap_bnd=$(for p in $(pgrep -x joule-guardian); do awk '/^CapBnd:/ {print $2}' /proc/"$p"/status; done | sort -u | tr '\n' ' ')"
echo "joule_cgroups_at_root=$(find /sys/fs/cgroup -maxdepth 1 -name 'joule*' | wc -l)"
echo "nginx_cgroups=$(for p in $(pgrep -x nginx); do cut -d: -f3 /proc/$p/cgroup; done | sort -u | tr '\n' ' ')"
# SIGKILL to the whole unit (agent and guardian): the unit's ExecStopPost runs `joule restore`
# (Restart=on-failure brings the agent back 5 s later; it is stopped before round 2).
systemctl kill -s KILL joule.service
wait_for 'CPUQuotaPerSecUSec=infinity' && echo "restored=$(props)" || echo "restored=not within 60 s: $(props)"
echo "stop_post_result=$(systemctl show -p ExecStopPost --value joule.service | grep -o 'status=[0-9]*' | head -1)"
systemctl stop joule.service
journalctl -u joule.service --no-pager >"$out/joule-unit.log" 2>&1

echo "t_round2=$(date +%s)"
# Round 2: the agent by hand (its events and metrics read directly).
: >/run/joule-events.jsonl
joule agent --config /etc/joule/joule.toml --no-bpf >"$out/agent2.log" 2>&1 &
agent=$!
wait_for 'CPUQuotaPerSecUSec=300ms' && echo applied2=yes || echo applied2=no
systemctl set-property --runtime nginx.service CPUQuota=50%
for i in $(seq 100); do grep -q unit_drift /run/joule-events.jsonl && break; sleep 0.2; done
echo "drift_events=$(grep -c unit_drift /run/joule-events.jsonl)"
echo "drift_metric=$(curl -s 127.0.0.1:9977/metrics | grep '^joule_unit_drift_total' | tr '\n' ' ')"
kill -TERM "$agent"; wait "$agent"; echo "agent_rc=$?"
echo "after_stop=$(props)"
cp /run/joule-events.jsonl "$out/events.jsonl" 2>/dev/null

echo "t_round3=$(date +%s)"
# Round 3's nginx: round 2's 50 % quota gone, a stop timeout that fits TCG (Debian's
# nginx.service has TimeoutStopSec=5; a graceful stop under TCG took 10 s without joule), and
# put in a slice of its own, as an administrator who naps a service does (docs/systemd.md).
systemctl set-property --runtime nginx.service CPUQuota=
mkdir -p /run/systemd/system/nginx.service.d
printf '[Service]\nTimeoutStopSec=60\nSlice=web.slice\n' >/run/systemd/system/nginx.service.d/joule-test.conf
systemctl daemon-reload
systemctl restart nginx.service
echo "nap_nginx_cgroup=$(systemctl show -p ControlGroup --value nginx.service)"
stopped() { echo "$(systemctl is-active nginx.service) procs=$(pgrep -x nginx | wc -l) $(systemctl show -p Result -p ExecMainCode -p ExecMainStatus nginx.service | tr '\n' ' ')"; }
gates() { systemctl list-units --all --plain --no-legend 'joule-gate-*' | awk '{print $1 ":" $3}' | sort | paste -sd' '; }
# Round 3: nap of the slice, the agent again as the shipped unit (eBPF fast wake on port 80).
# The napped class asks nothing else of its slice: the nap alone.
{ config_head; cat <<'EOF2'; } >/etc/joule/joule.toml

[[class]]
name = "napped"
match = { slice = ["web.slice"] }

[nap]
enabled = true
class = "napped"
idle_ms = 1500
napping_period_ms = 500
job_hold_ms = 3000

[nap.monitors]
tcp_ports = [80]
EOF2
freezer() { systemctl show -p FreezerState --value nginx.service; }
wait_state() { # STATE [TRIES of 0.2 s]
  local i
  for i in $(seq "${2:-300}"); do [ "$(freezer)" = "$1" ] && return 0; sleep 0.2; done
  return 1
}
systemctl reset-failed joule.service 2>/dev/null
systemctl start joule.service
wait_state frozen-by-parent && echo nap_frozen=yes || echo "nap_frozen=no: $(freezer)"
echo "nap_slice_state=$(systemctl show -p FreezerState --value web.slice)"
echo "nap_tasks=$(systemctl show -p TasksCurrent --value nginx.service)"
echo "nap_cgroup_frozen=$(grep frozen /sys/fs/cgroup/web.slice/nginx.service/cgroup.events)"
echo "nap_gates=$(gates)"
echo "nap_curl=$(curl -s -m 30 -o /dev/null -w '%{http_code} %{time_total}' http://127.0.0.1/)"
echo "nap_after_curl=$(freezer)"
wait_state frozen-by-parent && echo nap_frozen_again=yes || echo "nap_frozen_again=no: $(freezer)"
systemctl kill -s KILL joule.service
wait_state running && echo "nap_killed_thawed=yes" || echo "nap_killed_thawed=no: $(freezer)"
echo "nap_stop_post_result=$(systemctl show -p ExecStopPost --value joule.service | grep -o 'status=[0-9]*' | head -1)"
for i in $(seq 50); do [ -z "$(gates)" ] && break; sleep 0.2; done
echo "nap_gates_after_kill=$(gates)"
systemctl stop joule.service
systemctl reset-failed joule.service 2>/dev/null
systemctl start joule.service
# Each job is queued on the napped service (the agent's job_hold_ms of 3 s is over before
# the next): systemd runs it, the gate having thawed the slice first.
pids_before=$(pgrep -x nginx | sort | tr '\n' ,)
for op in reload restart stop; do
  wait_state frozen-by-parent && f=yes || f="no: $(freezer)"
  t0=$(date +%s%N)
  timeout 60 systemctl "$op" nginx.service 2>"$out/nap-$op.err"; rc=$?
  echo "nap_${op}_rc=$rc napped_before=$f took_ms=$((($(date +%s%N) - t0) / 1000000)) err=$(head -1 "$out/nap-$op.err")"
  case $op in
    restart)
      echo "nap_restart_pids_changed=$([ "$(pgrep -x nginx | sort | tr '\n' ,)" != "$pids_before" ] && echo yes || echo no)"
      echo "nap_restart_curl=$(curl -s -m 30 -o /dev/null -w '%{http_code}' http://127.0.0.1/)" ;;
    stop) echo "nap_stopped=$(stopped)" ;;
  esac
done
# The stopped service holds the nap off past job_hold_ms: systemd refuses to start a unit in
# a frozen slice, and a start has no gate (docs/systemd.md). Then the start works.
sleep 8
echo "nap_held_while_stopped=$(systemctl show -p FreezerState --value web.slice) $(grep -c '"nap_held"' /run/joule-events.jsonl)"
timeout 60 systemctl start nginx.service; echo "nap_start_rc=$?"
echo "nap_unit_procs=$(wc -l </sys/fs/cgroup/web.slice/nginx.service/cgroup.procs) tasks=$(systemctl show -p TasksCurrent --value nginx.service)"
systemctl stop joule.service
for i in $(seq 50); do [ -z "$(gates)" ] && break; sleep 0.2; done
echo "nap_gates_after_stop=$(gates)"
echo "nap_final=$(freezer) $(systemctl show -p FreezerState --value web.slice) $(props)"
echo "nap_wakes=$(journalctl -u joule.service --no-pager | grep -c 'a job was queued on napped')"
journalctl -u joule.service --no-pager >"$out/joule-unit-nap.log" 2>&1
echo "nginx_log=$(journalctl -u nginx.service --no-pager | tail -n 8 | tr '\n' '|')"
# nginx back in system.slice for the rounds after this one.
printf '[Service]\nTimeoutStopSec=60\n' >/run/systemd/system/nginx.service.d/joule-test.conf
systemctl daemon-reload
systemctl restart nginx.service
echo "nap_nginx_cgroup_after=$(systemctl show -p ControlGroup --value nginx.service)"

# Round 4: what an earlier version left (joule/<class> at the root, a worker moved there).
mkdir -p /sys/fs/cgroup/joule/web
worker=$(pgrep -x nginx | sort -n | tail -1)
echo "$worker" >/sys/fs/cgroup/joule/web/cgroup.procs
echo "leftover_before=$(cut -d: -f3 "/proc/$worker/cgroup")"
mkdir -p /run/joule-empty
joule restore --journal-dir /run/joule-empty >"$out/restore-leftover.txt" 2>&1; echo "leftover_restore_rc=$?"
echo "leftover_tree=$([ -d /sys/fs/cgroup/joule ] && echo present || echo gone)"
echo "leftover_after=$(cut -d: -f3 "/proc/$worker/cgroup")"
echo "leftover_tasks=$(systemctl show -p TasksCurrent --value nginx.service)"

# Round 5: a class matched by processes (comm + uid), the agent by hand.
systemd-run --quiet --unit=joule-mixed.service sh -c 'sleep 1000 & while :; do sleep 5; done'
{ config_head | sed '/^\[\[class\]\]/,$d'; cat <<'EOF3'; } >/etc/joule/joule.toml
[[class]]
name = "by-name"
match = { comm = ["nginx", "sleep"], uid = [0, 33] }
quota_us = 20000
period_us = 100000
cpus = "0"
EOF3
: >/run/joule-events.jsonl
joule agent --config /etc/joule/joule.toml --no-bpf >"$out/agent5.log" 2>&1 &
agent=$!
wait_for 'CPUQuotaPerSecUSec=200ms' && echo res_applied=yes || echo res_applied=no
echo "res_props=$(props)"
echo "res_mixed=$(systemctl show -p CPUQuotaPerSecUSec -p AllowedCPUs joule-mixed.service | sort | tr '\n' ' ')"
for i in $(seq 50); do grep -q 'joule-mixed.service is shared' /run/joule-events.jsonl && break; sleep 0.2; done
echo "res_shared_notes=$(grep -c 'joule-mixed.service is shared' /run/joule-events.jsonl)"
echo "res_nginx_cgroups=$(for p in $(pgrep -x nginx); do cut -d: -f3 /proc/$p/cgroup; done | sort -u | tr '\n' ' ')"
echo "res_mixed_cgroups=$(for p in $(pgrep -x sleep) $(pgrep -x sh); do cut -d: -f3 /proc/$p/cgroup; done | sort -u | tr '\n' ' ')"
echo "res_joule_cgroups=$(find /sys/fs/cgroup -maxdepth 1 -name 'joule*' | wc -l)"
kill -TERM "$agent"; wait "$agent"; echo "res_agent_rc=$?"
echo "res_after=$(props)"
systemctl stop joule-mixed.service

# Round 6: an RT class of units (no RT group scheduling here): its unit's busy loop gets a
# SCHED_DEADLINE reservation (policy 6, /proc/PID/stat field 41); after a SIGKILL of the agent
# (its guardian restores at once) and `joule restore`, the loop is back at SCHED_OTHER.
echo "t_round6=$(date +%s)"
systemd-run --quiet --unit=joule-rt.service sh -c 'while :; do :; done'
rt_pid=$(systemctl show -p MainPID --value joule-rt.service)
policy() { awk '{print $41}' "/proc/${1:-$rt_pid}/stat"; }
# The audit's attempt (security.md, second audit item 1): an unprivileged user's service with
# Delegate=yes makes a cgroup named joule-rt.service inside its own and spins there. Only the
# cgroup systemd made for the unit is the unit; the user's loop must stay SCHED_OTHER.
id jxaud >/dev/null 2>&1 || useradd --system --no-create-home --shell /usr/sbin/nologin jxaud
cat >/run/jx-deleg-spin.sh <<'EOFD'
d=/sys/fs/cgroup$(cut -d: -f3 /proc/self/cgroup)
mkdir "$d/joule-rt.service" && echo 0 >"$d/joule-rt.service/cgroup.procs"
exec sh -c 'while :; do :; done'
EOFD
systemd-run --quiet --unit=jx-deleg.service -p Delegate=yes -p User=jxaud sh /run/jx-deleg-spin.sh
deleg_pid=$(systemctl show -p MainPID --value jx-deleg.service)
for i in $(seq 50); do grep -q 'jx-deleg.service/joule-rt.service$' "/proc/$deleg_pid/cgroup" && break; sleep 0.2; done
echo "deleg_cgroup=$(cut -d: -f3 "/proc/$deleg_pid/cgroup") uid=$(awk '/^Uid/ {print $2}' "/proc/$deleg_pid/status")"
{ config_head | sed '/^\[\[class\]\]/,$d'; cat <<'EOF6'; } >/etc/joule/joule.toml
[[class]]
name = "rt"
match = { unit = ["joule-rt.service"] }
rt_runtime_us = 30000
rt_period_us = 100000
EOF6
echo "rt_policy_before=$(policy)"
joule agent --config /etc/joule/joule.toml --no-bpf >"$out/agent6.log" 2>&1 &
agent=$!
for i in $(seq 300); do [ "$(policy)" = 6 ] && break; sleep 0.2; done
echo "rt_policy_applied=$(policy)"
# Ten periods more for the user's loop to be (wrongly) taken in too.
sleep 1
echo "deleg_policy_applied=$(policy "$deleg_pid")"
kill -KILL "$agent"; wait "$agent" 2>/dev/null
echo "rt_policy_killed=$(policy)"
joule restore --journal-dir /run/joule >"$out/restore-rt.txt" 2>&1; echo "rt_restore_rc=$?"
echo "rt_policy_restored=$(policy)"
systemctl stop joule-rt.service jx-deleg.service
echo "t_end=$(date +%s)"
exit 0
