# Sourced by scripts/image.sh and scripts/kube/test-image.sh: writes an OCI image archive
# (image-spec 1.1 layout in a tar, what `ctr images import` and skopeo take) of one layer with
# tar and sha256sum alone. Reproducible: the same root filesystem gives the same bytes.
#   oci_archive ROOTFS OUT NAME REF ARCH CONFIG GZIP
# CONFIG: the image config's "config" object (Entrypoint, Env, ...) as JSON; GZIP: 1 for a
# gzipped layer, 0 for a plain one. Sets OCI_MANIFEST to the manifest's digest.

oci_tar() { tar --sort=name --owner=0 --group=0 --numeric-owner --mtime=@0 "$@"; }

oci_archive() {
  local rootfs=$1 out=$2 name=$3 ref=$4 arch=$5 cfg=$6 gz=$7
  local work layer layer_size diff_id config config_size manifest manifest_size media=application/vnd.oci.image.layer.v1.tar
  work=$(mktemp -d "$(dirname "$out")/.oci.XXXXXX")
  mkdir -p "$work/oci/blobs/sha256"
  # oci_blob FILE: moves FILE into the layout under its digest; prints "DIGEST SIZE".
  oci_blob() { local d s; d=$(sha256sum "$1" | cut -d' ' -f1); s=$(stat -c %s "$1"); mv "$1" "$work/oci/blobs/sha256/$d"; echo "$d $s"; }
  oci_tar -C "$rootfs" -cf "$work/layer" .
  diff_id=$(sha256sum "$work/layer" | cut -d' ' -f1)
  if [ "$gz" = 1 ]; then
    gzip -n -6 -c "$work/layer" > "$work/layer.gz" && rm "$work/layer" && mv "$work/layer.gz" "$work/layer"
    media=$media+gzip
  fi
  read -r layer layer_size < <(oci_blob "$work/layer")
  printf '{"architecture":"%s","os":"linux","config":%s,"rootfs":{"type":"layers","diff_ids":["sha256:%s"]}}' "$arch" "$cfg" "$diff_id" > "$work/config"
  read -r config config_size < <(oci_blob "$work/config")
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"sha256:%s","size":%s},"layers":[{"mediaType":"%s","digest":"sha256:%s","size":%s}]}' \
    "$config" "$config_size" "$media" "$layer" "$layer_size" > "$work/manifest"
  read -r manifest manifest_size < <(oci_blob "$work/manifest")
  echo '{"imageLayoutVersion":"1.0.0"}' > "$work/oci/oci-layout"
  # containerd's import reads io.containerd.image.name; podman and skopeo read ref.name.
  printf '{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"application/vnd.oci.image.manifest.v1+json","digest":"sha256:%s","size":%s,"platform":{"architecture":"%s","os":"linux"},"annotations":{"io.containerd.image.name":"%s","org.opencontainers.image.ref.name":"%s"}}]}' \
    "$manifest" "$manifest_size" "$arch" "$name" "$ref" > "$work/oci/index.json"
  oci_tar -C "$work/oci" -cf "$work/image.tar" oci-layout index.json blobs
  mv "$work/image.tar" "$out"
  rm -rf "$work"
  OCI_MANIFEST=$manifest
}
