#!/usr/bin/env bash
# Installs what building and testing joule needs on a Debian host, and nothing when it is
# all there already (idempotent and quiet). Called by `make run` and `make test`.
set -euo pipefail

# Debian packages the host build and the root test tier need:
#   clang-16       compiles src/bpf/*.bpf.c (-target bpf); bookworm's default clang-14 is older
#   bpftool        dumps vmlinux.h from the running kernel's BTF
#   libclang1-16   bindgen (joule-bpf's build.rs) loads it to turn src/bpf/intf.h into Rust
#   libelf-dev zlib1g-dev pkg-config   libbpf-sys builds its vendored libbpf against them
#   iproute2       ip netns / tc for the network tests
#   procps         ps/sysctl used by tests and the hooks
#   prometheus     ships /usr/bin/promtool, which the root tier runs on /metrics (no promtool-only
#                  package; on a systemd host it also enables a Prometheus server on :9090)
PKGS=(clang-16 llvm-16 libclang1-16 bpftool libelf-dev zlib1g-dev pkg-config make iproute2 procps prometheus)

missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "install-deps: installing ${missing[*]}"
  if [ "$(id -u)" != 0 ]; then
    echo "install-deps: need root to apt-get install ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if ! command -v cargo >/dev/null 2>&1 && [ -x "$HOME/.cargo/bin/cargo" ]; then
  export PATH="$HOME/.cargo/bin:$PATH"
fi
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo not found; install Rust with rustup first" >&2; exit 1; }
