#!/usr/bin/env bash
# Installs what joule needs on a Debian host, and nothing when it is all there already
# (idempotent and quiet). Usage: install-deps.sh [build|test|deb]
#   build  (make build, make run, make install) what building and running the agent needs
#   test   (make test) that, plus the tools only the test tiers use
#   deb    (make deb) dpkg-dev, lintian and binutils, to package the built binary
set -euo pipefail
WHAT=${1:-build}

# Debian packages building joule needs:
#   clang-16       compiles src/bpf/*.bpf.c (-target bpf); bookworm's default clang-14 is older
#   libclang1-16   bindgen (joule-bpf's build.rs) loads it to turn src/bpf/intf.h into Rust
#   libelf-dev zlib1g-dev pkg-config   libbpf-sys builds its vendored libbpf against them
#   protobuf-compiler   protoc: joule-kube's CRI client is generated from the CRI protobufs
BUILD_PKGS=(clang-16 llvm-16 libclang1-16 libelf-dev zlib1g-dev pkg-config make protobuf-compiler)
# ...and the test tiers:
#   bpftool        scripts/check-leftovers.sh lists loaded joule programs with `bpftool prog
#                  show` after the test tiers; scripts/gen-vmlinux.sh dumps the VM kernel's BTF
#   iproute2       ip netns / tc for the network tests
#   procps         ps/sysctl used by tests and the hooks
#   iperf3         the traffic of `joule-bench net-qos` (its server runs in the bench's netns, never as a service)
#   fio stress-ng  the I/O and CPU load of `joule-bench thermal` and of the thermal VM checks
#                  (the guest shares the host's root filesystem, so installing here serves both)
#   python3        /usr/bin/python3 with its standard library (socket, resource): processes that
#                  rename themselves, fork storms and a connection flood in the root tests
#   gcc libc6-dev  a static /pause for the Kubernetes root tests' image (scripts/kube/test-image.sh)
#   tmux           a real terminal for the `joule monitor` dashboard's root test (it types keys, reads the screen)
TEST_PKGS=(bpftool iproute2 procps fio stress-ng iperf3 python3 gcc libc6-dev tmux)
# ...and packaging (scripts/deb.sh): dpkg-shlibdeps, lintian, objcopy/readelf.
DEB_PKGS=(dpkg-dev lintian binutils)

case $WHAT in
  build) PKGS=("${BUILD_PKGS[@]}") ;;
  test) PKGS=("${BUILD_PKGS[@]}" "${TEST_PKGS[@]}") ;;
  deb) PKGS=("${DEB_PKGS[@]}") ;;
  *) echo "usage: install-deps.sh [build|test|deb]" >&2; exit 2 ;;
esac

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

[ "$WHAT" = deb ] && exit 0

# cargo: rustup puts it in ~/.cargo/bin. Under sudo, root's PATH has none: the Makefile then
# builds as the invoking user (SUDO_USER) with theirs.
if ! command -v cargo >/dev/null 2>&1; then
  for home in "$HOME" ${SUDO_USER:+"$(getent passwd "$SUDO_USER" | cut -d: -f6)"}; do
    [ -x "$home/.cargo/bin/cargo" ] && export PATH="$home/.cargo/bin:$PATH" && break
  done
fi
command -v cargo >/dev/null 2>&1 || { echo "install-deps: cargo not found; install Rust with rustup first (as the user who builds)" >&2; exit 1; }
[ "$WHAT" = test ] || exit 0

# rustfmt and clippy check the house rules in the unit tier (rustup's default profile has them).
for c in rustfmt clippy; do
  if ! cargo "${c/rustfmt/fmt}" --version >/dev/null 2>&1; then
    echo "install-deps: adding the $c component"
    rustup component add "$c" >/dev/null
  fi
done

# promtool (Prometheus's own linter, run by the root tier on /metrics and by the unit tier on
# deploy/prometheus/joule-rules.yml) and the Prometheus server (the root tier scrapes an agent with
# it, loopback only, storage in a temp dir: crates/joule/tests/root_agent/fleet.rs) ship only in
# Debian's `prometheus` package, whose install would also enable and start a Prometheus server.
# So the package is downloaded and only the two binaries are unpacked (dpkg -x), into a cache
# outside the repo; nothing is installed. Tests find them through $JOULE_PROMTOOL /
# $JOULE_PROMETHEUS or this default path.
TOOLS=${JOULE_TOOLS:-/var/cache/joule-tools}
if { [ ! -x "$TOOLS/bin/promtool" ] || [ ! -x "$TOOLS/bin/prometheus" ]; } && [ "$(id -u)" = 0 ]; then
  echo "install-deps: unpacking promtool and prometheus into $TOOLS/bin (from Debian's prometheus package, not installed)"
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  ( cd "$work" && { apt-get download -qq prometheus 2>/dev/null || { apt-get update -qq && apt-get download -qq prometheus; }; } )
  dpkg -x "$work"/prometheus_*.deb "$work/root"
  mkdir -p "$TOOLS/bin"
  install -m 0755 "$work/root/usr/bin/promtool" "$TOOLS/bin/promtool"
  install -m 0755 "$work/root/usr/bin/prometheus" "$TOOLS/bin/prometheus"
fi

# nginx (the HTTP server `joule-bench nap` freezes and wakes): installing Debian's package would
# enable and start the system service, so as for promtool only the binary is unpacked into the
# cache; the bench runs it with its own config, pid and logs under a temp dir.
if [ ! -x "$TOOLS/bin/nginx" ] && [ "$(id -u)" = 0 ]; then
  echo "install-deps: unpacking nginx into $TOOLS/bin (from Debian's nginx package, not installed)"
  work=$(mktemp -d); ( cd "$work" && { apt-get download -qq nginx 2>/dev/null || { apt-get update -qq && apt-get download -qq nginx; }; } ) && dpkg -x "$work"/nginx_*.deb "$work/root" && mkdir -p "$TOOLS/bin" && install -m 0755 "$work/root/usr/sbin/nginx" "$TOOLS/bin/nginx"; rm -rf "$work"
fi

# containerd and runc (the Kubernetes root tests' container runtime, joule-testkit's
# containerd harness): Debian's packages would install and enable a system containerd, so as for
# nginx only their binaries are unpacked into the cache; the tests run containerd with a config,
# state and socket of their own.
if [ ! -x "$TOOLS/bin/runc" ] && [ "$(id -u)" = 0 ]; then
  echo "install-deps: unpacking containerd and runc into $TOOLS/bin (from Debian's packages, not installed)"
  work=$(mktemp -d)
  ( cd "$work" && { apt-get download -qq containerd runc 2>/dev/null || { apt-get update -qq && apt-get download -qq containerd runc; }; } )
  for deb in "$work"/containerd_*.deb "$work"/runc_*.deb; do dpkg -x "$deb" "$work/root"; done
  mkdir -p "$TOOLS/bin"
  for b in bin/containerd bin/containerd-shim-runc-v2 bin/ctr sbin/runc; do install -m 0755 "$work/root/usr/$b" "$TOOLS/bin/"; done
  rm -rf "$work"
fi

# The Kubernetes manifest check (scripts/kube/manifest-check.sh, run by the unit tier) is a Go
# program over k8s.io/api's own types. Its modules go into Go's module cache (`go env
# GOMODCACHE`: ~/go/pkg/mod unless set, kept between runs) from the module proxy `go env
# GOPROXY` names, and it is built once here to fill Go's build cache; the check itself then
# builds offline in about a second. Without a Go toolchain the check skips, naming it.
GO=$(command -v go || true)
[ -n "$GO" ] || [ ! -x /usr/local/go/bin/go ] || GO=/usr/local/go/bin/go
if [ -n "$GO" ]; then
  mc="$(cd "$(dirname "$0")" && pwd)/kube/manifest-check"
  if ! (cd "$mc" && GOFLAGS=-mod=readonly GOPROXY=off GOTOOLCHAIN=local "$GO" list -deps . >/dev/null 2>&1); then
    echo "install-deps: downloading and building the Go modules of scripts/kube/manifest-check"
    (cd "$mc" && export GOFLAGS=-mod=readonly GOTOOLCHAIN=local && "$GO" mod download && "$GO" build -o /dev/null .)
  fi
else
  echo "install-deps: no Go toolchain: the unit tier's Kubernetes manifest check will skip"
fi
