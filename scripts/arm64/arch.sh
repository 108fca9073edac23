# Sourced by the scripts in scripts/arm64/: the one table that tells the two ARM targets apart,
# so that the cross build, the private apt and the guest are the same scripts for both.
#   DEB_ARCH=arm64 (default)  aarch64: Raspberry Pi 5, RK3588 boards, arm64 servers
#   DEB_ARCH=armhf            armv7 hard-float: Odroid-XU4 (Exynos 5422) and other 32-bit boards
# Sets RUST_TARGET, GNU_TRIPLE (gcc's prefix and Debian's multiarch directory), NATIVE_MACHINE
# (`uname -m` of a host that builds natively), CACHE (JOULE_ARM64_CACHE / JOULE_ARMHF_CACHE, or
# /var/cache/joule-<arch>), and what the guest boots: KERNEL_SUITE, KERNEL_PKG (the package
# name up to its version), KERNEL_VERSION (a sed pattern of the versions taken),
# KERNEL_FLAVOUR, KERNEL_FILE (the name the kernel is cached under), QEMU, QEMU_CPU. The caller
# defines die.
# shellcheck shell=bash

DEB_ARCH=${DEB_ARCH:-arm64}
case $DEB_ARCH in
  arm64)
    RUST_TARGET=aarch64-unknown-linux-gnu GNU_TRIPLE=aarch64-linux-gnu NATIVE_MACHINE=aarch64
    CACHE=${JOULE_ARM64_CACHE:-/var/cache/joule-arm64}
    # Debian's cloud kernel 7.x: sched_ext, BTF, NVMe and ext4 built in; its vmlinuz is an
    # uncompressed Image that qemu loads as it is.
    KERNEL_SUITE=trixie-backports KERNEL_PKG=linux-binary- KERNEL_VERSION='7\.[0-9.]*+[a-z0-9]*'
    KERNEL_FLAVOUR=cloud-arm64 KERNEL_FILE=Image
    # A Cortex-A76, the Raspberry Pi 5's and the RK3588's big core (qemu's `max` adds SVE and
    # pointer authentication, which TCG emulates slowly).
    QEMU=qemu-system-aarch64 QEMU_CPU=cortex-a76
    ;;
  armhf)
    RUST_TARGET=armv7-unknown-linux-gnueabihf GNU_TRIPLE=arm-linux-gnueabihf NATIVE_MACHINE=armv7l
    CACHE=${JOULE_ARMHF_CACHE:-/var/cache/joule-armhf}
    # Debian builds no cloud kernel for armhf. armmp-lpae is its kernel for the cores with the
    # Large Physical Address Extension (Cortex-A7/A15, the Exynos 5422's), the one Debian
    # installs on an XU4; it also reaches the PCIe window qemu's virt machine puts above 4 GiB
    # (plain armmp would need highmem=off). Trixie's 6.12, the stable release's kernel: the
    # 7.x armhf kernels of trixie-backports were not downloadable here. NVMe and ext4 are
    # modules in it, so setup.sh gives the guest an initramfs that loads them.
    KERNEL_SUITE=trixie KERNEL_PKG=linux-image- KERNEL_VERSION='6\.[0-9.]*+deb13'
    KERNEL_FLAVOUR=armmp-lpae KERNEL_FILE=zImage
    # A Cortex-A15, the Odroid-XU4's big core.
    QEMU=qemu-system-arm QEMU_CPU=cortex-a15
    ;;
  *) die "unknown DEB_ARCH=$DEB_ARCH (arm64 or armhf)" ;;
esac
