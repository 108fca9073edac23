#!/usr/bin/env bash
# Inside a guest on a distribution's kernel (vm_lts tests): the agent with the shipped config
# (deploy/joule.toml) plus one capping class over a busy loop. Prints what the kernel holds once
# the agent acted, what the agent says of eBPF, then SIGKILLs agent and guardian and prints what
# `joule restore` left. Usage: lts-agent.sh PATH/TO/joule REPO
set -euo pipefail
J=${1:?usage: lts-agent.sh PATH/TO/joule REPO} REPO=${2:?usage: lts-agent.sh PATH/TO/joule REPO}
d=$(mktemp -d)
agent=""
sh -c 'while :; do :; done' &
busy=$!
# However the script ends: no loop, no agent, nothing of the class left, no temporary directory.
trap 'kill $busy 2>/dev/null || true; [ -z "$agent" ] || pkill -9 -f "joule agent --config $d" || true; "$J" restore >&2 || true; rm -rf "$d"' EXIT
cp "$REPO/deploy/joule.toml" "$d/joule.toml"
printf '\n[[class]]\nname = "capped"\nmatch = { pid = [%s] }\nquota_us = 30000\nperiod_us = 100000\n' "$busy" >>"$d/joule.toml"
"$J" agent --config "$d/joule.toml" >"$d/agent.log" 2>&1 &
agent=$!
cg=/sys/fs/cgroup/joule/capped
# Bounded by the clock: TCG is slow, and an agent that never acts must fail here, not hang.
end=$((SECONDS + 60))
while [ $SECONDS -lt $end ]; do
  grep -qx "$busy" "$cg/cgroup.procs" 2>/dev/null && [ "$(cat "$cg/cpu.max" 2>/dev/null)" = "30000 100000" ] && break
  kill -0 "$agent" 2>/dev/null || break
  sleep 0.5
done
echo "cpu.max=$(cat "$cg/cpu.max" 2>/dev/null || echo none)"
if grep -qx "$busy" "$cg/cgroup.procs" 2>/dev/null; then echo "member=yes"; else echo "member=no"; fi
# The share the loop got over 3 s, from its own CPU time (clock ticks of /proc/PID/stat).
t0=$(awk '{print $14 + $15}' "/proc/$busy/stat"); sleep 3; t1=$(awk '{print $14 + $15}' "/proc/$busy/stat")
echo "share_pct=$(( (t1 - t0) * 100 / $(getconf CLK_TCK) / 3 ))"
echo "status=$("$J" status --json 2>/dev/null | python3 -c 'import json,sys; s=json.load(sys.stdin); print(json.dumps({"ebpf_off": s.get("ebpf_off")}))' || echo '{}')"
echo "--- agent log"
head -n 40 "$d/agent.log"
echo "--- kill"
pkill -9 -f "joule agent --config $d" || true
wait "$agent" 2>/dev/null || true
agent=""
sleep 1
"$J" restore >&2
if [ -e "$cg" ]; then echo "left=yes"; else echo "left=no"; fi
