#!/usr/bin/env bash
# Runs a command in a private mount namespace in which the pseudo-filesystems that a fresh
# machine of this kind does not have mounted (bpffs at /sys/fs/bpf, tracefs, debugfs) are
# unmounted, so a test tier cannot pass only because somebody mounted them by hand: joule has
# to mount what it needs itself. The machine's own mounts are not touched. Without root nothing
# can be unmounted, and the command runs as it is.
#   scripts/fresh-mounts.sh COMMAND...
set -euo pipefail
if [ "$(id -u)" != 0 ]; then exec "$@"; fi
exec unshare --mount --propagation private -- bash -c '
  for m in /sys/kernel/debug/tracing /sys/kernel/tracing /sys/kernel/debug /sys/fs/bpf; do
    while mountpoint -q "$m"; do
      umount -l "$m" && echo "fresh-mounts: $m unmounted for this run only (a fresh machine has it unmounted)"
    done
  done
  exec "$@"' fresh-mounts "$@"
