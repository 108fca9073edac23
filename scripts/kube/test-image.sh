#!/usr/bin/env bash
# Builds the offline OCI image of the Kubernetes root tests: one uncompressed layer holding a
# static build of scripts/kube/pause.c as /pause (the pods' sandbox image and their workload),
# written as an OCI image layout in a tar that `ctr images import` takes. Nothing is pulled.
#   scripts/kube/test-image.sh OUT.tar [NAME]     (NAME: localhost/joule-test:1)
set -euo pipefail
out=$1; name=${2:-localhost/joule-test:1}
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/rootfs"/{proc,sys,dev,etc,tmp} "$work/oci/blobs/sha256"
gcc -static -Os -s -o "$work/rootfs/pause" "$here/pause.c"
reproducible_tar() { tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 "$@"; }
reproducible_tar -C "$work/rootfs" -cf "$work/layer" .
# blob FILE: moves FILE into the layout under its digest; prints "DIGEST SIZE".
blob() { local d s; d=$(sha256sum "$1" | cut -d' ' -f1); s=$(stat -c %s "$1"); mv "$1" "$work/oci/blobs/sha256/$d"; echo "$d $s"; }
arch=$(dpkg --print-architecture)
read -r layer layer_size < <(blob "$work/layer")
printf '{"architecture":"%s","os":"linux","config":{"Entrypoint":["/pause"],"WorkingDir":"/"},"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' \
  "$arch" "$layer" > "$work/config"
read -r config config_size < <(blob "$work/config")
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"sha256:%s","size":%s}]}' \
  "$config" "$config_size" "$layer" "$layer_size" > "$work/manifest"
read -r manifest manifest_size < <(blob "$work/manifest")
echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"
printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
  "$manifest" "$manifest_size" "$arch" "$name" "${name##*:}" > "$work/oci/index.json"
reproducible_tar -C "$work/oci" -cf "$out" oci-layout index.json blobs
