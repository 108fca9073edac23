#!/usr/bin/env bash
# Runs one shell command as root inside a VM booted on the cached sched_ext kernel (tier 3),
# prints the command's stdout/stderr and exits with its status. Used by the vm_ tests through
# crates/joule-testkit/src/vm.rs, and by hand for debugging; see docs/vm.md.
#
# vng exits 255 even when the guest command succeeded, so the guest writes the command's
# output and exit status into a --rwdir results directory and this script reports those.
set -euo pipefail

CACHE=${JOULE_VM_CACHE:-/var/cache/joule-vm}

usage() {
  cat <<EOF
Usage: scripts/vm/run.sh [OPTIONS] [--] COMMAND...

Boots the kernel cached by scripts/vm/setup.sh (make vm-deps) with virtme-ng under qemu/TCG
(KVM does not work on this host), with the host's root filesystem shared read-only, runs
COMMAND (one shell command line, run by bash -c as root, in the current directory) and exits
with its status. Guest stdout/stderr go to this script's stdout/stderr.

Options:
  --mem SIZE        guest memory, qemu syntax (default 2G)
  --cpus N          guest vCPUs (default 2), run round-robin by one TCG thread (see below)
  --timeout SECS    wall-clock bound for boot + command (default 300); exit 124 on expiry
  --qemu-opts OPTS  extra qemu options, repeatable, e.g. --qemu-opts "-acpitable file=x.aml"
  --thermal         give the guest the ACPI thermal zone (adds the cached thermal.aml SSDT)
  --rwdir DIR       results directory, writable from the guest at the same path; kept.
                    Default: a fresh temporary directory, removed on exit. The guest command
                    can leave files for the host there: \$JOULE_VM_OUT names it.
  --kernel PATH     a vmlinuz under <root>/usr/lib/modules/<ver>/ (default: the cached one)
  --verbose         stream the guest console (boot log) to stderr
  -h, --help        this text

Exit status: the guest command's; 124 on timeout; 125 when the VM never reported a status
(boot failure: the console log is printed); 2 on usage errors or missing tools.
Environment: JOULE_VM_CACHE (default /var/cache/joule-vm).
Timing inside TCG is not meaningful: bound workloads by time, not by iterations.
EOF
}

die() { echo "vm-run: $*" >&2; exit 2; }

mem=2G cpus=2 timeout_s=300 rwdir="" kernel="" verbose=0 thermal=0
qemu_opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --mem) mem=${2:?}; shift 2 ;;
    --cpus) cpus=${2:?}; shift 2 ;;
    --timeout) timeout_s=${2:?}; shift 2 ;;
    --qemu-opts) qemu_opts+=("${2:?}"); shift 2 ;;
    --thermal) thermal=1; shift ;;
    --rwdir) rwdir=${2:?}; shift 2 ;;
    --kernel) kernel=${2:?}; shift 2 ;;
    --verbose) verbose=1; shift ;;
    -h|--help) usage; exit 0 ;;
    --) shift; break ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) break ;;
  esac
done
[ $# -gt 0 ] || { usage >&2; exit 2; }
cmd="$*"

# Tools from setup.sh: vng calls virtme-run from PATH and looks for virtiofsd there.
export PATH="$CACHE/venv/bin:$CACHE/cargo/bin:$PATH"
command -v vng >/dev/null 2>&1 || die "virtme-ng not found in $CACHE/venv; run make vm-deps"
command -v virtiofsd >/dev/null 2>&1 || die "virtiofsd not found in $CACHE/cargo; run make vm-deps"
if [ -z "$kernel" ]; then
  ver=$(cat "$CACHE/kernel/current/VERSION" 2>/dev/null) || die "no cached kernel; run make vm-deps"
  kernel=$CACHE/kernel/current/usr/lib/modules/$ver/vmlinuz
fi
kernel=$(realpath "$kernel")
[ -f "$kernel" ] || die "kernel $kernel not found; run make vm-deps"
if [ "$thermal" = 1 ]; then
  [ -f "$CACHE/thermal.aml" ] || die "$CACHE/thermal.aml not found; run make vm-deps"
  qemu_opts+=("-acpitable file=$CACHE/thermal.aml")
fi

if [ -z "$rwdir" ]; then
  rwdir=$(mktemp -d /tmp/joule-vm.XXXXXX)
  trap 'rm -rf "$rwdir"' EXIT
else
  mkdir -p "$rwdir"
  rwdir=$(realpath "$rwdir")
fi
case "$rwdir" in *[[:space:]]*) die "--rwdir must not contain spaces" ;; esac
rm -f "$rwdir/status" "$rwdir/stdout" "$rwdir/stderr" "$rwdir/console.log"

# The guest side: the command in a file (no quoting through vng's --exec), and a wrapper
# that records its output and status in the rwdir. /var/cache is a tmpfs in the guest, so the
# kernel's modules directory is exported to it with --rodir.
printf '%s\n' "$cmd" >"$rwdir/cmd.sh"
cat >"$rwdir/guest.sh" <<EOF
#!/bin/bash
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export JOULE_VM_OUT=$rwdir
read -r up _ </proc/uptime; echo "\$up" >$rwdir/uptime
# What systemd would have mounted on a real machine; virtme-ng-init does not.
mountpoint -q /sys/fs/bpf || mount -t bpf bpf /sys/fs/bpf 2>/dev/null
mountpoint -q /sys/kernel/tracing || mount -t tracefs tracefs /sys/kernel/tracing 2>/dev/null
cd $(printf '%q' "$PWD") 2>/dev/null || cd /
bash $rwdir/cmd.sh >$rwdir/stdout 2>$rwdir/stderr </dev/null
echo \$? >$rwdir/status.tmp && mv $rwdir/status.tmp $rwdir/status
sync
EOF

# Single-threaded TCG: with one host thread per vCPU (qemu's default), a vCPU can run a stale
# translation of kernel text another vCPU is patching (static keys, alternatives), and the guest
# oopses ("int3", or a jump into the middle of an instruction). scripts/vm/tcg-text-poke.sh
# crashed 3 boots in 3 that way and none with thread=single; docs/vm.md has the numbers.
vng_args=(--run "$kernel" --disable-kvm --cpus "$cpus" --memory "$mem"
          --rwdir "$rwdir" --rodir "$(realpath "$CACHE/kernel")" --verbose
          "--qemu-opts=-accel tcg,thread=single")
for o in "${qemu_opts[@]}"; do vng_args+=("--qemu-opts=$o"); done
vng_args+=(--exec "bash $rwdir/guest.sh")

boot() {
  rm -f "$rwdir/uptime" "$rwdir/status" "$rwdir/stdout" "$rwdir/stderr"
  set +e
  if [ "$verbose" = 1 ]; then
    timeout --kill-after=10 "$timeout_s" vng "${vng_args[@]}" </dev/null 2>&1 |
      tee "$rwdir/console.log" >&2
    rc=${PIPESTATUS[0]}
  else
    timeout --kill-after=10 "$timeout_s" vng "${vng_args[@]}" </dev/null >"$rwdir/console.log" 2>&1
    rc=$?
  fi
  set -e
}

start=$(date +%s.%N)
boot
end=$(date +%s.%N)

if [ ! -f "$rwdir/status" ]; then
  tail -n 40 "$rwdir/console.log" >&2 || true
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    echo "vm-run: timed out after ${timeout_s}s" >&2
    exit 124
  fi
  echo "vm-run: the VM reported no status (vng exit $rc); console log above" >&2
  exit 125
fi
cat "$rwdir/stdout"
cat "$rwdir/stderr" >&2
[ "$verbose" = 1 ] && awk -v s="$start" -v e="$end" -v u="$(cat "$rwdir/uptime")" \
  'BEGIN { printf "vm-run: command started at guest uptime %.1f s; %.1f s wall in all\n", u, e - s }' >&2
exit "$(cat "$rwdir/status")"
