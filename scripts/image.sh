#!/usr/bin/env bash
# `make image`: builds joule's container image offline from target/release/joule, with no
# container engine and no base image pull. deploy/Containerfile is FROM scratch; this script
# puts the binary, the shared libraries ldd finds and deploy/joule.toml into its build
# context. The builder is buildah (daemonless) with the vfs storage driver, which needs
# neither overlayfs nor a running service; it is installed from Debian's packages when
# missing (not by scripts/install-deps.sh: `make test` does not need it).
#
# Output: the image localhost/joule:VERSION (VERSION from Cargo.toml) in a buildah store
# inside target/ (see IMAGE_STORE below), and the same image as an OCI archive,
# target/joule-image.tar, for loading into a node's container runtime. The script then runs
# `joule --version` and `joule check-config` inside the image to show it works.
set -euo pipefail
cd "$(dirname "$0")/.."

version=$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -n1)
[ -n "$version" ] || { echo "image: no version in Cargo.toml" >&2; exit 1; }
image="localhost/joule:${version}"
bin=target/release/joule
ctx=target/image-context
archive=target/joule-image.tar
store="${IMAGE_STORE:-target/image-store}"
case "$store" in /*) ;; *) store="$PWD/$store" ;; esac

[ -x "$bin" ] || { echo "image: $bin is missing: run \`make build\` first" >&2; exit 1; }

if ! command -v buildah >/dev/null 2>&1; then
  echo "image: needs buildah (a daemonless image builder); installing Debian's package"
  if [ "$(id -u)" != 0 ]; then
    echo "image: need root to apt-get install buildah; install it yourself, or build deploy/Containerfile with any OCI builder from $ctx after running this script as root" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends buildah >/dev/null 2>&1 \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends buildah >/dev/null; }
fi

# The build context: the binary, every library the dynamic loader will want, the config.
rm -rf "$ctx"
mkdir -p "$ctx/rootfs/usr/local/bin" "$ctx/rootfs/etc/joule"
if command -v strip >/dev/null 2>&1; then
  strip --strip-debug -o "$ctx/rootfs/usr/local/bin/joule" "$bin"
else
  cp "$bin" "$ctx/rootfs/usr/local/bin/joule"
fi
chmod 0755 "$ctx/rootfs/usr/local/bin/joule"
cp deploy/joule.toml "$ctx/rootfs/etc/joule/joule.toml"
deps=$(ldd "$bin")
if grep -q "not found" <<<"$deps"; then
  echo "image: ldd cannot resolve every library of $bin:" >&2
  echo "$deps" >&2
  exit 1
fi
# "libx.so => /path (addr)" and the loader's own "/lib64/ld-linux-x86-64.so.2 (addr)".
for lib in $(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$deps"); do
  mkdir -p "$ctx/rootfs$(dirname "$lib")"
  cp -L "$lib" "$ctx/rootfs$lib"
done
cp deploy/Containerfile "$ctx/Containerfile"

B=(buildah --storage-driver vfs --root "$store/root" --runroot "$store/run")
echo "image: building $image"
"${B[@]}" bud --quiet --build-arg "VERSION=$version" -f "$ctx/Containerfile" -t "$image" "$ctx" >/dev/null
rm -f "$archive"
"${B[@]}" push --quiet "$image" "oci-archive:$archive:$image"

# Smoke test inside the image. chroot isolation needs no OCI runtime and no cgroup setup
# (crun refuses this machine's hybrid cgroup layout).
c=$("${B[@]}" from --quiet "$image")
trap '"${B[@]}" rm "$c" >/dev/null' EXIT
"${B[@]}" run --isolation chroot "$c" -- /usr/local/bin/joule --version
"${B[@]}" run --isolation chroot "$c" -- /usr/local/bin/joule check-config /etc/joule/joule.toml

echo "image: $image is in $store (list it with: ${B[*]} images)"
echo "image: OCI archive $archive ($(du -h "$archive" | cut -f1)); load it into each node's container runtime"
