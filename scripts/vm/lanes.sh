#!/usr/bin/env bash
# The VM tier in two lanes at once (`make test-vm`). Each guest is one host thread (TCG runs
# single-threaded, docs/vm.md), so one guest leaves the second CPU of a 2-CPU machine idle: the
# systemd guest, the longest boot, runs in one lane while the other runs every other guest in
# turn (the x86 sched_ext guest, the arm64 guest, the thermal-zone guest). With one CPU they run
# one after the other. The systemd lane's output is printed after the other's, whole, so the
# tier's counts and failures read as one log. Tests named `vm_solo_` (a verdict on time, which
# a guest beside would skew) run last, alone, with their own boot.
#   scripts/vm/lanes.sh CARGO
set -uo pipefail
cargo=$1
filter=(--ignored vm_ --test-threads=1)
# Build every test binary once, before two cargos would wait on each other's lock.
"$cargo" test --release --workspace --locked --no-run -q || exit 1
# The other lane skips the systemd guest's tests by name: each must carry one of the two names.
odd=$("$cargo" test --release --locked -p joule --test vm_systemd -q -- --list --ignored 2>/dev/null | grep ': test$' | grep -v -e vm_systemd_ -e vm_deb_)
if [ -n "$odd" ]; then
  echo "vm lanes: tests/vm_systemd.rs has tests named neither vm_systemd_* nor vm_deb_* (the other lane would boot the guest again): $odd" >&2
  exit 1
fi
if [ "$(nproc)" -lt 2 ]; then
  # One CPU: two guests would share it and every wall-clock check in them would run slow.
  exec "$cargo" test --release --workspace --locked --no-fail-fast -- "${filter[@]}"
fi
systemd_log=$(mktemp)
trap 'rm -f "$systemd_log"' EXIT
"$cargo" test --release --locked -p joule --test vm_systemd -- "${filter[@]}" >"$systemd_log" 2>&1 &
systemd_pid=$!
"$cargo" test --release --workspace --locked --no-fail-fast -- "${filter[@]}" --skip vm_systemd_ --skip vm_deb_ --skip vm_solo_
rc=$?
wait "$systemd_pid"
systemd_rc=$?
echo "=== the systemd guest's lane (crates/joule/tests/vm_systemd.rs), run beside the above ==="
cat "$systemd_log"
echo "=== alone, after both lanes: the vm_solo_ tests ==="
"$cargo" test --release --workspace --locked --no-fail-fast -- --ignored vm_solo_ --test-threads=1
solo_rc=$?
[ "$rc" -eq 0 ] && [ "$systemd_rc" -eq 0 ] && [ "$solo_rc" -eq 0 ]
