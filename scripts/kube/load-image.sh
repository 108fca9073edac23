#!/usr/bin/env bash
# Loads joule's image archive (`make image`: target/joule-image.tar) into this node's
# containerd, in the namespace its CRI plugin serves the kubelet from (k8s.io), unpacked, so a
# pod with imagePullPolicy: Never finds it. No registry is involved. Run it as root on each node:
#   scripts/kube/load-image.sh [ARCHIVE]        (target/joule-image.tar)
# ctr's own CONTAINERD_ADDRESS chooses the socket (/run/containerd/containerd.sock) and
# CONTAINERD_SNAPSHOTTER the snapshotter to unpack for (overlayfs, the CRI plugin's default);
# CTR the client (ctr on PATH). The image is labelled pinned: containerd 1.7 and later then report it
# pinned over CRI, and the kubelet's image garbage collection never removes it.
set -euo pipefail
archive=${1:-target/joule-image.tar}
ctr=${CTR:-ctr}
[ -r "$archive" ] || { echo "load-image: cannot read $archive: run \`make image\` first" >&2; exit 1; }
command -v "$ctr" >/dev/null 2>&1 || { echo "load-image: $ctr (containerd's client) not found; set CTR" >&2; exit 1; }
name=$(tar -xOf "$archive" index.json | sed -n 's/.*"io\.containerd\.image\.name":"\([^"]*\)".*/\1/p')
[ -n "$name" ] || { echo "load-image: $archive names no image (io.containerd.image.name): not one of scripts/image.sh's" >&2; exit 1; }

"$ctr" -n k8s.io images import "$archive"
"$ctr" -n k8s.io images label "$name" io.cri-containerd.pinned=pinned >/dev/null
"$ctr" -n k8s.io images ls -q "name==$name" | grep -qxF "$name" \
  || { echo "load-image: containerd does not list $name after the import" >&2; exit 1; }
echo "load-image: $name is in containerd's k8s.io namespace; the DaemonSet's pods can start on this node"
