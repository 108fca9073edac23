#!/usr/bin/env bash
# Builds target/aarch64-unknown-linux-gnu/release/joule (`make build-arm64`, docs/arm64.md), and
# joule-bpf's root test binary beside it as joule-bpf-root-tests (the arm64 guest runs it: every
# BPF program through the verifier, the process monitor's setuid hook).
# On an x86_64 host it cross-compiles with what `scripts/arm64/setup.sh cross` installed:
# Debian's gcc-aarch64-linux-gnu compiles the C (libbpf, ring) and links, against the host
# release's glibc and the arm64 libelf/zlib/zstd unpacked into the sysroot, so the binary runs on
# a stock arm64 Debian of the same release or later. The BPF objects need no cross compiler:
# clang -target bpf builds them against vmlinux/aarch64/vmlinux.h. On an aarch64 host this is a
# native build.
set -euo pipefail
cd "$(dirname "$0")/../.."
CACHE=${JOULE_ARM64_CACHE:-/var/cache/joule-arm64}
TARGET=aarch64-unknown-linux-gnu
export PATH="$HOME/.cargo/bin:$PATH"
if [ "$(uname -m)" != aarch64 ]; then
  sysroot=$CACHE/sysroot
  [ -e "$sysroot/lib/libelf.so" ] || { echo "arm64-build: no sysroot in $sysroot: run scripts/arm64/setup.sh cross" >&2; exit 2; }
  lib=$sysroot/lib
  export CC_aarch64_unknown_linux_gnu=aarch64-linux-gnu-gcc
  export AR_aarch64_unknown_linux_gnu=aarch64-linux-gnu-ar
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_LINKER=aarch64-linux-gnu-gcc
  # libbpf's C sees libelf's and zlib's headers after the cross compiler's own; the link finds
  # libelf.so and libz.so there, and libelf's own dependency (libzstd) through -rpath-link.
  export LIBBPF_SYS_EXTRA_CFLAGS="-idirafter $sysroot/include"
  export CARGO_TARGET_AARCH64_UNKNOWN_LINUX_GNU_RUSTFLAGS="-L native=$lib -C link-arg=-Wl,-rpath-link,$lib"
fi
cargo build --release --locked --target "$TARGET" -p joule
tests=$(cargo test --release --locked --target "$TARGET" -p joule-bpf --test root_bpf --no-run --message-format=json |
        python3 -c 'import json, sys
for l in sys.stdin:
    m = json.loads(l)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "root_bpf":
        print(m["executable"])')
[ -n "$tests" ] || { echo "arm64-build: cargo built no root_bpf test binary" >&2; exit 1; }
cp "$tests" "target/$TARGET/release/joule-bpf-root-tests"
