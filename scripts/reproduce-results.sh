#!/usr/bin/env bash
# Re-runs the benchmarks whose results the README and docs/results quote, with the exact
# commands those pages name, and writes their JSON and plots into docs/results/ (issue 18).
#
#   scripts/reproduce-results.sh            every bench (hours: longer than a working session)
#   scripts/reproduce-results.sh thermal    one bench; several names run in the order given
#   scripts/reproduce-results.sh --list     the names and what each takes
#
# Needs root and a release build of joule and joule-bench (it builds both; joule-bench runs the
# agent from the joule beside it). Each bench prints its table; this script
# prints, before each, the commit and the date the numbers belong to, and keeps the bench's
# whole output in docs/results/<name>.log so a page can quote exactly what was printed.
set -euo pipefail
cd "$(dirname "$0")/.."

declare -A CMD=(
  [thermal]="thermal --json docs/results/thermal.json --plot docs/results/thermal.svg"
  [thermal-firmware]="thermal --firmware --joule-stages built-in --json docs/results/thermal-firmware.json --plot docs/results/thermal-firmware.svg"
  [overhead]="overhead --runs 3 --seconds 8 --json docs/results/overhead.json --plot docs/results/overhead.svg"
  [overhead-idle]="overhead --idle --runs 3 --seconds 20 --json docs/results/overhead-idle.json"
  [overhead-scale]="overhead --procs 100,2000,10000 --flows 100,2000,10000 --churn-per-s 500 --runs 3 --seconds 10 --warmup-s 3 --json docs/results/overhead-scale.json --plot docs/results/overhead-scale.svg"
  [net-qos]="net-qos --only limiter,softirq --json docs/results/net-qos.json --plot docs/results/net-qos.svg"
  [net-qos-placement]="net-qos --only placement --host-model --model-root testdata/boards/rk3588/sys --json docs/results/net-qos-placement.json --plot docs/results/net-qos-placement.svg"
  [rt-share]="rt-share --runs 3 --seconds 6 --warmup 1 --json docs/results/rt-share.json --plot docs/results/rt-share.svg"
  [elevate]="elevate --json docs/results/elevate.json --plot docs/results/elevate.svg"
  [nap]="nap --rounds 5 --json docs/results/nap.json --plot docs/results/nap.svg"
)
ORDER=(thermal thermal-firmware overhead overhead-idle overhead-scale net-qos net-qos-placement rt-share elevate nap)
declare -A TAKES=(
  [thermal]="~20 min (5 runs x 4 modes x 45 s)" [thermal-firmware]="~20 min (5 runs x 4 modes x 45 s)" [overhead]="~5 min" [overhead-idle]="~1.5 min" [overhead-scale]="~8 min"
  [net-qos]="~2 min" [net-qos-placement]="~2 min" [rt-share]="~4 min" [elevate]="~6 min" [nap]="~8 min (5 rounds)"
)

if [[ "${1:-}" == "--list" ]]; then
  for n in "${ORDER[@]}"; do printf '%-18s %-28s joule-bench %s\n' "$n" "${TAKES[$n]}" "${CMD[$n]}"; done
  exit 0
fi
names=("$@")
[[ ${#names[@]} -eq 0 ]] && names=("${ORDER[@]}")
for n in "${names[@]}"; do
  [[ -n "${CMD[$n]:-}" ]] || { echo "reproduce-results: no bench called '$n' (see --list)" >&2; exit 2; }
done
[[ $(id -u) -eq 0 ]] || { echo "reproduce-results: run as root (the benches make cgroups, namespaces and load eBPF)" >&2; exit 2; }

cargo build --release --workspace --locked --quiet
commit=$(git rev-parse --short HEAD)
dirty=$(git status --porcelain --untracked-files=no -- crates | head -1)
for n in "${names[@]}"; do
  log="docs/results/$n.log"
  {
    echo "# scripts/reproduce-results.sh $n"
    echo "# commit $commit${dirty:+ (with uncommitted changes under crates/)}, $(date -u +%Y-%m-%dT%H:%MZ), $(uname -r), $(nproc) CPUs"
    echo "# joule-bench ${CMD[$n]}"
  } | tee "$log"
  # shellcheck disable=SC2086 # the command is a list of words on purpose
  bash scripts/fresh-mounts.sh target/release/joule-bench ${CMD[$n]} 2>&1 | tee -a "$log"
done
