#!/usr/bin/env bash
# What the test tiers must leave as they found it: the RT throttling sysctl, pseudo-filesystem
# mounts, joule cgroups in every hierarchy, joule BPF pins and programs, network namespaces and
# the qdiscs of the machine's interfaces, the systemd guest's throwaway roots. `save FILE` records it before the tiers run,
# `compare FILE` fails, naming each difference, when something changed.
#   scripts/check-leftovers.sh save|compare FILE
set -euo pipefail
state() {
  echo "sysctl kernel.sched_rt_runtime_us=$(cat /proc/sys/kernel/sched_rt_runtime_us)"
  awk '$3 ~ /^(bpf|tracefs|debugfs)$/ { print "mount " $3 " " $2 }' /proc/self/mounts | sort
  find /sys/fs/cgroup -mindepth 2 -maxdepth 3 -type d -name 'joule*' 2>/dev/null | sed 's/^/cgroup /' | sort
  # The Kubernetes root tests' containerd (joule-testkit's harness, state in /tmp/joule-cri.*),
  # its shims and the kubepods cgroups runc makes.
  find /sys/fs/cgroup -mindepth 1 -maxdepth 2 -type d -name 'kubepods*' 2>/dev/null | sed 's/^/cgroup /' | sort
  { pgrep -a -f 'joule-cri\.' 2>/dev/null || true; } | awk '{ print "process " $2 }' | sort
  if [ -d /sys/fs/bpf ]; then find /sys/fs/bpf -maxdepth 1 -name 'joule*' | sed 's/^/pin /' | sort; fi
  if command -v bpftool >/dev/null; then
    bpftool prog show 2>/dev/null | awk '/ name joule/ { for (i = 1; i <= NF; i++) if ($i == "name") print "bpf-prog " $(i + 1) }' | sort
  fi
  ip netns list 2>/dev/null | awk '{ print "netns " $1 }' | sort
  tc qdisc show 2>/dev/null | sed 's/ refcnt [0-9]*//' | sort
  # The systemd guest's throwaway roots (scripts/vm/systemd-guest.sh), 400 MB each.
  find /var/tmp -maxdepth 1 -name 'joule-systemd-guest.*' 2>/dev/null | sed 's/^/guest-root /' | sort
}
case "${1:-}" in
  save) state > "$2" ;;
  compare)
    now=$(mktemp); trap 'rm -f "$now"' EXIT
    state > "$now"
    if ! diff -u "$2" "$now" > "$now.diff"; then
      echo "check-leftovers: the test tiers did not leave the machine as they found it (- before, + after):" >&2
      tail -n +3 "$now.diff" | grep '^[-+]' >&2
      rm -f "$now.diff"
      exit 1
    fi
    rm -f "$now.diff"
    echo "check-leftovers: nothing left behind (sysctl, mounts, cgroups, pins, BPF programs, netns, qdiscs, guest roots, test containerd)" ;;
  *) echo "usage: $0 save|compare FILE" >&2; exit 2 ;;
esac
