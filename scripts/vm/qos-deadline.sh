#!/usr/bin/env bash
# Inside the VM guest (a kernel without RT group scheduling, pure cgroup v2): an RT class gets
# the deadline backend without being asked, `joule qos plan` says why; a class that does not fit
# the kernel's deadline bandwidth, and one confined to one CPU, are refused with the reason;
# the fitting class is applied (its busy loop at SCHED_DEADLINE), measured and released (the
# loop back at SCHED_OTHER, no joule cgroup left). Usage: qos-deadline.sh PATH/TO/joule
set -euo pipefail
J=${1:?usage: qos-deadline.sh PATH/TO/joule}
d=$(mktemp -d)
sh -c 'while :; do :; done' &
busy=$!
trap 'kill $busy 2>/dev/null || true; "$J" qos --config "$d/main.toml" release >&2 || true; rm -rf "$d"' EXIT
class() { # NAME EXTRA-LINES
    printf '[agent]\njournal_dir = "%s"\n\n[[class]]\nname = "main"\nmatch = { pid = [%s], uid = [0] }\n%b' "$d" "$busy" "$1" >"$d/$2.toml"
}
class 'rt_runtime_us = 30000\nrt_period_us = 100000\n' main
class 'rt_runtime_us = 700000\nrt_period_us = 1000000\nrt_threads = 3\n' big
class 'rt_runtime_us = 30000\nrt_period_us = 100000\ncpus = "1"\n' pinned
policy() { awk '{print $41}' "/proc/$busy/stat"; }
echo "plan=$("$J" qos --config "$d/main.toml" plan --json | tr -d '\n')"
"$J" qos --config "$d/main.toml" plan | grep -A1 '^RT mechanism' | sed 's/^/plan_text: /'
for c in big pinned; do
    rc=0
    "$J" qos --config "$d/$c.toml" plan >"$d/$c.err" 2>&1 || rc=$?
    echo "${c}_rc=$rc"
    echo "${c}_err=$(tr '\n' ' ' <"$d/$c.err")"
done
echo "policy_before=$(policy)"
"$J" qos --config "$d/main.toml" apply >&2
echo "policy_applied=$(policy)"
echo "status=$("$J" qos --config "$d/main.toml" status --json --interval-ms 3000 | tr -d '\n')"
"$J" qos --config "$d/main.toml" release >&2
echo "policy_released=$(policy)"
if [ -e /sys/fs/cgroup/joule ]; then echo "left=yes"; else echo "left=no"; fi
