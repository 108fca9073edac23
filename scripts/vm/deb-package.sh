#!/usr/bin/env bash
# In the systemd guest (scripts/vm/systemd-guest.sh; tests/vm_systemd.rs runs it first): the Debian
# package `make deb` built, as an operator installs and removes it. The package is at
# /joule/joule.deb. Prints key=value lines the test asserts on:
#   install: dpkg -i succeeds, the unit is installed but neither enabled nor started, no
#            joule process runs;
#   config:  `joule doctor` and `joule check-config` without --config use /etc/joule/joule.toml;
#   man:     joule(1) and joule-agent(1) are gzip'd troff pages (one .TH, a NAME) that
#            `man joule` and `man joule-agent` render (the guest's root has man-db);
#   completions at their paths; bash loads its completion function;
#   start:   `systemctl enable --now joule` starts the agent, /metrics answers;
#   no restart loop: a config the agent refuses (group/world-writable: its ExecStartPre accepts
#            it, the agent exits 2) leaves the unit failed without a restart; one check-config
#            refuses (ExecStartPre exits 2) leaves it failed after StartLimitBurst (3) starts;
#   purge:   `dpkg -P joule` stops it and leaves no file of the package, no unit, no joule
#            cgroup, no /run/joule, no joule process.
set -u
deb=/joule/joule.deb
# The guest harness puts the repo's binary at /usr/local/bin/joule, earlier in PATH than the
# package's /usr/bin/joule: this check is about the package's alone, so the repo's is put
# aside and back at the end for the checks after this one.
if [ -e /usr/local/bin/joule ]; then
  mv /usr/local/bin/joule /joule/repo-joule
  trap 'mv /joule/repo-joule /usr/local/bin/joule' EXIT
fi
hash -r

kv() { printf '%s=%s\n' "$1" "$2"; }
t0=$(date +%s)
# Seconds since the check began, at each phase (target/vm-last/systemd/deb.out after a run).
phase() { kv "t_$1" "$(($(date +%s) - t0))"; }
one_line() { tr '\n' ' ' | sed 's/ *$//'; }

dpkg -i "$deb" >/tmp/dpkg-i.log 2>&1
kv install_status $?
sed 's/^/dpkg-i: /' /tmp/dpkg-i.log >&2
kv installed_version "$(dpkg-query -W -f='${Version}' joule 2>&1)"
kv joule_path "$(command -v joule)"
kv enabled_after_install "$(systemctl is-enabled joule.service 2>&1)"
kv active_after_install "$(systemctl is-active joule.service 2>&1)"
kv procs_after_install "$(pgrep -x joule | wc -l)"
kv run_joule_after_install "$(test -e /run/joule && echo present || echo absent)"
dpkg -L joule | sort >/tmp/joule.files

phase config
# The default config.
kv doctor_config "$(joule doctor 2>&1 | head -n 1)"
kv doctor_json_config "$(joule doctor --json 2>/dev/null | sed -n 's/^ *"config": "\(.*\)",$/\1/p')"
kv check_config "$(joule check-config 2>&1 | one_line)"
kv check_config_status "$(joule check-config >/dev/null 2>&1; echo $?)"
kv conffiles "$(dpkg-query -W -f='${Conffiles}' joule | one_line)"

phase man
# Man pages.
for page in joule joule-agent; do
  f=/usr/share/man/man1/$page.1.gz
  if ! gzip -t "$f" 2>/dev/null; then
    kv "man_$page" "not a valid gzip file: $f"
    continue
  fi
  th=$(zcat "$f" | grep -c '^\.TH ')
  name=$(zcat "$f" | grep -A1 '^\.SH NAME' | tail -n 1)
  # By name, as an operator types it: man finds the page the package installed (the guest's
  # root has man-db; without it the renderer says none and the test fails).
  how=none; text=""
  command -v man >/dev/null && { how=man; text=$(MANWIDTH=80 MANPAGER=cat man "$page" 2>&1); }
  kv "man_$page" "gzip ok, .TH lines $th, name: $name"
  kv "man_${page}_renderer" "$how"
  kv "man_${page}_rendered_lines" "$(printf '%s\n' "$text" | grep -c .)"
  kv "man_${page}_rendered_name" "$(printf '%s\n' "$text" | grep -A1 '^NAME' | tail -n 1 | sed 's/^ *//')"
done

phase completions
# Completions.
for f in /usr/share/bash-completion/completions/joule /usr/share/zsh/vendor-completions/_joule /usr/share/fish/vendor_completions.d/joule.fish; do
  kv "completion_$(basename "$f")" "$(test -s "$f" && echo present || echo missing)"
done
kv bash_complete "$(bash -c 'source /usr/share/bash-completion/completions/joule && complete -p joule' 2>&1)"

phase start
# Enable and start, as an operator does; /metrics answers.
systemctl enable --now joule.service >/tmp/enable.log 2>&1
kv enable_status $?
kv enabled "$(systemctl is-enabled joule.service 2>&1)"
metrics=""
for _ in $(seq 180); do
  metrics=$(curl -sf --max-time 5 http://127.0.0.1:9977/metrics) && break
  sleep 1
done
kv metrics_lines "$(printf '%s\n' "$metrics" | grep -c '^joule_')"
kv active "$(systemctl is-active joule.service 2>&1)"
kv main_pid_comm "$(ps -o comm= -p "$(systemctl show -p MainPID --value joule.service)" 2>&1)"
kv cgroup "$(systemctl show -p ControlGroup --value joule.service)"

phase refused
# No restart loop on a configuration error. 1: a config the agent refuses (writable by
# others) that check-config, the ExecStartPre, accepts: the agent exits 2, not restarted.
systemctl stop joule.service
cp -p /etc/joule/joule.toml /tmp/joule.toml.good
chmod 0666 /etc/joule/joule.toml
systemctl reset-failed joule.service 2>/dev/null
systemctl start joule.service 2>/dev/null
# Until the agent has refused it (at most 60 s under TCG), then RestartSec (5 s) and more: a
# restart, were there one, would have begun.
until=$((SECONDS + 60))
while [ "$SECONDS" -lt "$until" ] && [ "$(systemctl show -p ActiveState --value joule.service)" != failed ]; do sleep 0.5; done
sleep 8
kv refused_state "$(systemctl show -p ActiveState,Result,NRestarts,ExecMainStatus joule.service | one_line)"
journalctl -u joule.service -n 5 --no-pager -o cat 2>/dev/null | sed 's/^/refused journal: /' >&2
phase invalid
# 2: a config check-config refuses: the ExecStartPre exits 2; StartLimitBurst=3 ends it.
printf '[agent]\nperiod_ms = "fast"\n' >/etc/joule/joule.toml
chmod 0644 /etc/joule/joule.toml
systemctl reset-failed joule.service 2>/dev/null
since=$(date '+%Y-%m-%d %H:%M:%S')
systemctl start joule.service 2>/dev/null
# Until systemd gives up (StartLimitBurst=3 starts, RestartSec=5 apart: `activating` while it
# retries, `failed` when it stops; at most 90 s by the clock, as each poll is slow under TCG),
# then RestartSec and more: a fourth start, were there one, would have begun.
until=$((SECONDS + 90))
while [ "$SECONDS" -lt "$until" ] && [ "$(systemctl show -p ActiveState --value joule.service)" != failed ]; do sleep 0.5; done
sleep 8
kv invalid_state "$(systemctl show -p ActiveState,Result,NRestarts joule.service | one_line)"
kv invalid_starts "$(journalctl -u joule.service --since "$since" --no-pager -o cat 2>/dev/null | grep -c '^Starting ')"
journalctl -u joule.service --since "$since" --no-pager -o cat 2>/dev/null | sed 's/^/invalid journal: /' >&2
cp -p /tmp/joule.toml.good /etc/joule/joule.toml
systemctl reset-failed joule.service 2>/dev/null
systemctl start joule.service
for _ in $(seq 180); do curl -sf --max-time 5 -o /dev/null http://127.0.0.1:9977/metrics && break; sleep 1; done
kv active_again "$(systemctl is-active joule.service 2>&1)"

phase purge
# Purge: stops the agent and leaves nothing behind.
dpkg -P joule >/tmp/dpkg-p.log 2>&1
kv purge_status $?
sed 's/^/dpkg-P: /' /tmp/dpkg-p.log >&2
left=()
while read -r f; do
  case $f in
    /. | /etc | /usr | /usr/bin | /usr/lib | /usr/lib/systemd | /usr/lib/systemd/system | /usr/share | /usr/share/doc | /usr/share/man | /usr/share/man/man1 | \
      /usr/share/bash-completion* | /usr/share/zsh* | /usr/share/fish* | /usr/share/lintian*) ;;
    *) { [ -e "$f" ] || [ -L "$f" ]; } && left+=("$f") ;;
  esac
done </tmp/joule.files
kv package_files_total "$(wc -l </tmp/joule.files)"
kv package_files_left "${left[*]:-none}"
# (joule-vmtest.service is the guest harness's own unit, running this script.)
kv unit_left "$(systemctl list-unit-files --no-legend joule.service 2>/dev/null | wc -l) $(find /etc/systemd /usr/lib/systemd /run/systemd/system -name 'joule*' ! -name 'joule-vmtest.service' 2>/dev/null | one_line)"
kv unit_state "$(systemctl show -p LoadState,ActiveState joule.service | one_line)"
kv cgroups_left "$(find /sys/fs/cgroup -name '*joule*' ! -name 'joule-vmtest.service' 2>/dev/null | one_line)"
kv run_joule "$(test -e /run/joule && echo present || echo absent)"
kv etc_joule "$(test -e /etc/joule && echo present || echo absent)"
kv procs_left "$(pgrep -x joule | wc -l)"
kv dsh_state_left "$(find /var/lib/systemd/deb-systemd-helper-enabled /var/lib/systemd/deb-systemd-helper-masked -name 'joule*' 2>/dev/null | one_line)"
phase end
