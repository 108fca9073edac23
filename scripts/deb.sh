#!/usr/bin/env bash
# `make deb`: the Debian packages of joule, built offline from the release binary with
# dpkg-deb, following debhelper's conventions (what dh_strip, dh_installsystemd
# --no-enable --no-start, dh_installdocs, dh_installchangelogs, dh_compress, dh_md5sums,
# dh_shlibdeps and dh_gencontrol would produce):
#   target/deb/joule_<version>_<arch>.deb
#       /usr/bin/joule (stripped, with a .gnu_debuglink), /usr/lib/systemd/system/joule.service
#       (deploy/joule.service), /etc/joule/joule.toml (a conffile, deploy/joule.toml), man pages
#       and completions (scripts/install-files.sh: the layout `make install` uses),
#       /usr/share/doc/joule/{copyright,changelog.Debian.gz}, and the maintainer scripts of
#       deploy/debian/: installing enables and starts nothing.
#   target/deb/joule-dbgsym_<version>_<arch>.deb
#       /usr/lib/debug/.build-id/xx/yyyy.debug, the binary's debug info.
# Then lintian checks both (errors fail the build; deploy/debian/lintian-overrides says why
# each overridden tag is fine).
# Usage: deb.sh [BINARY]   (default $CARGO_TARGET_DIR/release/joule, else target/release/joule)
# Environment: DEB_ARCH (default: dpkg's), DEB_REVISION (1), DEB_MAINTAINER ("Name <email>";
# default the project's placeholder: a distributor sets its own), JOULE_GEN (a joule this machine runs, when BINARY is for another
# architecture).
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
cd "$REPO"
BIN=${1:-${CARGO_TARGET_DIR:-target}/release/joule}
ARCH=${DEB_ARCH:-$(dpkg --print-architecture)}
UPSTREAM=$(sed -n '/^\[workspace.package\]/,/^\[/s/^version = "\(.*\)"/\1/p' Cargo.toml)
VERSION=$UPSTREAM-${DEB_REVISION:-1}
MAINT=${DEB_MAINTAINER:-joule maintainers <maintainers@joule.example>}
# Reproducible: every date is the last commit's.
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
OUT=$REPO/target/deb

bash "$HERE/install-deps.sh" deb
[ -x "$BIN" ] || { echo "deb: no $BIN: build it first (make build)" >&2; exit 1; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
pkg=$work/joule dbg=$work/joule-dbgsym
umask 022

# The files, in the layout `make install` uses with PREFIX=/usr (Debian's paths).
DESTDIR=$pkg PREFIX=/usr UNITDIR=/usr/lib/systemd/system ZSHCOMPDIR=/usr/share/zsh/vendor-completions \
  bash "$HERE/install-files.sh" "$BIN" "${JOULE_GEN:-$BIN}" >/dev/null

# dh_strip: the debug info into the dbgsym package under its build id, the binary stripped
# with a debuglink to it.
# A binary for another architecture (make deb-arm64, deb-armhf) goes through that
# architecture's binutils.
case $ARCH in
  "$(dpkg --print-architecture)") TOOLS="" ;;
  arm64) TOOLS=aarch64-linux-gnu- ;;
  armhf) TOOLS=arm-linux-gnueabihf- ;;
  *) echo "deb: no binutils known for $ARCH" >&2; exit 1 ;;
esac
command -v "${TOOLS}objcopy" >/dev/null || { echo "deb: no ${TOOLS}objcopy (make build-$ARCH installs the cross binutils)" >&2; exit 1; }
id=$("${TOOLS}readelf" -n "$BIN" | sed -n 's/^ *Build ID: *//p')
[ -n "$id" ] || { echo "deb: $BIN has no build id (the linker's --build-id)" >&2; exit 1; }
debug=$dbg/usr/lib/debug/.build-id/${id:0:2}/${id:2}.debug
install -d "$(dirname "$debug")"
"${TOOLS}objcopy" --only-keep-debug --compress-debug-sections "$BIN" "$debug"
chmod 0644 "$debug"
"${TOOLS}objcopy" --strip-all --remove-section=.comment --remove-section=.note --add-gnu-debuglink="$debug" "$BIN" "$pkg/usr/bin/joule"
chmod 0755 "$pkg/usr/bin/joule"

# dh_installdocs, dh_installchangelogs, lintian overrides.
doc=$pkg/usr/share/doc/joule
install -d "$doc" "$pkg/usr/share/lintian/overrides" "$dbg/usr/share/doc"
install -m 0644 deploy/debian/copyright "$doc/copyright"
ln -s joule "$dbg/usr/share/doc/joule-dbgsym"
date=$(date -u -R -d "@$SOURCE_DATE_EPOCH")
printf '%s\n' "joule ($VERSION) unstable; urgency=medium" "" \
  "  * Built from the joule source tree at commit $(git rev-parse --short HEAD)." "" \
  " -- $MAINT  $date" | gzip -9n >"$doc/changelog.Debian.gz"
chmod 0644 "$doc/changelog.Debian.gz"
install -m 0644 deploy/debian/lintian-overrides "$pkg/usr/share/lintian/overrides/joule"

# dh_shlibdeps: the libraries the binary links, with the versions it needs.
mkdir -p "$work/src/debian"
printf 'Source: joule\n\nPackage: joule\nArchitecture: any\n' >"$work/src/debian/control"
# dpkg-shlibdeps needs the libraries installed through dpkg, which a cross sysroot's are not.
# A cross-built binary links the same libraries as the native one (the arm64 guest test checks
# its NEEDED list and that its glibc symbols are at most 2.34), so the native build's (JOULE_GEN)
# minimal versions stand for it; a build on the board computes its own.
shlib_bin=$pkg/usr/bin/joule
[ -z "$TOOLS" ] || shlib_bin=$(realpath "${JOULE_GEN:?a cross-built package needs JOULE_GEN, the native joule}")
depends=$(cd "$work/src" && dpkg-shlibdeps -O -e"$shlib_bin" 2>/dev/null | sed -n 's/^shlibs:Depends=//p')
[ -n "$depends" ] || { echo "deb: dpkg-shlibdeps found no dependency for $pkg/usr/bin/joule" >&2; exit 1; }

# DEBIAN/: control, conffiles, maintainer scripts, md5sums.
size() { du -sk --exclude=DEBIAN "$1" | cut -f1; }
install -d "$pkg/DEBIAN" "$dbg/DEBIAN"
install -m 0755 deploy/debian/postinst deploy/debian/prerm deploy/debian/postrm "$pkg/DEBIAN/"
echo /etc/joule/joule.toml >"$pkg/DEBIAN/conffiles"
cat >"$pkg/DEBIAN/control" <<CONTROL
Package: joule
Version: $VERSION
Architecture: $ARCH
Maintainer: $MAINT
Installed-Size: $(size "$pkg")
Depends: $depends
Section: admin
Priority: optional
Description: node agent keeping Linux within its thermal and power budget
 joule samples a machine's temperature, power and run-queue latency, computes
 a thermal stage in the kernel, and protects the latency of the services that
 matter (CPU guarantees for task classes, real-time reservations, nap with
 fast wake) while it keeps the machine inside its thermal and power budget.
 Every change it makes is journalled and undone on stop or by
 "joule restore"; "joule doctor" shows what a machine offers.
 .
 The package installs the joule.service unit without enabling or starting
 it: "systemctl enable --now joule" starts the agent with
 /etc/joule/joule.toml.
CONTROL
cat >"$dbg/DEBIAN/control" <<CONTROL
Package: joule-dbgsym
Source: joule
Version: $VERSION
Auto-Built-Package: debug-symbols
Architecture: $ARCH
Maintainer: $MAINT
Installed-Size: $(size "$dbg")
Depends: joule (= $VERSION)
Section: debug
Priority: optional
Description: debug symbols for joule
Build-Ids: $id
CONTROL
for d in "$pkg" "$dbg"; do
  (cd "$d" && find . -type f ! -path './DEBIAN/*' ! -path './etc/*' -printf '%P\0' | LC_ALL=C sort -z | xargs -0 md5sum >DEBIAN/md5sums)
  chmod 0644 "$d/DEBIAN/md5sums" "$d/DEBIAN/control"
  find "$d" -exec touch -h -d "@$SOURCE_DATE_EPOCH" {} +
done
chmod 0644 "$pkg/DEBIAN/conffiles"

mkdir -p "$OUT"
rm -f "$OUT"/joule_*_"$ARCH".deb "$OUT"/joule-dbgsym_*_"$ARCH".deb
deb=$OUT/joule_${VERSION}_$ARCH.deb
ddeb=$OUT/joule-dbgsym_${VERSION}_$ARCH.deb
dpkg-deb --root-owner-group -Zxz --build "$pkg" "$deb" >/dev/null
dpkg-deb --root-owner-group -Zxz --build "$dbg" "$ddeb" >/dev/null

# lintian as root warns that it should not run as root; its checks are the same.
lint=$(lintian --fail-on error --allow-root --display-level '>=warning' "$deb" "$ddeb" 2>&1) || { echo "$lint" >&2; echo "deb: lintian reports errors" >&2; exit 1; }
[ -z "$lint" ] || echo "$lint"
echo "$deb"
echo "$ddeb"
