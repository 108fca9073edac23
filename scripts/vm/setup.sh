#!/usr/bin/env bash
# Installs what the VM test tier (tier 3) needs, outside the repo, and prints nothing when it
# is all there already. Called by `make vm-deps`; see docs/vm.md.
#
# The host kernel (6.18) has no sched_ext, so tier 3 boots Debian's trixie-backports cloud
# kernel (7.x, CONFIG_SCHED_CLASS_EXT=y) under qemu/TCG with virtme-ng, sharing the host's
# root filesystem read-only through virtiofsd. Everything lands in one cache directory:
#
#   $JOULE_VM_CACHE (default /var/cache/joule-vm)
#     apt/          private apt config: sources.list, lists/, cache/ (system sources untouched)
#     kernel/root-<ver>/usr/lib/modules/<ver>/{vmlinuz,kernel/,modules.dep}   dpkg -x'd debs
#     kernel/current -> root-<ver>       the kernel run.sh boots
#     kernel/lts-<suite> -> root-<ver>   Debian bookworm's 6.1 and trixie's 6.12 (vm_lts tests)
#     venv/         python venv with virtme-ng (vng)
#     cargo/bin/virtiofsd
#     thermal.aml   SSDT with the guest's ACPI thermal zone (from scripts/vm/thermal.asl)
#     debian-root/  the systemd guest's root (Debian trixie, systemd, D-Bus, nginx; systemd-guest.sh)
#     setup.log     output of the last step that did work
#
# Environment: JOULE_VM_CACHE (cache dir), JOULE_VM_MIRROR (Debian mirror URL; default: the
# one in this machine's apt sources), JOULE_VM_REFRESH=1 (look for a newer kernel).
set -euo pipefail

CACHE=${JOULE_VM_CACHE:-/var/cache/joule-vm}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

# Pinned tool versions. The kernel is not pinned: backports keeps only recent builds, so the
# newest 7.x cloud-amd64 is taken at first setup and kept until JOULE_VM_REFRESH=1.
VIRTME_NG_VERSION=1.42
VIRTIOFSD_VERSION=1.14.0
KERNEL_SUITE=trixie-backports
KERNEL_FLAVOUR=cloud-amd64

# Debian packages:
#   qemu-system-x86              the VM (TCG; KVM does not work on this host)
#   libseccomp-dev libcap-ng-dev pkg-config   build deps of virtiofsd
#   python3-venv                 virtme-ng's venv (Debian's python3)
#   acpica-tools                 iasl compiles the guest's thermal-zone SSDT
#   kmod                         depmod for the cached kernel; modprobe inside the guest
#   file                         vng reads the kernel version with it
#   busybox-static               vng's initramfs, used when it must load modules early
#   debootstrap                  the systemd guest's root (systemd-guest.sh)
PKGS=(qemu-system-x86 libseccomp-dev libcap-ng-dev pkg-config python3 python3-venv
      acpica-tools kmod file busybox-static debootstrap)

LOG=$CACHE/setup.log

say() { echo "vm-setup: $*"; }
die() { echo "vm-setup: $*" >&2; exit 1; }

# Runs a step with its output in setup.log, shown only when the step fails.
logged() {
  if ! "$@" >"$LOG" 2>&1; then
    tail -n 30 "$LOG" >&2
    die "failed: $* (full log: $LOG)"
  fi
}


# --- 1. Debian packages ------------------------------------------------------------------
# shellcheck source=scripts/lib/host-debs.sh
source "$HERE/../lib/host-debs.sh"
install_packages() { install_debs "${PKGS[@]}"; }

# --- 2. The sched_ext kernel ---------------------------------------------------------------
# shellcheck source=scripts/vm/mirror.sh
source "$HERE/mirror.sh"

# apt with a private sources file, lists and cache; the system's sources are never touched.
APT_DIR=$CACHE/apt
APT_OPTS=(-o "Dir::Etc::sourcelist=$APT_DIR/sources.list" -o "Dir::Etc::sourceparts=-"
          -o "Dir::State::Lists=$APT_DIR/lists" -o "Dir::Cache=$APT_DIR/cache"
          -o "APT::Sandbox::User=root" -o "Acquire::Languages=none")

fetch_kernel() {
  local kdir=$CACHE/kernel
  if [ -e "$kdir/current" ] && [ "${JOULE_VM_REFRESH:-0}" != 1 ]; then
    local ver; ver=$(cat "$kdir/current/VERSION" 2>/dev/null || true)
    [ -n "$ver" ] && [ -f "$kdir/current/usr/lib/modules/$ver/vmlinuz" ] &&
      [ -f "$kdir/current/usr/lib/modules/$ver/modules.dep" ] && return 0
  fi
  local mirror keyring=/usr/share/keyrings/debian-archive-keyring.gpg signed=""
  mirror=$(debian_mirror)
  [ -r "$keyring" ] && signed="[signed-by=$keyring] "
  mkdir -p "$APT_DIR/lists/partial" "$APT_DIR/cache/archives/partial"
  echo "deb ${signed}$mirror $KERNEL_SUITE main" >"$APT_DIR/sources.list"
  say "looking up the newest 7.x $KERNEL_FLAVOUR kernel in $KERNEL_SUITE"
  logged apt-get "${APT_OPTS[@]}" update

  # linux-binary-<ver> holds vmlinuz, linux-base-<ver> config/System.map, linux-modules-<ver>
  # the modules (overlayfs, veth, sch_htb, ...). Older layouts ship one linux-image-<ver>.
  local ver
  ver=$(apt-cache "${APT_OPTS[@]}" pkgnames linux-binary-7. |
        sed -n "s/^linux-binary-\(7\.[0-9.]*+[a-z0-9]*-$KERNEL_FLAVOUR\)$/\1/p" | sort -V | tail -n 1)
  [ -n "$ver" ] || die "no linux-binary-7.*-$KERNEL_FLAVOUR in $KERNEL_SUITE at $mirror"
  local root=$kdir/root-$ver
  if [ -f "$root/usr/lib/modules/$ver/modules.dep" ]; then
    ln -sfn "root-$ver" "$kdir/current"
    return 0
  fi
  say "fetching kernel $ver"
  local debs=$CACHE/kernel/debs-$ver
  rm -rf "$debs" "$root.tmp"; mkdir -p "$debs" "$root.tmp"
  local pkgs=() p
  for p in linux-binary linux-base linux-modules; do
    apt-cache "${APT_OPTS[@]}" show "$p-$ver" >/dev/null 2>&1 && pkgs+=("$p-$ver")
  done
  (cd "$debs" && logged apt-get "${APT_OPTS[@]}" download "${pkgs[@]}")
  for p in "$debs"/*.deb; do dpkg -x "$p" "$root.tmp"; done
  [ -f "$root.tmp/usr/lib/modules/$ver/vmlinuz" ] || die "no vmlinuz in ${pkgs[*]}"
  # vng finds the modules next to the image (…/usr/lib/modules/<ver>/); the debs ship no
  # modules.dep, and depmod -b looks under <base>/lib/modules.
  ln -s usr/lib "$root.tmp/lib"
  logged depmod -a -b "$root.tmp" "$ver"
  echo "$ver" >"$root.tmp/VERSION"
  rm -rf "$root" "$debs"; mv "$root.tmp" "$root"
  ln -sfn "root-$ver" "$kdir/current"
  grep -q '^CONFIG_SCHED_CLASS_EXT=y' "$root/usr/lib/modules/$ver/config" ||
    say "warning: kernel $ver has no CONFIG_SCHED_CLASS_EXT=y"
}

# --- 2b. The distributions' LTS kernels ------------------------------------------------------
# Operators run their distribution's kernel: Debian 12's 6.1 and Debian 13's 6.12 (cloud
# flavour: virtio, BTF, cgroup v2; neither has sched_ext). Each is the suite's newest
# linux-image-*-cloud-amd64-unsigned at first setup, kept until JOULE_VM_REFRESH=1, unpacked to
# kernel/lts-<suite>/ in the layout vng boots (…/usr/lib/modules/<ver>/vmlinuz, modules.dep).
LTS_SUITES=(bookworm trixie)
fetch_lts_kernel() {
  local suite=$1 link=$CACHE/kernel/lts-$1
  if [ -e "$link/VERSION" ] && [ "${JOULE_VM_REFRESH:-0}" != 1 ]; then
    local v; v=$(cat "$link/VERSION")
    [ -f "$link/usr/lib/modules/$v/vmlinuz" ] && [ -f "$link/usr/lib/modules/$v/modules.dep" ] && return 0
  fi
  local mirror keyring=/usr/share/keyrings/debian-archive-keyring.gpg signed="" dir=$CACHE/apt-$suite
  mirror=$(debian_mirror)
  [ -r "$keyring" ] && signed="[signed-by=$keyring] "
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  echo "deb ${signed}$mirror $suite main" >"$dir/sources.list"
  local opts=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=-"
              -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache"
              -o "APT::Sandbox::User=root" -o "Acquire::Languages=none")
  say "looking up the newest cloud-amd64 kernel in $suite"
  logged apt-get "${opts[@]}" update
  local pkg ver
  pkg=$(apt-cache "${opts[@]}" pkgnames linux-image- | grep -E -- '-cloud-amd64-unsigned$' | sort -V | tail -n 1)
  [ -n "$pkg" ] || die "no linux-image-*-cloud-amd64-unsigned in $suite at $mirror"
  ver=${pkg#linux-image-}; ver=${ver%-unsigned}
  local root=$CACHE/kernel/root-$ver
  if [ ! -f "$root/usr/lib/modules/$ver/modules.dep" ]; then
    say "fetching kernel $ver"
    local debs=$CACHE/kernel/debs-$ver
    rm -rf "$debs" "$root.tmp"; mkdir -p "$debs" "$root.tmp"
    (cd "$debs" && logged apt-get "${opts[@]}" download "$pkg")
    dpkg -x "$debs"/*.deb "$root.tmp"
    # bookworm's package keeps /lib/modules and /boot; trixie's /usr/lib/modules and /boot.
    if [ -d "$root.tmp/lib/modules" ] && [ ! -L "$root.tmp/lib" ]; then
      mkdir -p "$root.tmp/usr/lib"; cp -a "$root.tmp/lib/modules" "$root.tmp/usr/lib/"; rm -rf "$root.tmp/lib"
    fi
    local m=$root.tmp/usr/lib/modules/$ver
    [ -f "$root.tmp/boot/vmlinuz-$ver" ] || die "no vmlinuz in $pkg"
    cp "$root.tmp/boot/vmlinuz-$ver" "$m/vmlinuz"
    cp "$root.tmp/boot/config-$ver" "$m/config"
    rm -rf "$root.tmp/boot"
    ln -s usr/lib "$root.tmp/lib"
    logged depmod -a -b "$root.tmp" "$ver"
    echo "$ver" >"$root.tmp/VERSION"
    rm -rf "$root" "$debs"; mv "$root.tmp" "$root"
  fi
  ln -sfn "root-$ver" "$link"
}

# --- 3. virtme-ng ------------------------------------------------------------------------
install_virtme_ng() {
  local venv=$CACHE/venv
  [ -x "$venv/bin/vng" ] && [ "$(cat "$venv/.joule-version" 2>/dev/null)" = "$VIRTME_NG_VERSION" ] && return 0
  say "installing virtme-ng $VIRTME_NG_VERSION into $venv"
  local py=/usr/bin/python3
  [ -x "$py" ] || py=$(command -v python3)
  rm -rf "$venv"
  logged "$py" -m venv "$venv"
  logged "$venv/bin/pip" install --disable-pip-version-check -q "virtme-ng==$VIRTME_NG_VERSION"
  echo "$VIRTME_NG_VERSION" >"$venv/.joule-version"
}

# --- 4. virtiofsd ------------------------------------------------------------------------
install_virtiofsd() {
  local bin=$CACHE/cargo/bin/virtiofsd
  [ -x "$bin" ] && [ "$(cat "$CACHE/cargo/.joule-version" 2>/dev/null)" = "$VIRTIOFSD_VERSION" ] && return 0
  if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
    export PATH="$HOME/.cargo/bin:$PATH"
  fi
  command -v cargo >/dev/null 2>&1 || die "cargo not found (needed to build virtiofsd)"
  say "building virtiofsd $VIRTIOFSD_VERSION (about 2 minutes)"
  # Its own target dir so the build neither uses nor pollutes the workspace's.
  CARGO_TARGET_DIR=$CACHE/cargo/build logged cargo install virtiofsd \
    --version "$VIRTIOFSD_VERSION" --locked --root "$CACHE/cargo"
  rm -rf "$CACHE/cargo/build"
  echo "$VIRTIOFSD_VERSION" >"$CACHE/cargo/.joule-version"
}

# --- 5. The guest's thermal zone ---------------------------------------------------------
compile_thermal_ssdt() {
  local src=$HERE/thermal.asl out=$CACHE/thermal.aml sum
  [ -f "$src" ] || return 0
  # Keyed by the source's content: clones with different thermal.asl share one cache.
  sum=$(sha256sum <"$src" | cut -d' ' -f1)
  [ -f "$out" ] && [ "$(cat "$out.sha256" 2>/dev/null)" = "$sum" ] && return 0
  say "compiling $src"
  local tmp; tmp=$(mktemp -d)
  logged iasl -p "$tmp/thermal" "$src"
  mv "$tmp/thermal.aml" "$out"
  echo "$sum" >"$out.sha256"
  rm -rf "$tmp"
}

# The x86 guests share this host's root filesystem (its binaries run in them): they need an
# x86_64 host. On an aarch64 host tier 3 is the arm64 guest (scripts/arm64/setup.sh guest), and
# the x86 guests' tests say the capability is absent.
[ "$(uname -m)" = x86_64 ] || exit 0

mkdir -p "$CACHE"
install_packages
fetch_kernel
for suite in "${LTS_SUITES[@]}"; do fetch_lts_kernel "$suite"; done
install_virtme_ng
install_virtiofsd
compile_thermal_ssdt
# --- 6. The systemd guest's root (issue 20): debootstrap'd once ------------------------------
"$HERE/systemd-guest.sh" setup
