//! Which temperature sensors the thermal stage follows, and where its thresholds come from.
//! Only sensors that measure the CPU, SoC or package count by default — a drive, a NIC, a
//! battery or a chassis sensor at 95 °C says nothing about the CPU's heat, and capping the CPU
//! for it would throttle a healthy machine. By the zone's type or the hwmon chip's name:
//! package sensors (`x86_pkg_temp`, coretemp, k10temp/zenpower) and CPU/SoC zones (types naming
//! cpu, soc, core, package or cluster: `cpu-thermal`, `soc-thermal`, `bigcore0-thermal`,
//! `TCPU`); `acpitz` only when none of those exists; everything else is listed and ignored.
//! `[thermal] zones` replaces the choice. The stage thresholds are placed below the chosen
//! sensors' own passive trip point (else `critical_margin_celsius` below the critical one), so
//! joule acts before the kernel's own governor; on a board whose firmware throttles earlier
//! than any trip point (a Raspberry Pi, `crate::board_limits`) they are placed below the
//! firmware's limit instead; configured thresholds win. Pure: the caller reads the sensors
//! (joule-telemetry's `thermal::read_once`) and the board, so fixture trees test it.

use crate::board_limits::BoardLimit;
use crate::config::ThermalConfig;

/// The hottest stage's threshold where no trip point can place it.
pub const FALLBACK_HOTTEST_CELSIUS: f64 = 90.0;
use crate::snapshot::ThermalZone;
use serde::Serialize;

/// What a sensor measures, judged by its zone type or hwmon chip name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum SensorClass {
    /// The package or die (x86_pkg_temp, coretemp, k10temp): the best reading of CPU heat.
    Package,
    /// A CPU, SoC or cluster zone.
    Cpu,
    /// The ACPI thermal zone: somewhere on the board, often near the CPU; used only alone.
    Acpi,
    /// Anything else (a drive, a NIC, a GPU, a battery, the chipset, a fan controller).
    Other,
}

/// Classifies a zone type or hwmon chip name.
pub fn classify(kind: &str) -> SensorClass {
    let k = kind.to_ascii_lowercase();
    const PACKAGE: [&str; 5] = ["x86_pkg_temp", "coretemp", "k10temp", "zenpower", "cpu_pkg"];
    // Names that may contain "core"/"soc" but measure something else.
    const NOT_CPU: [&str; 8] = ["gpu", "npu", "ddr", "nvme", "wifi", "bat", "pch", "dram"];
    if PACKAGE.iter().any(|p| k == *p) {
        SensorClass::Package
    } else if k == "acpitz" {
        SensorClass::Acpi
    } else if NOT_CPU.iter().any(|n| k.contains(n)) {
        SensorClass::Other
    } else if k == "tcpu" || k == "b0d4" || ["cpu", "soc", "core", "package", "cluster"].iter().any(|w| k.contains(w)) {
        SensorClass::Cpu
    } else {
        SensorClass::Other
    }
}

/// One sensor as the choice saw it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SensorUse {
    pub name: String,
    pub kind: String,
    pub class: SensorClass,
    pub used: bool,
    /// Why it is used or ignored, for `joule doctor` and the agent's first lines.
    pub why: String,
}

/// The stage's sensors and thresholds on one machine.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SensorChoice {
    pub sensors: Vec<SensorUse>,
    pub thresholds_celsius: Vec<f64>,
    /// Where the thresholds came from, in words (`config`, `thermal_zone0's passive trip point
    /// at 85 °C`, ...).
    pub thresholds_from: String,
    /// The same in one word: `config`, `trip points`, `firmware` or `built-in`.
    pub thresholds_kind: &'static str,
    /// The temperature the stages keep the CPU under ([`limit`]), and where it came from.
    pub limit_celsius: f64,
    pub limit_from: LimitFrom,
    /// How far under its threshold a stage is left: `[thermal] hysteresis_celsius`, or the
    /// board's with the board's built-in stages.
    pub hysteresis_celsius: f64,
}

/// Where the thermal limit came from: the label `from` of `joule_thermal_limit_celsius`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum LimitFrom {
    /// The lowest passive trip point of the chosen sensors: where the kernel's governor throttles.
    PassiveTrip,
    /// `critical_margin_celsius` under the lowest critical trip point (no passive one).
    CriticalTrip,
    /// No usable trip point: the hottest stage threshold plus the smallest trip offset.
    #[default]
    Thresholds,
    /// The board's firmware starts throttling there (a Raspberry Pi: 80 °C), before any trip
    /// point of the chosen sensors.
    Firmware,
}

impl LimitFrom {
    pub fn as_str(self) -> &'static str {
        match self {
            LimitFrom::PassiveTrip => "passive_trip",
            LimitFrom::CriticalTrip => "critical_trip",
            LimitFrom::Thresholds => "thresholds",
            LimitFrom::Firmware => "firmware",
        }
    }
}

impl SensorChoice {
    /// The names of the sensors the stage follows.
    pub fn used(&self) -> impl Iterator<Item = &str> {
        self.sensors.iter().filter(|s| s.used).map(|s| s.name.as_str())
    }

    pub fn any_used(&self) -> bool {
        self.sensors.iter().any(|s| s.used)
    }
}

/// Whether `zone` is named by one of `[thermal] zones` (its type, its name, or its hwmon chip).
fn named(zone: &ThermalZone, wanted: &[String]) -> bool {
    let chip = zone.name.split_once('/').map(|(c, _)| c);
    wanted.iter().any(|w| *w == zone.kind || *w == zone.name || Some(w.as_str()) == chip)
}

/// Chooses the sensors the stage follows among `zones` (the sensors read, not the model).
pub fn choose_sensors(zones: &[ThermalZone], th: &ThermalConfig) -> Vec<SensorUse> {
    let classes: Vec<SensorClass> = zones.iter().map(|z| classify(&z.kind)).collect();
    let has_cpu = classes.iter().any(|c| matches!(c, SensorClass::Package | SensorClass::Cpu));
    zones
        .iter()
        .zip(classes)
        .map(|(z, class)| {
            let (used, why) = if !th.zones.is_empty() {
                if named(z, &th.zones) {
                    (true, "named in [thermal] zones".to_string())
                } else {
                    (false, "not in [thermal] zones".to_string())
                }
            } else {
                match class {
                    SensorClass::Package => (true, format!("{}: the CPU package", z.kind)),
                    SensorClass::Cpu => (true, format!("{}: a CPU/SoC zone", z.kind)),
                    SensorClass::Acpi if has_cpu => (false, "acpitz: a CPU or package sensor is better".to_string()),
                    SensorClass::Acpi => (true, "acpitz: no CPU or package sensor, the ACPI zone stands in".to_string()),
                    SensorClass::Other => {
                        (false, format!("{}: not a CPU sensor (name it in [thermal] zones to use it)", if z.kind.is_empty() { "?" } else { z.kind.as_str() }))
                    }
                }
            };
            SensorUse { name: z.name.clone(), kind: z.kind.clone(), class, used, why }
        })
        .collect()
}

/// A trip point temperature joule can place stages under: firmware writes 0 or absurd values
/// for disabled trips (x86_pkg_temp's are often 0).
fn plausible(t: f64) -> bool {
    (30.0..=150.0).contains(&t)
}

/// The lowest plausible trip point of `kind` among the used sensors, and its zone.
fn lowest_trip(zones: &[ThermalZone], used: &[SensorUse], kind: &str) -> Option<(f64, String)> {
    zones
        .iter()
        .zip(used)
        .filter(|(_, u)| u.used)
        .flat_map(|(z, _)| z.trips.iter().filter(|t| t.kind == kind && plausible(t.temp_celsius)).map(|t| (t.temp_celsius, z.name.clone())))
        .min_by(|a, b| a.0.total_cmp(&b.0))
}

/// The temperature trip points say the stages must keep under: the lowest passive trip of the
/// used sensors, else `critical_margin_celsius` under the lowest critical one; with its zone,
/// the trip and its kind.
fn trip_reference(zones: &[ThermalZone], used: &[SensorUse], th: &ThermalConfig) -> Option<(f64, String, f64, LimitFrom)> {
    if let Some((t, zone)) = lowest_trip(zones, used, "passive") {
        return Some((t, zone, t, LimitFrom::PassiveTrip));
    }
    lowest_trip(zones, used, "critical").map(|(t, zone)| (t - th.critical_margin_celsius, zone, t, LimitFrom::CriticalTrip))
}

/// The board's firmware limit when it comes before the trip points' reference (or there is
/// none): the earliest governor is the one to be done before. A tie goes to the firmware, the
/// one the kernel cannot see.
fn firmware_first<'a>(zones: &[ThermalZone], used: &[SensorUse], th: &ThermalConfig, board: Option<&'a BoardLimit>) -> Option<&'a BoardLimit> {
    let b = board?;
    match trip_reference(zones, used, th) {
        Some((reference, ..)) if reference < b.soft_celsius => None,
        _ => Some(b),
    }
}

/// The offsets and hysteresis under a firmware limit: the board's own pair while both keys are
/// at their defaults, else the configured ones (validated together by the config check; the
/// board's offsets with another hysteresis could break the rule that a stage is never left
/// above the threshold below it).
fn firmware_offsets(th: &ThermalConfig, b: &BoardLimit) -> (Vec<f64>, f64) {
    let d = ThermalConfig::default();
    if th.trip_offsets_celsius == d.trip_offsets_celsius && th.hysteresis_celsius == d.hysteresis_celsius {
        (b.offsets_celsius.clone(), b.hysteresis_celsius)
    } else {
        (th.trip_offsets_celsius.clone(), th.hysteresis_celsius)
    }
}

/// The stage thresholds: configured ones, else below the lowest passive trip point of the used
/// sensors, else `critical_margin_celsius` below the lowest critical one, else the fallback.
pub fn thresholds(zones: &[ThermalZone], used: &[SensorUse], th: &ThermalConfig, board: Option<&BoardLimit>) -> (Vec<f64>, String, &'static str) {
    if !th.stage_thresholds_celsius.is_empty() {
        return (th.stage_thresholds_celsius.clone(), "[thermal] stage_thresholds_celsius".into(), "config");
    }
    if let Some(b) = firmware_first(zones, used, th, board) {
        let (offsets, _) = firmware_offsets(th, b);
        let words = format!("the board's firmware limit at {} °C ({}), minus {offsets:?}", b.soft_celsius, b.from);
        return (offsets.iter().map(|o| b.soft_celsius - o).collect(), words, "firmware");
    }
    let below = |reference: f64| th.trip_offsets_celsius.iter().map(|o| reference - o).collect::<Vec<_>>();
    if let Some((reference, zone, t, from)) = trip_reference(zones, used, th) {
        let words = match from {
            LimitFrom::PassiveTrip => format!("{zone}'s passive trip point at {t} °C, minus {:?}", th.trip_offsets_celsius),
            _ => format!("{zone}'s critical trip point at {t} °C, minus {} and {:?}", th.critical_margin_celsius, th.trip_offsets_celsius),
        };
        return (below(reference), words, "trip points");
    }
    // As many stages as there are, 10 °C apart, the hottest at 90 °C (70/80/90 for three).
    let c = th.stage_count();
    let fallback: Vec<f64> = (0..c).map(|i| FALLBACK_HOTTEST_CELSIUS - 10.0 * (c - 1 - i) as f64).collect();
    (fallback, "no usable trip point on the chosen sensors: built-in thresholds".into(), "built-in")
}

/// The thermal limit: the temperature the stages are there to keep the CPU under, for the
/// fleet's "time over the limit" (`joule_thermal_limit_celsius`, docs/fleet.md). The used
/// sensors' lowest passive trip point (where the kernel's own governor starts throttling),
/// else `critical_margin_celsius` under their lowest critical one, whether or not the
/// thresholds were configured; with no usable trip point, the hottest threshold plus the
/// smallest trip offset (the gap the trip points' stages keep: 90 + 5 °C built in).
pub fn limit(zones: &[ThermalZone], used: &[SensorUse], th: &ThermalConfig, board: Option<&BoardLimit>, thresholds_celsius: &[f64]) -> (f64, LimitFrom) {
    if let Some(b) = firmware_first(zones, used, th, board) {
        return (b.soft_celsius, LimitFrom::Firmware);
    }
    if let Some((reference, _, _, from)) = trip_reference(zones, used, th) {
        return (reference, from);
    }
    let hottest = thresholds_celsius.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let gap = th.trip_offsets_celsius.iter().copied().fold(f64::INFINITY, f64::min);
    let hottest = if hottest.is_finite() { hottest } else { FALLBACK_HOTTEST_CELSIUS };
    (hottest + if gap.is_finite() { gap.max(0.0) } else { 0.0 }, LimitFrom::Thresholds)
}

/// The whole choice on a machine with no known firmware limit: sensors, then thresholds.
pub fn choose(zones: &[ThermalZone], th: &ThermalConfig) -> SensorChoice {
    choose_on(zones, th, None)
}

/// The whole choice on a board whose firmware limit (`crate::board_limits::read`) may come
/// before the trip points.
pub fn choose_on(zones: &[ThermalZone], th: &ThermalConfig, board: Option<&BoardLimit>) -> SensorChoice {
    let sensors = choose_sensors(zones, th);
    let (thresholds_celsius, thresholds_from, thresholds_kind) = thresholds(zones, &sensors, th, board);
    let (limit_celsius, limit_from) = limit(zones, &sensors, th, board, &thresholds_celsius);
    let hysteresis_celsius = match firmware_first(zones, &sensors, th, board) {
        Some(b) if th.stage_thresholds_celsius.is_empty() => firmware_offsets(th, b).1,
        _ => th.hysteresis_celsius,
    };
    SensorChoice { sensors, thresholds_celsius, thresholds_from, thresholds_kind, limit_celsius, limit_from, hysteresis_celsius }
}

#[cfg(test)]
mod tests;
