#!/usr/bin/env bash
# Builds the offline OCI image of the Kubernetes root tests: one uncompressed layer holding a
# static build of scripts/kube/pause.c as /pause (the pods' sandbox image and their workload),
# written as an OCI image layout in a tar that `ctr images import` takes. Nothing is pulled.
#   scripts/kube/test-image.sh OUT.tar [NAME]     (NAME: localhost/joule-test:1)
set -euo pipefail
out=$1; name=${2:-localhost/joule-test:1}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs"/{proc,sys,dev,etc,tmp}
gcc -static -Os -s -o "$work/rootfs/pause" "$here/pause.c"
. "$here/oci.sh"
oci_archive "$work/rootfs" "$out" "$name" "${name##*:}" "$(dpkg --print-architecture)" '{"Entrypoint":["/pause"],"WorkingDir":"/"}' 0
