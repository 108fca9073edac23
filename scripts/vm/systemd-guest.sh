#!/usr/bin/env bash
# The systemd guest (issue 20, docs/systemd.md): a Debian trixie root with systemd as PID 1 on
# pure cgroup v2, D-Bus and nginx — the kind of host users run — booted with the VM cache's
# kernel under qemu/TCG.
#
#   systemd-guest.sh setup
#       debootstraps the root into $JOULE_VM_CACHE/debian-root once and adds man-db (quiet when
#       it is there).
#   systemd-guest.sh run --out DIR [--timeout S] [--file SRC:DEST ...] -- COMMAND
#       boots a throwaway copy of that root (the cache's stays pristine), runs COMMAND as root
#       in the guest from a oneshot unit once multi-user.target (nginx with it) is up, with
#       $JOULE_VM_OUT naming a directory whose contents come back to DIR, then powers off.
#       --file copies a host file into the copy first (the joule binary, a check script).
#       DIR gets stdout, stderr, status (COMMAND's exit status) and console.log.
#
# The root is shared with the guest through virtiofs (the kernel has VIRTIO_FS built in, so no
# initramfs), with the cache's kernel modules copied in. Environment: JOULE_VM_CACHE,
# JOULE_VM_MIRROR (as setup.sh).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${JOULE_VM_CACHE:-/var/cache/joule-vm}
ROOT=$CACHE/debian-root
SUITE=trixie
# systemd + D-Bus (the API joule talks to), nginx (the stock service of the tests), what the
# checks use (procps, iproute2, curl), and the joule binary's libraries (libelf, zlib).
PKGS=systemd,systemd-sysv,dbus,nginx,procps,iproute2,curl,kmod,libelf1t64,zlib1g

say() { echo "systemd-guest: $*"; }
die() { echo "systemd-guest: $*" >&2; exit 1; }

# shellcheck source=scripts/vm/mirror.sh
source "$HERE/mirror.sh"

setup() {
  base
  extras
}

# man-db, so the package check renders `man joule` as an operator would. Installed into the
# root from its own apt sources (the mirror debootstrap was given), also into a root made before
# this step existed; its daily timer is masked (the guest stays quiet).
extras() {
  [ -x "$ROOT/usr/bin/man" ] && return 0
  [ "$(id -u)" = 0 ] || die "need root to install man-db into $ROOT"
  say "installing man-db into $ROOT (once; log: $CACHE/debian-root.log)"
  if ! chroot "$ROOT" sh -c 'apt-get -qq update && DEBIAN_FRONTEND=noninteractive apt-get -qq install -y --no-install-recommends man-db && apt-get clean && rm -rf /var/lib/apt/lists/*' >>"$CACHE/debian-root.log" 2>&1; then
    tail -n 20 "$CACHE/debian-root.log" >&2
    die "installing man-db into $ROOT failed"
  fi
  ln -sf /dev/null "$ROOT/etc/systemd/system/man-db.timer"
}

base() {
  [ -f "$ROOT/.joule-ready" ] && return 0
  [ "$(id -u)" = 0 ] || die "need root to debootstrap $ROOT"
  command -v debootstrap >/dev/null || die "no debootstrap: run make vm-deps (setup.sh installs it)"
  local mirror log=$CACHE/debian-root.log
  mirror=$(debian_mirror)
  say "debootstrapping Debian $SUITE into $ROOT (once; log: $log)"
  rm -rf "$ROOT.tmp"
  if ! debootstrap --variant=minbase --include="$PKGS" "$SUITE" "$ROOT.tmp" "$mirror" >"$log" 2>&1; then
    tail -n 20 "$log" >&2
    die "debootstrap failed (full log: $log)"
  fi
  # A console on ttyS0 for the log, no login anywhere, a fixed hostname and machine-id per copy.
  echo joule-guest >"$ROOT.tmp/etc/hostname"
  : >"$ROOT.tmp/etc/machine-id"
  ln -sf /dev/null "$ROOT.tmp/etc/systemd/system/getty@tty1.service"
  ln -sf /dev/null "$ROOT.tmp/etc/systemd/system/serial-getty@ttyS0.service"
  ln -sf /dev/null "$ROOT.tmp/etc/systemd/system/systemd-timesyncd.service"
  ln -sf /dev/null "$ROOT.tmp/etc/systemd/system/apt-daily.timer"
  ln -sf /dev/null "$ROOT.tmp/etc/systemd/system/apt-daily-upgrade.timer"
  touch "$ROOT.tmp/.joule-ready"
  mv "$ROOT.tmp" "$ROOT"
}

run() {
  local out="" timeout_s=600 files=()
  while [ $# -gt 0 ]; do
    case $1 in
      --out) out=${2:?}; shift 2 ;;
      --timeout) timeout_s=${2:?}; shift 2 ;;
      --file) files+=("${2:?}"); shift 2 ;;
      --) shift; break ;;
      *) die "unknown option $1" ;;
    esac
  done
  [ -n "$out" ] && [ $# -gt 0 ] || die "usage: run --out DIR [--timeout S] [--file SRC:DEST] -- COMMAND"
  [ -f "$ROOT/.joule-ready" ] || die "no guest root at $ROOT: run '$0 setup' (make vm-deps)"
  local ver kdir vmlinuz virtiofsd=$CACHE/cargo/bin/virtiofsd
  ver=$(cat "$CACHE/kernel/current/VERSION")
  kdir=$CACHE/kernel/current/usr/lib/modules/$ver
  vmlinuz=$kdir/vmlinuz
  [ -x "$virtiofsd" ] && [ -f "$vmlinuz" ] || die "the VM cache lacks virtiofsd or the kernel: make vm-deps"
  mkdir -p "$out"
  local work; work=$(mktemp -d /var/tmp/joule-systemd-guest.XXXXXX)
  # The throwaway root goes whatever happens (400 MB a boot). Each step may fail (virtiofsd
  # already gone) without stopping the next: errexit holds inside a trap too.
  # shellcheck disable=SC2064
  trap "kill \$(cat '$work/virtiofsd.pid' 2>/dev/null) 2>/dev/null || true; rm -rf '$work'" EXIT
  cp -a "$ROOT" "$work/root"
  mkdir -p "$work/root/usr/lib/modules" "$work/root/joule/out"
  cp -a "$kdir" "$work/root/usr/lib/modules/$ver"
  local f
  for f in "${files[@]}"; do
    mkdir -p "$work/root$(dirname "${f#*:}")"
    cp -a "${f%%:*}" "$work/root${f#*:}"
  done
  printf '%s\n' "#!/bin/sh" "export JOULE_VM_OUT=/joule/out" "$*" >"$work/root/joule/cmd.sh"
  chmod 755 "$work/root/joule/cmd.sh"
  cat >"$work/root/etc/systemd/system/joule-vmtest.service" <<'EOF'
[Unit]
Description=joule VM test commands
After=multi-user.target nginx.service
Wants=nginx.service

[Service]
Type=oneshot
ExecStart=/bin/sh -c '/joule/cmd.sh >/joule/out/stdout 2>/joule/out/stderr; echo $? >/joule/out/status'
ExecStopPost=/bin/systemctl --no-block poweroff
TimeoutStartSec=infinity

[Install]
WantedBy=multi-user.target
EOF
  ln -sf ../joule-vmtest.service "$work/root/etc/systemd/system/multi-user.target.wants/joule-vmtest.service"
  "$virtiofsd" --socket-path "$work/vfs.sock" --shared-dir "$work/root" --sandbox none \
    --cache never >"$work/virtiofsd.log" 2>&1 &
  echo $! >"$work/virtiofsd.pid"
  local i
  for i in $(seq 50); do [ -S "$work/vfs.sock" ] && break; sleep 0.1; done
  [ -S "$work/vfs.sock" ] || die "virtiofsd did not start: $(cat "$work/virtiofsd.log")"
  local rc=0
  # Single-threaded TCG, as run.sh: multi-threaded TCG lets a vCPU run stale code while the
  # kernel patches its text (a static key flipped by a BPF attach), an oops (docs/vm.md).
  timeout "$timeout_s" qemu-system-x86_64 -machine q35 -accel tcg,thread=single -cpu max -smp 2 -m 2G \
    -object memory-backend-memfd,id=mem,size=2G,share=on -numa node,memdev=mem \
    -chardev socket,id=vfs,path="$work/vfs.sock" \
    -device vhost-user-fs-pci,chardev=vfs,tag=rootfs \
    -kernel "$vmlinuz" \
    -append "rootfstype=virtiofs root=rootfs rw console=ttyS0 systemd.show_status=0 panic=-1" \
    -display none -serial file:"$out/console.log" -no-reboot >"$work/qemu.log" 2>&1 || rc=$?
  cp -a "$work/root/joule/out/." "$out/" 2>/dev/null || true
  [ $rc = 124 ] && die "the guest did not power off within $timeout_s s (console: $out/console.log)"
  [ -f "$out/status" ] || die "the guest reported no status (console: $out/console.log; qemu: $(tail -n 3 "$work/qemu.log"))"
  return 0
}

case ${1:-} in
  setup) setup ;;
  run) shift; run "$@" ;;
  *) die "usage: $0 setup | run --out DIR [--timeout S] [--file SRC:DEST] -- COMMAND" ;;
esac
