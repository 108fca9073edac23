#!/usr/bin/env bash
# Run inside the tier-3 VM (booted with scripts/vm/run.sh --thermal): sets the temperature
# that the guest's ACPI thermal zone (scripts/vm/thermal.asl) reports, in whole degrees
# Celsius, or "off" to go back to its built-in triangle wave. See docs/vm.md.
#
# The SSDT reads CMOS byte 0x70. This kernel has no /dev/port, so the byte is written through
# the nvram driver (/dev/nvram starts at CMOS byte 14), which refuses writes while the CMOS
# checksum is invalid, as qemu leaves it: NVRAM_SETCKS fixes the checksum first.
set -euo pipefail
case "${1:-}" in
  off) c=0 ;;
  ''|*[!0-9]*) echo "usage: set-temp.sh CELSIUS(1..150)|off" >&2; exit 2 ;;
  *) c=$1; { [ "$c" -ge 1 ] && [ "$c" -le 150 ]; } || { echo "set-temp: 1..150 C only" >&2; exit 2; } ;;
esac
[ -e /dev/nvram ] || modprobe nvram
/usr/bin/python3 - "$c" <<'PY'
import fcntl, os, sys
NVRAM_SETCKS = 0x7041            # _IO('p', 0x41) from <linux/nvram.h>
CMOS_TEMP, NVRAM_FIRST_BYTE = 0x70, 14
fd = os.open("/dev/nvram", os.O_RDWR)
fcntl.ioctl(fd, NVRAM_SETCKS)
os.pwrite(fd, bytes([int(sys.argv[1])]), CMOS_TEMP - NVRAM_FIRST_BYTE)
os.close(fd)
PY
