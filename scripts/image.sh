#!/usr/bin/env bash
# `make image`: joule's node-agent image (deploy/kubernetes/daemonset.yaml runs it), written
# offline as an OCI archive with tar and sha256sum alone: no container engine, no builder, no
# base image to pull. One layer holds the release binary (debug info stripped), every shared
# library ldd says it loads, at the same paths, and deploy/joule.toml as /etc/joule/joule.toml.
# The archive is reproducible: the same binary gives the same bytes and the same digest.
#   scripts/image.sh [BINARY [OUT.tar]]   (target/release/joule, target/joule-image.tar)
# The image is named localhost/joule:VERSION (VERSION from Cargo.toml); scripts/kube/load-image.sh
# loads the archive into a node's containerd. The script then runs `joule --version` and
# `joule check-config` in the image's root filesystem (chroot as root) to show it works.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || { echo "image: no version in Cargo.toml" >&2; exit 1; }
image="localhost/joule:${version}"
bin=${1:-target/release/joule}
archive=${2:-target/joule-image.tar}
[ -x "$bin" ] || { echo "image: $bin is missing: run \`make build\` first" >&2; exit 1; }

mkdir -p "$(dirname "$archive")"
work=$(mktemp -d "$(dirname "$archive")/.image.XXXXXX")
trap 'rm -rf "$work"' EXIT
root="$work/rootfs"
mkdir -p "$root"/{proc,sys,dev,tmp,run,etc/joule,usr/local/bin}

# The root filesystem: the binary, every library the dynamic loader will want, the config.
if command -v strip >/dev/null 2>&1; then
  strip --strip-debug -o "$root/usr/local/bin/joule" "$bin"
else
  cp "$bin" "$root/usr/local/bin/joule"
fi
chmod 0755 "$root/usr/local/bin/joule"
install -m 0644 deploy/joule.toml "$root/etc/joule/joule.toml"
deps=$(ldd "$bin")
if grep -q "not found" <<<"$deps"; then
  echo "image: ldd cannot resolve every library of $bin:" >&2
  echo "$deps" >&2
  exit 1
fi
# "libx.so => /path (addr)" and the loader's own "/lib64/ld-linux-x86-64.so.2 (addr)".
for lib in $(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$deps"); do
  mkdir -p "$root$(dirname "$lib")"
  cp -L "$lib" "$root$lib"
done

# The OCI image layout (scripts/kube/oci.sh): a gzipped layer, its config, a manifest, an index.
. scripts/kube/oci.sh
arch=$(dpkg --print-architecture 2>/dev/null || uname -m | sed 's/x86_64/amd64/; s/aarch64/arm64/')
config='{"Env":["PATH=/usr/local/bin:/usr/bin:/bin"],"Entrypoint":["/usr/local/bin/joule"],"Cmd":["agent","--config","/etc/joule/joule.toml"],"Labels":{"org.opencontainers.image.title":"joule","org.opencontainers.image.description":"joule node agent: thermal/power budget, latency protection","org.opencontainers.image.version":"'"$version"'"}}'
oci_archive "$root" "$archive" "$image" "$image" "$arch" "$config" 1
manifest=$OCI_MANIFEST

# Smoke test in the image's root filesystem: chroot needs root; without it, say so.
if [ "$(id -u)" = 0 ]; then
  chroot "$root" /usr/local/bin/joule --version
  chroot "$root" /usr/local/bin/joule check-config /etc/joule/joule.toml
else
  echo "image: not root: skipped running joule --version in the image's root filesystem (chroot)"
fi
echo "image: $image ($arch, manifest sha256:$manifest) in $archive ($(du -h "$archive" | cut -f1))"
echo "image: load it into each node's containerd with scripts/kube/load-image.sh (docs/deploy.md)"
