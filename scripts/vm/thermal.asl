/*
 * An ACPI thermal zone for the tier-3 VM (compiled by scripts/vm/setup.sh with iasl into
 * $JOULE_VM_CACHE/thermal.aml; scripts/vm/run.sh --thermal passes it to qemu as
 * -acpitable). The guest kernel's acpi thermal driver turns it into
 * /sys/class/thermal/thermal_zone0 (type acpitz), polled every second, so the
 * thermal/thermal_temperature tracepoint fires as on a real machine.
 *
 * The temperature is test-controlled: _TMP reads CMOS NVRAM byte 0x70 (whole degrees
 * Celsius; unused by qemu and SeaBIOS) through the RTC index/data ports 0x70/0x71 (ACPICA
 * allows AML these ports as long as no _OSI("Windows ...") was evaluated; qemu's DSDT
 * evaluates none). Inside the guest, `scripts/vm/set-temp.sh 70` sets 70 C through
 * /dev/nvram: this kernel has no /dev/port, ACPI configfs, custom-method or thermal
 * emulation. While the byte is 0 (qemu's reset state; `set-temp.sh off`) or above 150, _TMP
 * is a triangle wave from the ACPI Timer instead: 40 C -> 60 C -> 40 C over 20 s, 2 C per
 * second, so an untouched zone still moves. See docs/vm.md.
 */
DefinitionBlock ("thermal.aml", "SSDT", 2, "JOULE", "THERMAL", 0x00000001)
{
    Scope (\_TZ)
    {
        /* The RTC's index/data ports; CMOS byte 0x70 holds the test's temperature. */
        OperationRegion (JCMS, SystemIO, 0x70, 0x02)
        Field (JCMS, ByteAcc, NoLock, Preserve)
        {
            JIDX, 8,
            JDAT, 8
        }

        IndexField (JIDX, JDAT, ByteAcc, NoLock, Preserve)
        {
            Offset (0x70),
            JTC, 8
        }

        ThermalZone (JTZ0)
        {
            /* Tenths of Kelvin: set by the guest (1..150 C), else the triangle. */
            Method (_TMP, 0, Serialized)
            {
                Local0 = JTC
                If ((Local0 >= 1) && (Local0 <= 150))
                {
                    Return ((2732 + (Local0 * 10)))
                }

                /* Timer counts 100 ns; s is the position in a 20 s period. */
                Local1 = ((Timer / 10000000) % 20)
                If (Local1 >= 10)
                {
                    Local1 = (20 - Local1)
                }
                Return ((3132 + (Local1 * 20)))
            }

            Method (_CRT, 0, NotSerialized)     /* 105 C: far above anything a test sets */
            {
                Return (3782)
            }

            Method (_HOT, 0, NotSerialized)     /* 100 C */
            {
                Return (3732)
            }

            Name (_TZP, 10)                     /* poll every 1.0 s */
            Name (_STR, Unicode ("joule test zone"))
        }
    }
}
