#!/usr/bin/env bash
# Installs what building joule for an ARM target and booting it in a guest of that
# architecture need, outside the repo, and prints nothing when it is all there (docs/arm64.md).
# DEB_ARCH=arm64 (default) or armhf picks the target (scripts/arm64/arch.sh).
#
#   setup.sh cross   the cross toolchain: Debian's gcc-<triple> and its glibc, Rust's standard
#                    library for the target, and a sysroot holding the target's libelf, zlib
#                    and zstd joule links (`make build-arm64`, `make build-armhf`)
#   setup.sh guest   the guest (`make vm-deps`): qemu, a Debian kernel (arm64: the cloud kernel
#                    7.x with sched_ext and BTF; armhf: trixie's armmp-lpae and an initramfs
#                    with its NVMe and ext4 modules) and a small Debian root as an ext4 image
#
# Everything lands in $CACHE (/var/cache/joule-arm64 or /var/cache/joule-armhf):
#   apt-<suite>/     private apt state for the target's packages (scripts/arm64/apt.sh)
#   sysroot/         include/ and lib/: the target's libelf, zlib and zstd joule links (dpkg -x'd)
#   kernel/<ver>/    the guest kernel (Image or zImage, config; armhf: initrd.img),
#                    kernel/current -> <ver>
#   root.img         the guest's root filesystem (ext4, read-only in the guest), root.img.key
#                    says what it was built from
#   setup.log        output of the last step that did work
# On a host of the target's own architecture `cross` adds nothing: the native toolchain builds.
# Environment: DEB_ARCH, JOULE_ARM64_CACHE / JOULE_ARMHF_CACHE, JOULE_VM_MIRROR (as
# scripts/vm/setup.sh), JOULE_VM_REFRESH=1 (look for a newer kernel).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
say() { echo "$DEB_ARCH-setup: $*"; }
die() { echo "${DEB_ARCH:-arm}-setup: $*" >&2; exit 1; }
# shellcheck source=scripts/arm64/arch.sh
source "$HERE/arch.sh"
LOG=$CACHE/setup.log
# The root image's MBR disk signature; scripts/arm64/run.sh boots root=PARTUUID=<it>-01.
ROOT_DISK_ID=4a6f756c

# What the guest root holds (Debian's packages of the target, this host's release): the libraries joule links
# (libelf1, zlib1g), what the init and the checks run (bash, dash as /bin/sh, coreutils, grep,
# sed, awk, procps, util-linux, mount, hostname, iproute2 for loopback, findutils, tar, python3
# for JSON, curl for the agent's endpoint) and stress-ng, the load of the scheduler check. fio
# is left out: on arm64 it pulls in glusterfs, ceph and perl (+200 MB).
GUEST_PKGS=(libc6 libelf1 zlib1g bash dash coreutils grep sed mawk procps util-linux mount hostname iproute2 findutils tar
            python3-minimal libpython3-stdlib python3 curl stress-ng)

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
  [ "$(uname -m)" = "$NATIVE_MACHINE" ] && return 0
  # gcc-aarch64-linux-gnu / gcc-arm-linux-gnueabihf: the C cross compiler and linker (libbpf,
  # ring, the final link); libc6-dev-arm64-cross / libc6-dev-armhf-cross: its glibc, the host
  # release's, so the binary needs no newer one.
  install_debs "gcc-$GNU_TRIPLE" "libc6-dev-$DEB_ARCH-cross"
  if ! command -v rustup >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/rustup" ]; then export PATH="$HOME/.cargo/bin:$PATH"; fi
  command -v rustup >/dev/null 2>&1 || die "rustup not found: install Rust with rustup first"
  if ! rustup target list --installed 2>/dev/null | grep -qx "$RUST_TARGET"; then
    say "adding Rust's $RUST_TARGET standard library"
    logged rustup target add "$RUST_TARGET"
  fi
  local suite; suite=$(host_suite)
  local sysroot=$CACHE/sysroot key="$suite libelf-dev zlib1g-dev libzstd-dev 2"
  [ "$(cat "$sysroot/.key" 2>/dev/null)" = "$key" ] && return 0
  say "unpacking Debian $suite's $DEB_ARCH libelf, zlib and zstd into $sysroot"
  local tmp=$CACHE/sysroot.tmp
  rm -rf "$sysroot" "$tmp"
  arch_unpack "$suite" "$tmp" libelf-dev zlib1g-dev libzstd-dev
  # Only what joule links goes into the sysroot (the packages also drag in the target's libc6-dev,
  # whose linker scripts name absolute paths; the cross toolchain brings its own glibc): the
  # headers libbpf includes and the three shared libraries, symlinks resolved (some of
  # Debian's are absolute and would point into the host's /lib).
  mkdir -p "$sysroot/include" "$sysroot/lib"
  cp -a "$tmp/usr/include/"{libelf.h,gelf.h,nlist.h,zlib.h,zconf.h} "$sysroot/include/"
  local l f
  for l in libelf.so libelf.so.1 libz.so libz.so.1 libzstd.so.1; do
    for f in "$tmp/usr/lib/$GNU_TRIPLE/$l" "$tmp/lib/$GNU_TRIPLE/$l"; do
      [ -L "$f" ] || [ -e "$f" ] || continue
      while [ -L "$f" ]; do # follow the links inside the unpacked tree, absolute ones too
        case $(readlink "$f") in /*) f=$tmp$(readlink "$f") ;; *) f=$(dirname "$f")/$(readlink "$f") ;; esac
      done
      cp "$f" "$sysroot/lib/$l"
      break
    done
    [ -f "$sysroot/lib/$l" ] || die "no $l in Debian $suite's $DEB_ARCH packages"
  done
  rm -rf "$tmp"
  echo "$key" >"$sysroot/.key"
}

# --- guest ---------------------------------------------------------------------------------
guest_kernel() {
  local kdir=$CACHE/kernel
  if [ -e "$kdir/current/$KERNEL_FILE" ] && [ "${JOULE_VM_REFRESH:-0}" != 1 ]; then return 0; fi
  local ver
  ver=$(arch_pkgnames "$KERNEL_SUITE" "$KERNEL_PKG" |
        sed -n "s/^$KERNEL_PKG\($KERNEL_VERSION-$KERNEL_FLAVOUR\)$/\1/p" | sort -V | tail -n 1)
  [ -n "$ver" ] || die "no $KERNEL_PKG*-$KERNEL_FLAVOUR in $KERNEL_SUITE"
  if [ ! -f "$kdir/$ver/$KERNEL_FILE" ]; then
    say "fetching the $DEB_ARCH kernel $ver"
    local tmp=$kdir/$ver.tmp
    rm -rf "$tmp"
    case $DEB_ARCH in
      arm64) arch_unpack "$KERNEL_SUITE" "$tmp" "linux-binary-$ver" "linux-base-$ver" ;;
      # The package alone: what it depends on (initramfs-tools, kmod, udev) would only make an
      # initramfs on the target, which guest_initrd does here instead.
      armhf) arch_download "$KERNEL_SUITE" "$tmp" "linux-image-$ver" ;;
    esac
    local m=$tmp/usr/lib/modules/$ver vmlinuz config
    for vmlinuz in "$m/vmlinuz" "$tmp/boot/vmlinuz-$ver"; do [ -f "$vmlinuz" ] && break; done
    for config in "$m/config" "$tmp/boot/config-$ver"; do [ -f "$config" ] && break; done
    [ -f "$vmlinuz" ] && [ -f "$config" ] || die "no vmlinuz or config in the $ver kernel package"
    grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$config" || say "note: kernel $ver has no CONFIG_SCHED_CLASS_EXT=y"
    grep -q '^CONFIG_DEBUG_INFO_BTF=y' "$config" || say "note: kernel $ver has no CONFIG_DEBUG_INFO_BTF=y (joule runs without eBPF there)"
    # Only what a boot needs: the kernel as qemu loads it (arm64's vmlinuz is an uncompressed
    # Image, armhf's a zImage) and the config. arm64 needs no modules (the root, its disks and
    # every check use built-in drivers: NVMe, ext4, PL011, cgroup2, BPF); armhf's NVMe and
    # ext4 go into an initramfs.
    mkdir -p "$kdir/$ver"
    [ "$DEB_ARCH" = armhf ] && guest_initrd "$m" "$kdir/$ver/initrd.img"
    mv "$vmlinuz" "$kdir/$ver/$KERNEL_FILE"
    mv "$config" "$kdir/$ver/config"
    echo "$ver" >"$kdir/$ver/VERSION"
    rm -rf "$tmp"
  fi
  ln -sfn "$ver" "$kdir/current"
}

# The modules armhf's root needs before it can be mounted, and what they need (their modinfo
# `depends`, resolved when the initramfs is made); crc32c_generic because ext4's metadata
# checksums ask the crypto API for it by name, which nothing in the initramfs would load.
INITRD_MODULES=(nvme ext4 crc32c_generic)

# guest_initrd MODULES_DIR OUT: an initramfs (newc cpio, gzip) of Debian's static busybox, the
# modules above decompressed, and scripts/arm64/initrd-init as /init, which loads them, mounts
# the root disk read-only and hands over to /sbin/joule-init. No code of the target runs here.
guest_initrd() {
  local mods=$1 out=$2 suite ir
  suite=$(host_suite)
  ir=$(dirname "$out")/initrd.tmp
  rm -rf "$ir"
  # busybox-static: sh, insmod, mount and switch_root in one binary with no libraries.
  arch_download "$suite" "$ir.deb" busybox-static
  mkdir -p "$ir"/{bin,dev,proc,sys,newroot,lib/modules}
  cp "$ir.deb/bin/busybox" "$ir/bin/busybox"
  rm -rf "$ir.deb"
  python3 - "$mods/kernel" "$ir/lib/modules" "${INITRD_MODULES[@]}" <<'PY' || die "cannot resolve the initramfs modules"
import lzma, os, struct, sys
src, dest, want = sys.argv[1], sys.argv[2], sys.argv[3:]
index = {}
for d, _, fs in os.walk(src):
    for f in fs:
        if f.endswith(".ko.xz"):
            index[f[:-6].replace("-", "_")] = os.path.join(d, f)

def depends(ko):
    """The `depends=` of a 32-bit little-endian module's .modinfo section."""
    shoff, = struct.unpack_from("<I", ko, 0x20)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", ko, 0x2E)
    sec = [struct.unpack_from("<10I", ko, shoff + i * shentsize) for i in range(shnum)]
    names = sec[shstrndx][4]
    for s in sec:
        if ko[names + s[0]:ko.index(b"\0", names + s[0])] == b".modinfo":
            for kv in ko[s[4]:s[4] + s[5]].split(b"\0"):
                if kv.startswith(b"depends="):
                    return [m.replace("-", "_") for m in kv[8:].decode().split(",") if m]
    return []

order = []
def visit(m):
    if m in order:
        return
    ko = lzma.decompress(open(index[m], "rb").read())
    for d in depends(ko):
        visit(d)
    open(os.path.join(dest, m + ".ko"), "wb").write(ko)
    order.append(m)

for m in want:
    visit(m)
open(os.path.join(dest, "order"), "w").write("\n".join(order) + "\n")
PY
  install -m 0755 "$HERE/initrd-init" "$ir/init"
  (cd "$ir" && find . | sort | cpio --quiet -o -H newc -R 0:0) | gzip -9 >"$out.tmp"
  mv "$out.tmp" "$out"
  rm -rf "$ir"
}

# The guest root: Debian's packages of the target unpacked, a few files no maintainer script wrote, and
# scripts/arm64/init as /sbin/joule-init, made into an ext4 image by mke2fs -d (no mount, no
# loop device). Rebuilt when the init, this script (the package list) or the host's release
# changes.
guest_root() {
  local suite key img=$CACHE/root.img
  suite=$(host_suite)
  key="$suite ${GUEST_PKGS[*]} $(cat "$HERE/init" "$HERE/setup.sh" | sha256sum | cut -d' ' -f1)"
  [ -f "$img" ] && [ "$(cat "$img.key" 2>/dev/null)" = "$key" ] && return 0
  say "building the $DEB_ARCH guest root from Debian $suite (${#GUEST_PKGS[@]} packages and their dependencies)"
  local root=$CACHE/root.tmp
  rm -rf "$root"
  arch_unpack "$suite" "$root" "${GUEST_PKGS[@]}"
  # What maintainer scripts or base-files would have made (users, the /bin/sh, python3 and awk
  # alternatives).
  mkdir -p "$root"/{proc,sys,dev,run,tmp,var/tmp,root,joule,etc}
  chmod 1777 "$root/tmp" "$root/var/tmp"
  printf 'root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n' >"$root/etc/passwd"
  printf 'root:x:0:\nnogroup:x:65534:\n' >"$root/etc/group"
  echo "joule-$DEB_ARCH" >"$root/etc/hostname"
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
  # qemu-system-arm: qemu-system-aarch64 and qemu-system-arm; e2fsprogs: mke2fs -d builds the
  # root image; cpio: armhf's initramfs.
  local debs=(qemu-system-arm e2fsprogs)
  [ "$DEB_ARCH" = armhf ] && debs+=(cpio)
  install_debs "${debs[@]}"
  guest_kernel
  guest_root
}

mkdir -p "$CACHE"
case "${1:-}" in
  cross) cross ;;
  guest) guest ;;
  *) echo "usage: $0 cross|guest" >&2; exit 2 ;;
esac
