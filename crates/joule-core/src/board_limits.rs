//! Where a board's own firmware starts to throttle, so the thermal stages can be done before
//! it. A kernel trip point is not the only governor: a Raspberry Pi's firmware (on the VideoCore,
//! invisible to Linux's thermal framework) slows the Arm cores progressively from 80 °C and
//! everything at 85 °C, a lower `temp_limit` in config.txt lowers that, and its kernel zone
//! shows only a 110 °C critical trip. Left to the trip points, joule's stages would finish
//! past 80 °C, when the firmware is already slowing the labelled work with the rest.
//!
//! The board is known from the device tree's `compatible` (NUL-separated strings under
//! `<sys>/firmware/devicetree/base/compatible`), the limit from the Raspberry Pi
//! documentation ("Frequency management and thermal control"; config.txt's overclocking
//! options for `temp_limit`), docs/thermal.md "Boards' own limits". The parsers are pure and
//! bounded; [`read`] is the only part that opens files, every root a parameter.

use serde::Serialize;
use std::path::Path;

/// Where the Raspberry Pi firmware starts throttling the Arm cores by default.
pub const PI_SOFT_CELSIUS: f64 = 80.0;
/// Where it throttles the Arm cores and the GPU hard by default, and the highest `temp_limit`
/// it accepts ("values over 85 are clamped").
pub const PI_HARD_CELSIUS: f64 = 85.0;
/// Built-in stages on a Pi: this far under the firmware's soft limit, with
/// [`PI_HYSTERESIS_CELSIUS`]. Stage 3 is the backstop 0.4 °C under it; stage 2 holds 1 °C
/// under it because the bench's Pi 5 plant overshoots a threshold by ~0.5 °C before a cap
/// takes hold at its full-load heating rate (docs/thermal.md has the arithmetic); stage 1 at
/// 3 °C is where the heating rate first slows. The plant's time is compressed (its heatsink
/// settles in ~15 s; a real board's in minutes), so a real Pi heats slower and these margins
/// are wider than it needs, never narrower.
pub const PI_OFFSETS_CELSIUS: [f64; 3] = [3.0, 1.0, 0.4];
/// A stage is left this far under its threshold on a Pi: under the 0.6 °C gap between the last
/// two stages, as the config check asks of any hysteresis.
pub const PI_HYSTERESIS_CELSIUS: f64 = 0.5;
/// config.txt is read up to this many bytes: it is a root-owned text file of a few KiB, and
/// a strange one must not make the agent read forever.
const MAX_CONFIG_TXT_BYTES: u64 = 256 * 1024;
/// The device tree's compatible is a few dozen bytes.
const MAX_COMPATIBLE_BYTES: u64 = 4096;

/// A board firmware's own throttle: the temperature the stages must finish under.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BoardLimit {
    /// The board, as its first compatible string names it (`raspberrypi,5-model-b`).
    pub board: String,
    /// Where the firmware starts to throttle: joule's thermal limit on this board.
    pub soft_celsius: f64,
    /// Where it throttles hard.
    pub hard_celsius: f64,
    /// Where the figures came from, in words, for `joule doctor` and the agent's first lines.
    pub from: String,
    /// The built-in stages: this far under `soft_celsius`, and their hysteresis.
    pub offsets_celsius: Vec<f64>,
    pub hysteresis_celsius: f64,
}

/// The strings of a device tree `compatible` property: NUL-separated, most specific first.
/// Empty or non-UTF-8 strings are dropped (nothing here is trusted to be text).
pub fn parse_compatible(bytes: &[u8]) -> Vec<String> {
    bytes.split(|b| *b == 0).filter(|s| !s.is_empty()).filter_map(|s| std::str::from_utf8(s).ok()).map(str::to_string).collect()
}

/// `temp_limit` from config.txt's unconditional part: the lines before the first `[section]`
/// and those under `[all]`. A value under a filter (`[pi4]`, `[cm5]`, `[gpio4=1]`, ...) applies
/// to some boards or states only; joule does not evaluate filters, so it ignores them rather
/// than guess (docs/thermal.md). The last assignment wins, as in the firmware. Comments (`#`
/// to the end of the line), spaces around `=` and a value that is not a number are tolerated:
/// a line that does not parse is skipped, never an error.
pub fn parse_temp_limit(text: &str) -> Option<f64> {
    let mut unconditional = true;
    let mut found = None;
    for raw in text.lines() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if let Some(section) = line.strip_prefix('[') {
            unconditional = section.trim_end_matches(']').trim().eq_ignore_ascii_case("all");
            continue;
        }
        if !unconditional {
            continue;
        }
        let Some((key, value)) = line.split_once('=') else { continue };
        if key.trim() != "temp_limit" {
            continue;
        }
        if let Ok(v) = value.trim().parse::<f64>() {
            if v.is_finite() && v > 0.0 {
                found = Some(v);
            }
        }
    }
    found
}

/// The firmware limit of the board `compatible` names, with config.txt's text if readable
/// (None: the path it was looked for at, for the words). None: a board with no known firmware
/// throttle (its trip points stay the rule).
pub fn for_board(compatible: &[String], config_txt: Option<(&Path, &str)>) -> Option<BoardLimit> {
    let first = compatible.first()?;
    if !compatible.iter().any(|c| c.starts_with("raspberrypi,")) {
        return None;
    }
    let doc = "the Raspberry Pi firmware throttles the Arm cores from 80 °C and hard at 85 °C";
    let (soft, hard, from) = match config_txt.and_then(|(p, t)| parse_temp_limit(t).map(|v| (p, v))) {
        // The firmware clamps a higher value to 85. A lower one lowers the hard limit; the
        // documentation does not say where the progressive throttle then starts, so joule
        // assumes the band keeps its 5 °C width under it (the earlier of the two readings).
        Some((p, v)) => {
            let hard = v.min(PI_HARD_CELSIUS);
            let soft = PI_SOFT_CELSIUS.min(hard - (PI_HARD_CELSIUS - PI_SOFT_CELSIUS));
            (soft, hard, format!("{first}: {doc}; {} sets temp_limit={v}, so hard at {hard} °C and progressive from {soft} °C", p.display()))
        }
        None => (PI_SOFT_CELSIUS, PI_HARD_CELSIUS, format!("{first}: {doc} (no temp_limit in config.txt)")),
    };
    Some(BoardLimit {
        board: first.clone(),
        soft_celsius: soft,
        hard_celsius: hard,
        from,
        offsets_celsius: PI_OFFSETS_CELSIUS.to_vec(),
        hysteresis_celsius: PI_HYSTERESIS_CELSIUS,
    })
}

/// Up to `max` bytes of `path`; None when it cannot be opened.
fn read_bounded(path: &Path, max: u64) -> Option<Vec<u8>> {
    use std::io::Read;
    let mut buf = Vec::new();
    std::fs::File::open(path).ok()?.take(max).read_to_end(&mut buf).ok()?;
    Some(buf)
}

/// The board's firmware limit on this machine: the compatible under `sys`
/// (`firmware/devicetree/base/compatible`) and config.txt under `boot` (`firmware/config.txt`,
/// Bookworm and later, else `config.txt`). None on a machine without a device tree or a board
/// joule knows.
pub fn read(sys: &Path, boot: &Path) -> Option<BoardLimit> {
    let compatible = parse_compatible(&read_bounded(&sys.join("firmware/devicetree/base/compatible"), MAX_COMPATIBLE_BYTES)?);
    let config = ["firmware/config.txt", "config.txt"].iter().map(|p| boot.join(p)).find_map(|p| {
        let bytes = read_bounded(&p, MAX_CONFIG_TXT_BYTES)?;
        Some((p, String::from_utf8_lossy(&bytes).into_owned()))
    });
    for_board(&compatible, config.as_ref().map(|(p, t)| (p.as_path(), t.as_str())))
}

#[cfg(test)]
mod tests {
    use super::*;

    const PI5: &[u8] = b"raspberrypi,5-model-b\0brcm,bcm2712\0";

    #[test]
    fn a_pi_5_is_known_by_its_compatible_and_throttles_from_80() {
        let c = parse_compatible(PI5);
        assert_eq!(c, ["raspberrypi,5-model-b", "brcm,bcm2712"]);
        let l = for_board(&c, None).unwrap();
        assert_eq!((l.soft_celsius, l.hard_celsius), (80.0, 85.0));
        assert!(l.from.contains("raspberrypi,5-model-b") && l.from.contains("no temp_limit"), "{}", l.from);
        let stages: Vec<f64> = l.offsets_celsius.iter().map(|o| l.soft_celsius - o).collect();
        assert!(stages.iter().all(|s| *s < 80.0) && stages.windows(2).all(|w| w[1] - w[0] > l.hysteresis_celsius), "{stages:?}");
    }

    #[test]
    fn other_boards_have_no_firmware_limit() {
        let cases: [&[u8]; 4] = [b"rockchip,rk3588-evb1-v10\0rockchip,rk3588\0", b"", b"\0\0", b"\xff\xfe\0"];
        for c in cases {
            assert_eq!(for_board(&parse_compatible(c), None), None, "{c:?}");
        }
    }

    #[test]
    fn temp_limit_counts_only_in_the_unconditional_part() {
        assert_eq!(parse_temp_limit("arm_boost=1\ntemp_limit=75\n"), Some(75.0));
        assert_eq!(parse_temp_limit("temp_limit = 70 # cooler\n[all]\ntemp_limit=72\n"), Some(72.0), "the last wins");
        assert_eq!(parse_temp_limit("[pi4]\ntemp_limit=60\n[all]\n"), None, "a filtered value is not this board's for sure");
        assert_eq!(parse_temp_limit("[cm5]\ntemp_limit=60\n[all]\ntemp_limit=78\n"), Some(78.0));
        assert_eq!(parse_temp_limit("#temp_limit=60\ntemp_limit_x=60\ntemp_limit=hot\ntemp_limit=-5\n"), None);
        assert_eq!(parse_temp_limit("\u{0}\u{1}garbage\n[[[\n=\n"), None);
    }

    #[test]
    fn a_lower_temp_limit_lowers_both_and_a_higher_one_is_clamped() {
        let c = parse_compatible(PI5);
        let at = |t: &str| for_board(&c, Some((Path::new("/boot/firmware/config.txt"), t))).unwrap();
        let l = at("temp_limit=75\n");
        assert_eq!((l.soft_celsius, l.hard_celsius), (70.0, 75.0));
        assert!(l.from.contains("/boot/firmware/config.txt sets temp_limit=75"), "{}", l.from);
        let l = at("temp_limit=90\n");
        assert_eq!((l.soft_celsius, l.hard_celsius), (80.0, 85.0));
        assert_eq!(at("dtparam=audio=on\n").soft_celsius, 80.0);
    }

    #[test]
    fn read_looks_under_the_given_roots_and_prefers_boot_firmware() {
        let d = tempfile::tempdir().unwrap();
        let (sys, boot) = (d.path().join("sys"), d.path().join("boot"));
        assert_eq!(read(&sys, &boot), None, "no device tree");
        std::fs::create_dir_all(sys.join("firmware/devicetree/base")).unwrap();
        std::fs::write(sys.join("firmware/devicetree/base/compatible"), PI5).unwrap();
        assert_eq!(read(&sys, &boot).unwrap().soft_celsius, 80.0, "no config.txt: the defaults");
        std::fs::create_dir_all(boot.join("firmware")).unwrap();
        std::fs::write(boot.join("config.txt"), "temp_limit=79\n").unwrap();
        assert_eq!(read(&sys, &boot).unwrap().hard_celsius, 79.0);
        std::fs::write(boot.join("firmware/config.txt"), "temp_limit=77\n").unwrap();
        assert_eq!(read(&sys, &boot).unwrap().hard_celsius, 77.0, "Bookworm's place first");
    }
}
