# Sourced by setup.sh and systemd-guest.sh: debian_mirror prints the Debian mirror to use
# (JOULE_VM_MIRROR, or the one this machine's apt sources already name); the caller defines die.
# shellcheck shell=bash

# The Debian mirror this machine already uses: the first http(s) URI of a non-security
# "deb" entry, from deb822 *.sources files or the one-line sources.list format.
debian_mirror() {
  if [ -n "${JOULE_VM_MIRROR:-}" ]; then echo "${JOULE_VM_MIRROR%/}"; return; fi
  local f uri=""
  for f in /etc/apt/sources.list.d/*.sources; do
    [ -r "$f" ] || continue
    uri=$(awk 'BEGIN { RS = ""; IGNORECASE = 1 }
      {
        types = ""; suites = ""; uris = ""; enabled = "yes"
        n = split($0, lines, "\n")
        for (i = 1; i <= n; i++) {
          l = lines[i]
          if (l ~ /^Types:/)   { sub(/^Types:[ \t]*/, "", l); types = l }
          if (l ~ /^Suites:/)  { sub(/^Suites:[ \t]*/, "", l); suites = l }
          if (l ~ /^URIs:/)    { sub(/^URIs:[ \t]*/, "", l); uris = l }
          if (l ~ /^Enabled:/) { sub(/^Enabled:[ \t]*/, "", l); enabled = tolower(l) }
        }
        if (enabled == "no" || types !~ /(^|[ \t])deb([ \t]|$)/ || suites ~ /-security/) next
        split(uris, u, /[ \t]+/)
        if (u[1] ~ /^https?:\/\//) { print u[1]; exit }
      }' "$f")
    [ -n "$uri" ] && break
  done
  if [ -z "$uri" ] && [ -r /etc/apt/sources.list ]; then
    uri=$(awk '$1 == "deb" {
        i = 2
        if ($i ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
        if ($(i) ~ /^https?:\/\// && $(i + 1) !~ /-security/) { print $(i); exit }
      }' /etc/apt/sources.list)
  fi
  [ -n "$uri" ] || die "no Debian mirror in /etc/apt/sources.list{,.d/*.sources}; set JOULE_VM_MIRROR"
  echo "${uri%/}"
}
