#!/usr/bin/env bash
# Builds target/<rust target>/release/joule for an ARM target (DEB_ARCH=arm64, the default:
# `make build-arm64`; DEB_ARCH=armhf: `make build-armhf`; scripts/arm64/arch.sh, docs/arm64.md),
# and, for arm64, joule-bpf's root test binary beside it as joule-bpf-root-tests (the guest runs it:
# every BPF program through the verifier, the process monitor's setuid hook).
# On an x86_64 host it cross-compiles with what `scripts/arm64/setup.sh cross` installed:
# Debian's gcc-<triple> compiles the C (libbpf, ring) and links, against the host release's
# glibc and the target's libelf/zlib/zstd unpacked into the sysroot, so the binary runs on a
# stock Debian of that architecture and release or later. The BPF objects need no cross
# compiler: clang -target bpf builds them against vmlinux/<arch>/vmlinux.h. On a host of the
# target's architecture this is a native build.
set -euo pipefail
cd "$(dirname "$0")/../.."
die() { echo "${DEB_ARCH:-arm}-build: $*" >&2; exit 2; }
# shellcheck source=scripts/arm64/arch.sh
source scripts/arm64/arch.sh
TARGET=$RUST_TARGET
export PATH="$HOME/.cargo/bin:$PATH"
if [ "$(uname -m)" != "$NATIVE_MACHINE" ]; then
  sysroot=$CACHE/sysroot
  [ -e "$sysroot/lib/libelf.so" ] || die "no sysroot in $sysroot: run DEB_ARCH=$DEB_ARCH scripts/arm64/setup.sh cross"
  lib=$sysroot/lib
  t=$(echo "$TARGET" | tr a-z- A-Z_)
  export "CC_${TARGET//-/_}=$GNU_TRIPLE-gcc" "AR_${TARGET//-/_}=$GNU_TRIPLE-ar" "CARGO_TARGET_${t}_LINKER=$GNU_TRIPLE-gcc"
  # libbpf's C sees libelf's and zlib's headers after the cross compiler's own; the link finds
  # libelf.so and libz.so there, and libelf's own dependency (libzstd) through -rpath-link.
  export LIBBPF_SYS_EXTRA_CFLAGS="-idirafter $sysroot/include"
  export "CARGO_TARGET_${t}_RUSTFLAGS=-L native=$lib -C link-arg=-Wl,-rpath-link,$lib"
fi
cargo build --release --locked --target "$TARGET" -p joule
# Debian builds its armhf kernels without BTF, so there is nothing to load the root tests into
# on armv7 (docs/arm64.md); the agent there runs without eBPF.
[ "$DEB_ARCH" = armhf ] && exit 0
tests=$(cargo test --release --locked --target "$TARGET" -p joule-bpf --test root_bpf --no-run --message-format=json |
        python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "root_bpf":
        print(m["executable"])')
[ -n "$tests" ] || die "cargo built no root_bpf test binary"
cp "$tests" "target/$TARGET/release/joule-bpf-root-tests"
