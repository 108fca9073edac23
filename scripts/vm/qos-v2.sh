#!/usr/bin/env bash
# Inside the VM guest (pure cgroup v2 with the cpu and cpuset controllers, which the host
# cannot offer because its cpu controller is bound to v1): apply one CFS-capped class with
# `joule qos`, show what landed, measure the achieved share, release, and check that nothing
# is left. Usage: qos-v2.sh PATH/TO/joule
set -euo pipefail
J=${1:?usage: qos-v2.sh PATH/TO/joule}
d=$(mktemp -d)
sh -c 'while :; do :; done' &
busy=$!
# However the script ends: stop the loop, undo the class (a no-op after the release below; the
# journal is in $d, so before removing it) and remove the temporary directory.
trap 'kill $busy 2>/dev/null || true; "$J" qos --config "$d/q.toml" release >&2 || true; rm -rf "$d"' EXIT
printf '[agent]\njournal_dir = "%s"\n\n[[class]]\nname = "capped"\nmatch = { pid = [%s], uid = [0] }\nquota_us = 30000\nperiod_us = 100000\ncpus = "1"\n' "$d" "$busy" >"$d/q.toml"
"$J" qos --config "$d/q.toml" apply >&2
echo "cpu.max=$(cat /sys/fs/cgroup/joule/capped/cpu.max)"
echo "cpuset.cpus=$(cat /sys/fs/cgroup/joule/capped/cpuset.cpus)"
echo "procs=$(cat /sys/fs/cgroup/joule/capped/cgroup.procs | tr '\n' ' ')"
echo "busy=$busy"
echo "status=$("$J" qos --config "$d/q.toml" status --json --interval-ms 3000 | tr -d '\n')"
"$J" qos --config "$d/q.toml" release >&2
if [ -e /sys/fs/cgroup/joule ]; then echo "left=yes"; else echo "left=no"; fi
