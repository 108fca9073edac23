#!/usr/bin/env bash
# Installs what building joule for aarch64 and booting it in an arm64 guest need, outside the
# repo, and prints nothing when it is all there (docs/arm64.md).
#
#   setup.sh cross   the cross toolchain: Debian's gcc-aarch64-linux-gnu, Rust's
#                    aarch64-unknown-linux-gnu standard library, and a sysroot holding the
#                    arm64 libelf, zlib and zstd joule links (`make build-arm64`)
#   setup.sh guest   the arm64 guest: qemu-system-aarch64, Debian's arm64 cloud kernel 7.x
#                    (sched_ext, BTF) and a small Debian arm64 root as an ext4 image (`make vm-deps`)
#
# Everything lands in $JOULE_ARM64_CACHE (default /var/cache/joule-arm64):
#   apt-<suite>/     private apt state for arm64 packages (scripts/arm64/apt.sh)
#   sysroot/         include/ and lib/: the arm64 libelf, zlib and zstd joule links (dpkg -x'd)
#   kernel/<ver>/    the guest kernel (Image, config), kernel/current -> <ver>
#   root.img         the guest's root filesystem (ext4, read-only in the guest), root.img.key
#                    says what it was built from
#   setup.log        output of the last step that did work
# On an aarch64 host `cross` only adds nothing: the native toolchain builds for it.
# Environment: JOULE_ARM64_CACHE, JOULE_VM_MIRROR (as scripts/vm/setup.sh), JOULE_VM_REFRESH=1
# (look for a newer kernel).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
CACHE=${JOULE_ARM64_CACHE:-/var/cache/joule-arm64}
LOG=$CACHE/setup.log
KERNEL_SUITE=trixie-backports
KERNEL_FLAVOUR=cloud-arm64
RUST_TARGET=aarch64-unknown-linux-gnu
# The root image's MBR disk signature; scripts/arm64/run.sh boots root=PARTUUID=<it>-01.
ROOT_DISK_ID=4a6f756c

# What the guest root holds (Debian arm64, this host's release): the libraries joule links
# (libelf1, zlib1g), what the init and the checks run (bash, dash as /bin/sh, coreutils, grep,
# sed, awk, procps, util-linux, mount, hostname, iproute2 for loopback, findutils, tar, python3
# for JSON, curl for the agent's endpoint) and stress-ng, the load of the scheduler check. fio
# is left out: on arm64 it pulls in glusterfs, ceph and perl (+200 MB).
GUEST_PKGS=(libc6 libelf1 zlib1g bash dash coreutils grep sed mawk procps util-linux mount hostname iproute2 findutils tar
            python3-minimal libpython3-stdlib python3 curl stress-ng)

say() { echo "arm64-setup: $*"; }
die() { echo "arm64-setup: $*" >&2; exit 1; }

# Runs a step with its output in setup.log, shown only when the step fails.
logged() {
  if ! "$@" >"$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2
    die "failed: $* (full log: $LOG)"
  fi
}

# shellcheck source=scripts/arm64/apt.sh
source "$HERE/apt.sh"

# shellcheck source=scripts/lib/host-debs.sh
source "$HERE/../lib/host-debs.sh"

# --- cross ---------------------------------------------------------------------------------
cross() {
  [ "$(uname -m)" = aarch64 ] && return 0
  # gcc-aarch64-linux-gnu: the C cross compiler and linker (libbpf, ring, the final link);
  # libc6-dev-arm64-cross: its glibc, the host release's, so the binary needs no newer one.
  install_debs gcc-aarch64-linux-gnu libc6-dev-arm64-cross
  if ! command -v rustup >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/rustup" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
  command -v rustup >/dev/null 2>&1 || die "rustup not found: install Rust with rustup first"
  if ! rustup target list --installed 2>/dev/null | grep -qx "$RUST_TARGET"; then
    say "adding Rust's $RUST_TARGET standard library"
    logged rustup target add "$RUST_TARGET"
  fi
  local suite; suite=$(host_suite)
  local sysroot=$CACHE/sysroot key="$suite libelf-dev zlib1g-dev libzstd-dev 2"
  [ "$(cat "$sysroot/.key" 2>/dev/null)" = "$key" ] && return 0
  say "unpacking Debian $suite's arm64 libelf, zlib and zstd into $sysroot"
  local tmp=$CACHE/sysroot.tmp
  rm -rf "$sysroot" "$tmp"
  arm64_unpack "$suite" "$tmp" libelf-dev zlib1g-dev libzstd-dev
  # Only what joule links goes into the sysroot (the packages also drag in arm64 libc6-dev,
  # whose linker scripts name absolute paths; the cross toolchain brings its own glibc): the
  # headers libbpf includes and the three shared libraries, symlinks resolved (some of
  # Debian's are absolute and would point into the host's /lib).
  mkdir -p "$sysroot/include" "$sysroot/lib"
  cp -a "$tmp/usr/include/"{libelf.h,gelf.h,nlist.h,zlib.h,zconf.h} "$sysroot/include/"
  local l f
  for l in libelf.so libelf.so.1 libz.so libz.so.1 libzstd.so.1; do
    for f in "$tmp/usr/lib/aarch64-linux-gnu/$l" "$tmp/lib/aarch64-linux-gnu/$l"; do
      [ -L "$f" ] || [ -e "$f" ] || continue
      while [ -L "$f" ]; do # follow the links inside the unpacked tree, absolute ones too
        case $(readlink "$f") in /*) f=$tmp$(readlink "$f") ;; *) f=$(dirname "$f")/$(readlink "$f") ;; esac
      done
      cp "$f" "$sysroot/lib/$l"
      break
    done
    [ -f "$sysroot/lib/$l" ] || die "no $l in Debian $suite's arm64 packages"
  done
  rm -rf "$tmp"
  echo "$key" >"$sysroot/.key"
}

# --- guest ---------------------------------------------------------------------------------
guest_kernel() {
  local kdir=$CACHE/kernel
  if [ -e "$kdir/current/Image" ] && [ "${JOULE_VM_REFRESH:-0}" != 1 ]; then return 0; fi
  local ver
  ver=$(arm64_pkgnames "$KERNEL_SUITE" "linux-binary-7." |
        sed -n "s/^linux-binary-\(7\.[0-9.]*+[a-z0-9]*-$KERNEL_FLAVOUR\)$/\1/p" | sort -V | tail -n 1)
  [ -n "$ver" ] || die "no linux-binary-7.*-$KERNEL_FLAVOUR in $KERNEL_SUITE"
  if [ ! -f "$kdir/$ver/Image" ]; then
    say "fetching the arm64 kernel $ver"
    local tmp=$kdir/$ver.tmp
    rm -rf "$tmp"
    arm64_unpack "$KERNEL_SUITE" "$tmp" "linux-binary-$ver" "linux-base-$ver"
    local m=$tmp/usr/lib/modules/$ver
    [ -f "$m/vmlinuz" ] || die "no vmlinuz in linux-binary-$ver"
    grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$m/config" || say "warning: kernel $ver has no CONFIG_SCHED_CLASS_EXT=y"
    # Only what a boot needs: the Image (Debian's arm64 vmlinuz is an uncompressed Image that
    # qemu loads as it is) and the config; no modules (the root, its disks and every check use
    # built-in drivers: NVMe, ext4, PL011, cgroup2, BPF).
    mkdir -p "$kdir/$ver"
    mv "$m/vmlinuz" "$kdir/$ver/Image"
    mv "$m/config" "$kdir/$ver/config"
    echo "$ver" >"$kdir/$ver/VERSION"
    rm -rf "$tmp"
  fi
  ln -sfn "$ver" "$kdir/current"
}

# The guest root: Debian arm64 packages unpacked, a few files no maintainer script wrote, and
# scripts/arm64/init as /sbin/joule-init, made into an ext4 image by mke2fs -d (no mount, no
# loop device). Rebuilt when the init, this script (the package list) or the host's release
# changes.
guest_root() {
  local suite key img=$CACHE/root.img
  suite=$(host_suite)
  key="$suite ${GUEST_PKGS[*]} $(cat "$HERE/init" "$HERE/setup.sh" | sha256sum | cut -d' ' -f1)"
  [ -f "$img" ] && [ "$(cat "$img.key" 2>/dev/null)" = "$key" ] && return 0
  say "building the arm64 guest root from Debian $suite (${#GUEST_PKGS[@]} packages and their dependencies)"
  local root=$CACHE/root.tmp
  rm -rf "$root"
  arm64_unpack "$suite" "$root" "${GUEST_PKGS[@]}"
  # What maintainer scripts or base-files would have made (users, the /bin/sh, python3 and awk
  # alternatives).
  mkdir -p "$root"/{proc,sys,dev,run,tmp,var/tmp,root,joule,etc}
  chmod 1777 "$root/tmp" "$root/var/tmp"
  printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  echo joule-arm64 >"$root/etc/hostname"
  [ -e "$root/usr/bin/python3" ] || ln -s python3.11 "$root/usr/bin/python3"
  [ -e "$root/bin/sh" ] || ln -s dash "$root/bin/sh"
  [ -e "$root/usr/bin/awk" ] || ln -s mawk "$root/usr/bin/awk"
  install -m 0755 "$HERE/init" "$root/sbin/joule-init"
  # The guest has three NVMe disks whose names the kernel hands out in probe order, which
  # varies, so the root is found by its partition's id (root=PARTUUID=<ROOT_DISK_ID>-01): an
  # MBR with one Linux partition from 1 MiB on, the ext4 file system written at that offset.
  local size_mb
  size_mb=$(( $(du -sm "$root" | cut -f1) * 13 / 10 + 64 ))
  rm -f "$img.tmp"
  truncate -s "${size_mb}M" "$img.tmp"
  python3 - "$img.tmp" "$size_mb" "$ROOT_DISK_ID" <<'PY'
import struct, sys
path, size_mb, disk_id = sys.argv[1], int(sys.argv[2]), int(sys.argv[3], 16)
start = 2048                                    # sectors: the partition begins at 1 MiB
part = struct.pack("<B3sB3sII", 0, b"\xfe\xff\xff", 0x83, b"\xfe\xff\xff", start, size_mb * 2048 - start)
mbr = bytearray(512)
mbr[440:444] = struct.pack("<I", disk_id)       # the disk signature PARTUUID is made of
mbr[446:462] = part
mbr[510:512] = b"\x55\xaa"
with open(path, "r+b") as f:
    f.write(mbr)
PY
  logged mke2fs -q -F -t ext4 -L joule-root -E offset=1048576 -d "$root" "$img.tmp" "$((size_mb - 1))M"
  rm -rf "$root"
  mv "$img.tmp" "$img"
  echo "$key" >"$img.key"
}

guest() {
  # qemu-system-arm: qemu-system-aarch64; e2fsprogs: mke2fs -d builds the root image.
  install_debs qemu-system-arm e2fsprogs
  guest_kernel
  guest_root
}

mkdir -p "$CACHE"
case "${1:-}" in
  cross) cross ;;
  guest) guest ;;
  *) echo "usage: $0 cross|guest" >&2; exit 2 ;;
esac
