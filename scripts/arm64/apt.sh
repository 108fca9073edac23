# Sourced by the scripts in scripts/arm64/: apt for arm64 packages with a private configuration
# (sources, lists, cache and an empty dpkg status of its own), so that Debian's arm64 packages
# can be resolved and downloaded on any host without touching the system's apt sources, its
# dpkg database or its list of foreign architectures. Nothing is ever installed: callers unpack
# the downloaded .debs with `dpkg -x`. The caller defines CACHE and die.
# shellcheck shell=bash

# shellcheck source=scripts/vm/mirror.sh
source "$(dirname "${BASH_SOURCE[0]}")/../vm/mirror.sh"

# The Debian release this host runs (bookworm, trixie, ...): the arm64 userland (the cross
# build's libraries, the guest's root) comes from the same release, so a binary built here runs
# on a stock arm64 Debian of that release or later.
host_suite() {
  local codename=""
  # shellcheck disable=SC1091
  [ -r /etc/os-release ] && codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || die "cannot tell this host's Debian release (no VERSION_CODENAME in /etc/os-release)"
  echo "$codename"
}

# arm64_opts SUITE: sets APT_OPTS to apt options for arm64 packages of SUITE, with their own
# state under $CACHE/apt-SUITE; the first use of a suite (or one a day later) refreshes its lists.
arm64_opts() {
  local suite=$1
  local dir=$CACHE/apt-$suite keyring=/usr/share/keyrings/debian-archive-keyring.gpg signed=""
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  [ -f "$dir/status" ] || : >"$dir/status"
  [ -r "$keyring" ] && signed="signed-by=$keyring "
  APT_OPTS=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=-"
            -o "Dir::State::Lists=$dir/lists" -o "Dir::State::status=$dir/status"
            -o "Dir::Cache=$dir/cache" -o "APT::Architecture=arm64" -o "APT::Architectures=arm64"
            -o "APT::Sandbox::User=root" -o "Acquire::Languages=none" -o "Debug::NoLocking=1")
  if [ ! -f "$dir/sources.list" ] || [ -z "$(find "$dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null)" ]; then
    echo "deb [${signed}arch=arm64] $(debian_mirror) $suite main" >"$dir/sources.list"
    apt-get "${APT_OPTS[@]}" update -qq >/dev/null
  fi
}

# arm64_apt SUITE ARGS...: apt-get for arm64 packages of SUITE.
arm64_apt() {
  local suite=$1; shift
  arm64_opts "$suite"
  apt-get "${APT_OPTS[@]}" "$@"
}

# arm64_pkgnames SUITE PREFIX: the names of SUITE's arm64 packages that start with PREFIX.
arm64_pkgnames() {
  arm64_opts "$1"
  apt-cache "${APT_OPTS[@]}" pkgnames "$2"
}

# arm64_unpack SUITE DEST PKG...: downloads PKG... and everything they depend on (not what
# they only recommend) for arm64 and unpacks each into DEST with dpkg -x. No maintainer script
# runs: what needs one (users, alternatives) the caller sets up itself.
arm64_unpack() {
  local suite=$1 dest=$2; shift 2
  local debs=$CACHE/apt-$suite/cache/archives
  rm -f "$debs"/*.deb
  arm64_apt "$suite" install -qq -y -d --no-install-recommends "$@" >/dev/null
  mkdir -p "$dest"
  local d
  for d in "$debs"/*.deb; do dpkg -x "$d" "$dest"; done
  rm -f "$debs"/*.deb
}
