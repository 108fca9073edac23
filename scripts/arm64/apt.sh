# Sourced by the scripts in scripts/arm64/: apt for $DEB_ARCH packages (arm64 or armhf,
# scripts/arm64/arch.sh) with a private configuration (sources, lists, cache and an empty dpkg
# status of its own), so that Debian's packages of that architecture can be resolved and
# downloaded on any host without touching the system's apt sources, its dpkg database or its
# list of foreign architectures. Nothing is ever installed: callers unpack the downloaded .debs
# with `dpkg -x`. The caller defines DEB_ARCH, CACHE and die.
# shellcheck shell=bash

# shellcheck source=scripts/vm/mirror.sh
source "$(dirname "${BASH_SOURCE[0]}")/../vm/mirror.sh"

# The Debian release this host runs (bookworm, trixie, ...): the ARM userland (the cross
# build's libraries, the guest's root) comes from the same release, so a binary built here runs
# on a stock ARM Debian of that release or later.
host_suite() {
  local codename=""
  # shellcheck disable=SC1091
  [ -r /etc/os-release ] && codename=$(. /etc/os-release && echo "${VERSION_CODENAME:-}")
  [ -n "$codename" ] || die "cannot tell this host's Debian release (no VERSION_CODENAME in /etc/os-release)"
  echo "$codename"
}

# arch_opts SUITE: sets APT_OPTS to apt options for $DEB_ARCH packages of SUITE, with their own
# state under $CACHE/apt-SUITE; the first use of a suite (or one a day later) refreshes its lists.
arch_opts() {
  local suite=$1
  local dir=$CACHE/apt-$suite keyring=/usr/share/keyrings/debian-archive-keyring.gpg signed=""
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  [ -f "$dir/status" ] || : >"$dir/status"
  [ -r "$keyring" ] && signed="signed-by=$keyring "
  APT_OPTS=(-o "Dir::Etc::sourcelist=$dir/sources.list" -o "Dir::Etc::sourceparts=-"
            -o "Dir::State::Lists=$dir/lists" -o "Dir::State::status=$dir/status"
            -o "Dir::Cache=$dir/cache" -o "APT::Architecture=$DEB_ARCH" -o "APT::Architectures=$DEB_ARCH"
            -o "APT::Sandbox::User=root" -o "Acquire::Languages=none" -o "Debug::NoLocking=1")
  if [ ! -f "$dir/sources.list" ] || [ -z "$(find "$dir/lists" -maxdepth 1 -name '*Packages*' -mtime -1 2>/dev/null)" ]; then
    echo "deb [${signed}arch=$DEB_ARCH] $(debian_mirror) $suite main" >"$dir/sources.list"
    apt-get "${APT_OPTS[@]}" update -qq >/dev/null
  fi
}

# arch_apt SUITE ARGS...: apt-get for $DEB_ARCH packages of SUITE.
arch_apt() {
  local suite=$1; shift
  arch_opts "$suite"
  apt-get "${APT_OPTS[@]}" "$@"
}

# arch_pkgnames SUITE PREFIX: the names of SUITE's $DEB_ARCH packages that start with PREFIX.
arch_pkgnames() {
  arch_opts "$1"
  apt-cache "${APT_OPTS[@]}" pkgnames "$2"
}

# arch_unpack SUITE DEST PKG...: downloads PKG... and everything they depend on (not what
# they only recommend) for $DEB_ARCH and unpacks each into DEST with dpkg -x. No maintainer script
# runs: what needs one (users, alternatives) the caller sets up itself.
arch_unpack() {
  local suite=$1 dest=$2; shift 2
  local debs=$CACHE/apt-$suite/cache/archives
  rm -f "$debs"/*.deb
  arch_apt "$suite" install -qq -y -d --no-install-recommends "$@" >/dev/null
  mkdir -p "$dest"
  local d
  for d in "$debs"/*.deb; do dpkg -x "$d" "$dest"; done
  rm -f "$debs"/*.deb
}

# arch_download SUITE DEST PKG...: downloads PKG... alone, without what they depend on, and
# unpacks each into DEST with dpkg -x (a kernel without the tools that would make its initramfs
# on the target, a static binary).
arch_download() {
  local suite=$1 dest=$2; shift 2
  local debs=$CACHE/apt-$suite/cache/archives
  arch_opts "$suite"
  rm -f "$debs"/*.deb
  (cd "$debs" && apt-get "${APT_OPTS[@]}" download -qq "$@" >/dev/null)
  mkdir -p "$dest"
  local d
  for d in "$debs"/*.deb; do dpkg -x "$d" "$dest"; done
  rm -f "$debs"/*.deb
}
