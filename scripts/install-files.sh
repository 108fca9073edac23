#!/usr/bin/env bash
# Installs joule's files — the one layout `make install` and `make deb` (scripts/deb.sh) share:
#   $BINDIR/joule                            the binary (0755)
#   $UNITDIR/joule.service                   deploy/joule.service, its /usr/bin/joule written
#                                            as $BINDIR/joule (the unit names the package's path)
#   /etc/joule/joule.toml                    deploy/joule.toml, never over an existing file (the
#                                            path the binary reads without --config)
#   $MANDIR/man1/joule.1.gz, joule-*.1.gz    `joule generate man` (from the clap definitions)
#   $BASHCOMPDIR/joule, $ZSHCOMPDIR/_joule, $FISHCOMPDIR/joule.fish   `joule generate completions`
# each under $DESTDIR. Usage: install-files.sh BINARY [GENERATOR]; GENERATOR is a joule binary
# this machine runs to write the man pages and completions (default BINARY; another one when
# BINARY is for another architecture). Environment: DESTDIR, PREFIX (/usr/local) and the
# *DIR variables above (defaults under PREFIX).
set -euo pipefail

BIN=${1:?usage: install-files.sh BINARY [GENERATOR]}
GEN=${2:-$BIN}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(dirname "$HERE")
DESTDIR=${DESTDIR:-}
PREFIX=${PREFIX:-/usr/local}
BINDIR=${BINDIR:-$PREFIX/bin}
UNITDIR=${UNITDIR:-$PREFIX/lib/systemd/system}
MANDIR=${MANDIR:-$PREFIX/share/man}
BASHCOMPDIR=${BASHCOMPDIR:-$PREFIX/share/bash-completion/completions}
ZSHCOMPDIR=${ZSHCOMPDIR:-$PREFIX/share/zsh/site-functions}
FISHCOMPDIR=${FISHCOMPDIR:-$PREFIX/share/fish/vendor_completions.d}

[ -x "$BIN" ] || { echo "install-files: no $BIN: build it first (make build)" >&2; exit 1; }
gen=$(mktemp -d)
trap 'rm -rf "$gen"' EXIT
"$GEN" generate man --out "$gen/man" >/dev/null
"$GEN" generate completions --out "$gen/comp" >/dev/null

install -d -m 0755 "$DESTDIR$BINDIR" "$DESTDIR$UNITDIR" "$DESTDIR$MANDIR/man1" "$DESTDIR$BASHCOMPDIR" "$DESTDIR$ZSHCOMPDIR" "$DESTDIR$FISHCOMPDIR"
install -m 0755 "$BIN" "$DESTDIR$BINDIR/joule"
sed "s|/usr/bin/joule|$BINDIR/joule|g" "$REPO/deploy/joule.service" >"$gen/joule.service"
install -m 0644 "$gen/joule.service" "$DESTDIR$UNITDIR/joule.service"
for page in "$gen"/man/*.1; do
  gzip -9n <"$page" >"$gen/page.gz"
  install -m 0644 "$gen/page.gz" "$DESTDIR$MANDIR/man1/$(basename "$page").gz"
done
install -m 0644 "$gen/comp/joule.bash" "$DESTDIR$BASHCOMPDIR/joule"
install -m 0644 "$gen/comp/_joule" "$DESTDIR$ZSHCOMPDIR/_joule"
install -m 0644 "$gen/comp/joule.fish" "$DESTDIR$FISHCOMPDIR/joule.fish"
# The agent reads only a config root owns in a directory only root writes (docs/security.md).
install -d -m 0755 "$DESTDIR/etc/joule"
if [ -e "$DESTDIR/etc/joule/joule.toml" ]; then
  echo "install-files: kept the existing $DESTDIR/etc/joule/joule.toml (the shipped one is deploy/joule.toml)"
else
  install -m 0644 "$REPO/deploy/joule.toml" "$DESTDIR/etc/joule/joule.toml"
fi
