#!/usr/bin/env bash
# Checks the Kubernetes manifests against the Kubernetes API types with the Go program in
# scripts/kube/manifest-check/ (strict decode into k8s.io/api's types, then the references a
# decode cannot see). Builds it offline: its modules are in Go's module cache once
# `scripts/install-deps.sh test` has run.
#   scripts/kube/manifest-check.sh [FILE...]   checks FILEs (default: deploy/kubernetes/**/*.yaml)
#   scripts/kube/manifest-check.sh -o BIN      only builds the checker, as BIN
# Exit 0: all pass; 1: a problem (each printed); 77: this machine cannot check (no Go, a Go
# older than go.mod's, or the modules not downloaded), with the capability that is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src="$here/manifest-check"
absent() { echo "manifest-check: capability absent: $*" >&2; exit 77; }

go=$(command -v go || true)
[ -n "$go" ] || [ ! -x /usr/local/go/bin/go ] || go=/usr/local/go/bin/go
[ -n "$go" ] || absent "a Go toolchain (go on PATH or /usr/local/go/bin/go) to check the manifests against the Kubernetes API types"
need=$(sed -n 's/^go \([0-9.]*\)$/\1/p' "$src/go.mod")
have=$("$go" env GOVERSION | sed 's/^go//')
[ "$(printf '%s\n%s\n' "$need" "$have" | sort -V | head -n1)" = "$need" ] || absent "Go $need or later (go.mod of $src); $go is $have"

bin=""
if [ "${1:-}" = "-o" ]; then bin=$2; shift 2; fi
out=${bin:-$(mktemp)}
[ -n "$bin" ] || trap 'rm -f "$out"' EXIT
# Offline and with go.sum as it is: a missing module is a missing download, never a fetch here.
if ! err=$(cd "$src" && GOFLAGS=-mod=readonly GOPROXY=off GOTOOLCHAIN=local "$go" build -o "$out" . 2>&1); then
  if grep -q "GOPROXY=off\|module lookup disabled" <<<"$err"; then
    absent "the Go modules of $src in the module cache ($("$go" env GOMODCACHE)): scripts/install-deps.sh test downloads them"
  fi
  echo "$err" >&2
  exit 1
fi
[ -z "$bin" ] || exit 0

if [ $# -eq 0 ]; then
  mapfile -t files < <(find "$here/../../deploy/kubernetes" -name '*.yaml' | sort)
  set -- "${files[@]}"
fi
"$out" "$@"
