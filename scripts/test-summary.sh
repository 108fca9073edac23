#!/usr/bin/env bash
# Prints the totals of the tiers scripts/test-tier.sh recorded, and "passed" only when every
# tier ran, nothing failed and nothing skipped. The last line is `N passed, N failed, N skipped`.
#   scripts/test-summary.sh FILE
set -euo pipefail
file=$1
[ -s "$file" ] || { echo "test-summary: no tier recorded a result in $file" >&2; exit 1; }
if [ -s "$file.failures" ]; then
  echo "why tests failed (each panic, as the tier printed it):"
  cat "$file.failures"
fi
awk '
  { printf "  %-5s %4d ran  %4d passed  %3d failed  %3d skipped\n", $1, $2, $3, $4, $5; r += $2; p += $3; f += $4; s += $5; n++ }
  END {
    verdict = (f == 0 && s == 0) ? "all " n " tiers passed" : (f > 0 ? "FAILED" : "INCOMPLETE: " s " test(s) skipped, so this is not a pass")
    printf "make test: %s (%d tests ran)\n%d passed, %d failed, %d skipped\n", verdict, r, p, f, s
    exit (f == 0 && s == 0) ? 0 : (f > 0 ? 1 : 0)
  }' "$file"
