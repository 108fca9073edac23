#!/usr/bin/env bash
# Boots the arm64 guest once (qemu-system-aarch64 -M virt under TCG, Debian's arm64 cloud
# kernel, the root image scripts/arm64/setup.sh built), or with DEB_ARCH=armhf the armhf guest
# (qemu-system-arm -M virt, Debian's armmp-lpae kernel and its initramfs), runs one command in
# it as root and brings back what it left (docs/arm64.md).
#
#   run.sh --out DIR [--timeout S] [--cpus N] [--mem SIZE] [--file SRC:DEST ...] -- COMMAND
#
# --file puts a host file at /joule/DEST in the guest (the joule binary, a check script).
# COMMAND runs by bash in /joule, with $JOULE_VM_OUT naming a directory whose contents come
# back to DIR, with stdout, stderr, status (COMMAND's exit status), uptime (the guest's uptime
# when the command started) and console.log (the guest's console). Exit status: COMMAND's;
# 124 on timeout; 125 when the guest reported no status (its console's end is printed).
#
# The root image is attached read-only (the init mounts tmpfs where the checks write), so
# every boot starts from the same root. The files go in as a tar on a second NVMe disk and
# the results come back as a tar on a third: no shared filesystem, no daemon on the host.
set -euo pipefail

die() { echo "${DEB_ARCH:-arm}-run: $*" >&2; exit 2; }
# shellcheck source=scripts/arm64/arch.sh
source "$(dirname "${BASH_SOURCE[0]}")/arch.sh"

out="" timeout_s=600 cpus=2 mem=2G files=()
while [ $# -gt 0 ]; do
  case $1 in
    --out) out=${2:?}; shift 2 ;;
    --timeout) timeout_s=${2:?}; shift 2 ;;
    --cpus) cpus=${2:?}; shift 2 ;;
    --mem) mem=${2:?}; shift 2 ;;
    --file) files+=("${2:?}"); shift 2 ;;
    --) shift; break ;;
    *) die "unknown option $1 (usage: see the head of $0)" ;;
  esac
done
[ -n "$out" ] && [ $# -gt 0 ] || die "usage: run.sh --out DIR [--timeout S] [--file SRC:DEST] -- COMMAND"
kernel=$CACHE/kernel/current/$KERNEL_FILE
[ -f "$kernel" ] && [ -f "$CACHE/root.img" ] || die "no $DEB_ARCH guest in $CACHE: run make vm-deps (scripts/arm64/setup.sh guest)"
command -v "$QEMU" >/dev/null || die "no $QEMU: run make vm-deps"
# armhf's kernel loads NVMe and ext4 from the initramfs setup.sh made.
initrd=()
[ -f "$CACHE/kernel/current/initrd.img" ] && initrd=(-initrd "$CACHE/kernel/current/initrd.img")

mkdir -p "$out"
work=$(mktemp -d "/tmp/joule-$DEB_ARCH.XXXXXX")
trap 'rm -rf "$work"' EXIT
mkdir "$work/in"
for f in "${files[@]}"; do
  src=${f%%:*} dest=${f#*:}
  case $dest in /joule/*) dest=${dest#/joule/} ;; /*) die "--file $f: DEST must be under /joule" ;; esac
  mkdir -p "$work/in/$(dirname "$dest")"
  cp -L "$src" "$work/in/$dest"
done
printf '%s\n' "$*" >"$work/in/run.sh"
tar -cf "$work/in.tar" -C "$work/in" .
truncate -s 256M "$work/out.img"

# -cpu: the board's big core (scripts/arm64/arch.sh). TCG's default, one host thread per vCPU.
disk() { echo "-drive if=none,id=$1,file=$2,format=raw$3 -device nvme,drive=$1,serial=$1"; }
# shellcheck disable=SC2046
set +e
timeout --kill-after=10 "$timeout_s" "$QEMU" -M virt -cpu "$QEMU_CPU" -accel tcg \
  -smp "$cpus" -m "$mem" -nodefaults -display none -monitor none -nic none -no-reboot \
  -serial "file:$out/console.log" \
  -kernel "$kernel" "${initrd[@]}" \
  -append "console=ttyAMA0 root=PARTUUID=4a6f756c-01 rootwait rootfstype=ext4 ro init=/sbin/joule-init panic=-1 quiet loglevel=4" \
  $(disk joule-root "$CACHE/root.img" ",readonly=on") \
  $(disk joule-in "$work/in.tar" ",readonly=on") \
  $(disk joule-out "$work/out.img" "") </dev/null >"$work/qemu.log" 2>&1
rc=$?
set -e
tar -xf "$work/out.img" -C "$out" 2>/dev/null || true
if [ ! -f "$out/status" ]; then
  cat "$work/qemu.log" >&2
  tail -n 40 "$out/console.log" >&2 || true
  if [ "$rc" = 124 ] || [ "$rc" = 137 ]; then echo "$DEB_ARCH-run: timed out after ${timeout_s}s" >&2; exit 124; fi
  echo "$DEB_ARCH-run: the guest reported no status (qemu exit $rc); its console's end is above" >&2
  exit 125
fi
cat "$out/stdout"
cat "$out/stderr" >&2
exit "$(cat "$out/status")"
