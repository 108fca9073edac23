#!/usr/bin/env bash
# In the systemd guest (scripts/vm/systemd-guest.sh; tests/vm_systemd.rs runs it): the agent
# with a class naming nginx.service. Prints key=value lines the test asserts on:
#   round 1: the agent, started as the shipped joule.service, sets the unit's CPU quota and
#            cpuset through systemd; the unit keeps its processes; nothing is created outside
#            it; SIGKILL to joule.service, and its ExecStopPost restore leaves every property
#            as found.
#   round 2: an administrator's `systemctl set-property` on a property joule set is reported as
#            drift (event and metric) and survives the agent's own stop.
set -u
mkdir -p /etc/joule
out=${JOULE_VM_OUT:-/tmp}
cat >/etc/joule/joule.toml <<'EOF'
[agent]
journal_dir = "/run/joule"
event_log = "/run/joule-events.jsonl"
status_interval_ms = 0

[[class]]
name = "web"
match = { unit = ["nginx.service"] }
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
echo "found=$(props)"
echo "tasks_found=$(systemctl show -p TasksCurrent --value nginx.service)"

# Round 1: the agent as the shipped unit runs it (the test installed deploy/joule.service).
systemctl start joule.service
wait_for 'CPUQuotaPerSecUSec=300ms' && echo applied=yes || echo applied=no
echo "applied_props=$(props)"
echo "tasks_applied=$(systemctl show -p TasksCurrent --value nginx.service)"
echo "procs_in_unit=$(wc -l </sys/fs/cgroup/system.slice/nginx.service/cgroup.procs)"
echo "joule_cgroups_at_root=$(find /sys/fs/cgroup -maxdepth 1 -name 'joule*' | wc -l)"
echo "nginx_cgroups=$(for p in $(pgrep -x nginx); do cut -d: -f3 /proc/$p/cgroup; done | sort -u | tr '\n' ' ')"
# SIGKILL to the whole unit (agent and guardian): the unit's ExecStopPost runs `joule restore`
# (Restart=on-failure brings the agent back 5 s later; it is stopped before round 2).
systemctl kill -s KILL joule.service
wait_for 'CPUQuotaPerSecUSec=infinity' && echo "restored=$(props)" || echo "restored=not within 60 s: $(props)"
echo "stop_post_result=$(systemctl show -p ExecStopPost --value joule.service | grep -o 'status=[0-9]*' | head -1)"
systemctl stop joule.service
journalctl -u joule.service --no-pager >"$out/joule-unit.log" 2>&1

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
exit 0
