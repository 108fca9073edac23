#!/bin/bash
# Guest-side regression check for the VM harness (run by tests/vm.rs, or by hand:
# `bash scripts/vm/run.sh -- bash scripts/vm/tcg-text-poke.sh 40`).
# Patches hot kernel text over and over (the static keys behind the sched tracepoints and
# schedstats) while both vCPUs context-switch. Under multi-threaded TCG this oopsed the guest
# within seconds; run.sh therefore runs TCG single-threaded. Prints toggles=N (rounds of 9
# static-key flips); exits non-zero if a write fails. Bounded by time: SECS (default 10).
set -eu
secs=${1:-10}
ev=/sys/kernel/tracing/events/sched
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing
end=$((SECONDS + secs))
( while [ $SECONDS -lt $end ]; do :; done ) &
( while [ $SECONDS -lt $end ]; do echo x | cat >/dev/null; done ) &
n=0
while [ $SECONDS -lt $end ]; do
  for v in 1 0; do
    for e in sched_switch sched_wakeup sched_waking sched_stat_runtime; do echo $v >$ev/$e/enable; done
    echo $v >/proc/sys/kernel/sched_schedstats
  done
  n=$((n + 1))
done
wait
echo "toggles=$n"
