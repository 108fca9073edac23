# Sourced by scripts/vm/setup.sh and scripts/arm64/setup.sh: install_debs PKG... installs the
# Debian packages dpkg says are missing from this host (apt-get, quiet), and nothing when all
# are there. The caller defines say, die and logged (a step's output shown only on failure).
# shellcheck shell=bash

install_debs() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  [ "$(id -u)" = 0 ] || die "need root to apt-get install ${missing[*]}"
  say "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  logged apt-get update -qq
  logged apt-get install -y -qq --no-install-recommends "${missing[@]}"
}
