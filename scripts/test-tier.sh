#!/usr/bin/env bash
# Runs one test tier and prints its summary: how many tests ran, passed, failed and skipped.
# It says "passed" only when nothing failed and nothing skipped (a skip is a test that found a
# capability absent; under JOULE_TEST_STRICT=1, as in CI, a skip fails the test instead).
#   scripts/test-tier.sh NAME COMMAND...
set -uo pipefail
name=$1; shift
log=$(mktemp); skips=$(mktemp)
trap 'rm -f "$log" "$skips"' EXIT
JOULE_SKIP_LOG=$skips "$@" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
read -r passed failed < <(awk '/^test result:/ { p += $4; f += $6 } END { printf "%d %d\n", p, f }' "$log")
skipped=$(wc -l < "$skips")
ran=$((passed + failed))
if [ "$skipped" -gt 0 ]; then
  echo "tier $name: skipped tests (capability absent):"
  sed 's/^/  SKIP /' "$skips"
fi
if [ "$rc" -eq 0 ] && [ "$ran" -eq 0 ]; then
  echo "tier $name: no test ran" >&2
  rc=1
fi
verdict="passed"
if [ "$rc" -ne 0 ] || [ "$failed" -gt 0 ]; then verdict="FAILED"
elif [ "$skipped" -gt 0 ]; then verdict="INCOMPLETE ($skipped skipped: not a pass)"; fi
echo "tier $name: $ran ran, $((passed - skipped)) passed, $failed failed, $skipped skipped: $verdict"
# One line per tier for .ci/run's closing totals, and each failed test's panic (its location and
# the assertion's message, at most 6 lines) so the last screen of a run says why it failed. libtest
# names a test's thread after the test; a 'main' thread's panic is a child process's (the agents
# that tests make panic on purpose), not a failure.
if [ -n "${JOULE_TIER_SUMMARY:-}" ]; then
  echo "$name $ran $((passed - skipped)) $failed $skipped" >> "$JOULE_TIER_SUMMARY"
  if [ "$failed" -gt 0 ]; then
    awk -v tier="$name" '
      /^thread \047[^\047]*\047 .*panicked at / && !/^thread \047main\047/ { n = 6; print "[" tier "] " $0; next }
      n > 0 && /^(note: |stack backtrace:)/ { n = 0; next }
      n > 0 { print "[" tier "]   " $0; n-- }' "$log" >> "$JOULE_TIER_SUMMARY.failures"
  fi
fi
exit "$rc"
