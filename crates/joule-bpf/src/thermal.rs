//! Loader of thermal.bpf.c, mechanism 1's kernel half: thresholds and hysteresis go into the
//! kernel, temperatures (zones through the tracepoint, the model through `feed`) come out as a
//! stage in the pinned `thermal_stage` map, which a sched_ext scheduler reads directly.

use crate::error::{bpf, BpfError};
use crate::intf::{
    joule_feed_ctx, joule_stage, joule_thermal_config, joule_zone_state, JOULE_FEED_NO_CONFIG, JOULE_FEED_OK,
    JOULE_FEED_ZONES_FULL, JOULE_MAX_STAGES, JOULE_TEMP_MODEL, JOULE_TEMP_NONE, JOULE_TEMP_SENSOR,
};
use crate::pod::{as_bytes, from_bytes};
use crate::storage::ObjectStorage;
use crate::thermal_skel::{ThermalSkel, ThermalSkelBuilder};
use joule_core::journal::{Journal, JournalError, Undo};
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, ProgramInput};
use std::mem::ManuallyDrop;
use std::path::{Path, PathBuf};

/// Names of the pinned maps inside the pin directory (the scheduler's side of the contract).
pub const PIN_STAGE: &str = "thermal_stage";
pub const PIN_ZONES: &str = "thermal_zones";
pub const PIN_CONFIG: &str = "thermal_config";
/// Zone id the thermal model feeds under (`JOULE_MODEL_ZONE` in intf.h).
pub const MODEL_ZONE: u32 = crate::intf::JOULE_MODEL_ZONE;
/// First zone id of hwmon sensors fed from user space (`JOULE_HWMON_ZONE_BASE` in intf.h).
pub const HWMON_ZONE_BASE: u32 = crate::intf::JOULE_HWMON_ZONE_BASE;
/// How long a zone counts in the machine-wide stage after its last reading, unless
/// [`ThermalStage::set_stale_ms`] says otherwise: 10 s, ten of the kernel's usual 1 s polls of a
/// thermal zone and many of the agent's samples, each of which feeds every sensor it reads.
pub const DEFAULT_STALE_MS: u64 = 10_000;
const JOURNAL_OWNER: &str = "bpf";

/// Where [`ThermalStage::load_with`] records the undo of each change it makes, before making
/// it: the agent's undo [`Journal`], or a test's recorder.
pub trait UndoRecorder {
    fn record(&mut self, owner: &str, undo: Undo) -> Result<(), JournalError>;
}

impl UndoRecorder for Journal {
    fn record(&mut self, owner: &str, undo: Undo) -> Result<(), JournalError> {
        Journal::record(self, owner, undo)
    }
}

#[derive(Debug, Clone)]
pub struct ThermalStageOpts {
    /// Where the maps are pinned (the agent uses `telemetry.bpf_pin_dir`, `/sys/fs/bpf/joule`
    /// by default) so a sched_ext scheduler can
    /// read the stage; `None` keeps them private to this process (tests, benchmarks, or a
    /// machine without bpffs): the stage still works, only other processes cannot see it.
    pub pin_dir: Option<PathBuf>,
    /// Stage n (1..=8) starts at `thresholds_mc[n-1]`; strictly ascending.
    pub thresholds_mc: Vec<i64>,
    /// A stage is left only below its threshold minus this, so a temperature hovering at a
    /// threshold does not flap the scheduler between stages.
    pub hysteresis_mc: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TempSource {
    Sensor,
    Model,
    /// No reading has reached this entry yet (or it holds a value this joule does not know).
    None,
}

impl TempSource {
    fn to_raw(self) -> u32 {
        match self {
            TempSource::Sensor => JOULE_TEMP_SENSOR,
            TempSource::Model => JOULE_TEMP_MODEL,
            TempSource::None => JOULE_TEMP_NONE,
        }
    }
    fn from_raw(raw: u32) -> Self {
        match raw {
            JOULE_TEMP_SENSOR => TempSource::Sensor,
            JOULE_TEMP_MODEL => TempSource::Model,
            _ => TempSource::None,
        }
    }
}

/// The machine-wide stage, as the scheduler sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StageReading {
    pub stage: u32,
    /// Temperature of the zone that set the stage.
    pub temp_mc: i64,
    pub zone: u32,
    pub source: TempSource,
    /// Stage changes since load.
    pub transitions: u64,
    /// CLOCK_MONOTONIC ns of the last reading (0: none yet).
    pub updated_ns: u64,
}

impl StageReading {
    /// Decodes a value of the `thermal_stage` map (for readers of the pinned map).
    pub fn from_map_value(bytes: &[u8]) -> Option<StageReading> {
        let s: joule_stage = from_bytes(bytes)?;
        Some(StageReading {
            stage: s.stage,
            temp_mc: s.temp_mc,
            zone: s.zone,
            source: TempSource::from_raw(s.source),
            transitions: s.transitions,
            updated_ns: s.updated_ns,
        })
    }
}

/// The last reading of one zone and that zone's own stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ZoneReading {
    pub zone: u32,
    pub temp_mc: i64,
    pub stage: u32,
    pub source: TempSource,
    pub updated_ns: u64,
}

/// The loaded thermal stage programs and their pins. Dropping it detaches the tracepoint and
/// removes the pins.
pub struct ThermalStage {
    skel: ManuallyDrop<ThermalSkel<'static>>,
    tp_link: Option<Link>,
    tp_error: Option<String>,
    pin_dir: Option<PathBuf>,
    pins: Vec<PathBuf>,
    created_dir: bool,
    /// What `thermal_config` holds.
    cfg: joule_thermal_config,
    _storage: ObjectStorage,
}

fn validate(opts: &ThermalStageOpts) -> Result<joule_thermal_config, BpfError> {
    let t = &opts.thresholds_mc;
    if t.is_empty() || t.len() > JOULE_MAX_STAGES as usize {
        return Err(BpfError::Config(format!("need 1 to {JOULE_MAX_STAGES} thresholds, got {}", t.len())));
    }
    if let Some(w) = t.windows(2).find(|w| w[0] >= w[1]) {
        return Err(BpfError::Config(format!("thresholds must ascend strictly ({} mC then {} mC)", w[0], w[1])));
    }
    if opts.hysteresis_mc < 0 {
        return Err(BpfError::Config(format!("hysteresis {} mC is negative", opts.hysteresis_mc)));
    }
    let mut cfg = joule_thermal_config {
        hysteresis_mc: opts.hysteresis_mc,
        stale_ns: stale_ns(DEFAULT_STALE_MS),
        nr_thresholds: t.len() as u32,
        ..Default::default()
    };
    cfg.thresholds_mc[..t.len()].copy_from_slice(t);
    Ok(cfg)
}

/// The kernel compares ages as signed 64-bit ns; 0 stays 0 (never stale).
fn stale_ns(stale_ms: u64) -> u64 {
    stale_ms.saturating_mul(1_000_000).min(i64::MAX as u64)
}

impl ThermalStage {
    /// Loads the programs, writes the config, pins the maps (recording each pin in `journal`
    /// first) and attaches the tracepoint. A tracepoint that cannot attach is not an error:
    /// `feed` still works; see `attached_to_tracepoint`.
    pub fn load(opts: ThermalStageOpts, journal: Option<&mut Journal>) -> Result<ThermalStage, BpfError> {
        Self::load_with(opts, journal.map(|j| j as &mut dyn UndoRecorder))
    }

    /// [`Self::load`] with any [`UndoRecorder`] in place of the journal.
    pub fn load_with(opts: ThermalStageOpts, journal: Option<&mut dyn UndoRecorder>) -> Result<ThermalStage, BpfError> {
        let cfg = validate(&opts)?;
        let mut storage = ObjectStorage::new();
        // SAFETY: `skel` is dropped before `storage` (see Drop), and `get` is called once.
        let open_object = unsafe { storage.get() };
        let open = bpf("opening thermal.bpf.o", ThermalSkelBuilder::default().open(open_object))?;
        let skel = bpf("loading the thermal stage programs into the kernel", open.load())?;
        let mut me = ThermalStage {
            skel: ManuallyDrop::new(skel),
            tp_link: None,
            tp_error: None,
            pin_dir: opts.pin_dir,
            pins: Vec::new(),
            created_dir: false,
            cfg,
            _storage: storage,
        };
        me.write_config()?;
        if let Some(dir) = me.pin_dir.clone() {
            // On error `me` drops here and removes whatever it pinned already.
            me.pin_all(&dir, journal)?;
        }
        match me.skel.progs.joule_thermal_temperature.attach() {
            Ok(link) => me.tp_link = Some(link),
            Err(e) => {
                tracing::warn!("thermal/thermal_temperature: cannot attach ({e}); only fed temperatures will move the stage");
                me.tp_error = Some(e.to_string());
            }
        }
        Ok(me)
    }

    fn pin_all(&mut self, dir: &Path, mut journal: Option<&mut dyn UndoRecorder>) -> Result<(), BpfError> {
        let io = |path: &Path| {
            let path = path.to_path_buf();
            move |source| BpfError::Io { path, source }
        };
        if !dir.exists() {
            if let Some(j) = journal.as_deref_mut() {
                j.record(JOURNAL_OWNER, Undo::RemoveDir { path: dir.to_path_buf(), evacuate_to: None })?;
            }
            std::fs::create_dir(dir).map_err(io(dir))?;
            self.created_dir = true;
        }
        for name in [PIN_STAGE, PIN_ZONES, PIN_CONFIG] {
            let path = dir.join(name);
            if path.exists() {
                return Err(BpfError::AlreadyPinned { path });
            }
            if let Some(j) = journal.as_deref_mut() {
                j.record(JOURNAL_OWNER, Undo::RemoveFile { path: path.clone() })?;
            }
            let maps = &mut self.skel.maps;
            let map = match name {
                PIN_STAGE => &mut maps.thermal_stage,
                PIN_ZONES => &mut maps.thermal_zones,
                _ => &mut maps.thermal_config,
            };
            bpf(format!("pinning {}", path.display()), map.pin(&path))?;
            self.pins.push(path);
        }
        Ok(())
    }

    fn write_config(&self) -> Result<(), BpfError> {
        bpf(
            "writing the thermal config map",
            self.skel.maps.thermal_config.update(&0u32.to_ne_bytes(), as_bytes(&self.cfg), MapFlags::ANY),
        )
    }

    /// A zone whose last reading is older than `stale_ms` stops counting in the machine-wide
    /// stage ([`DEFAULT_STALE_MS`] from load; 0: zones never go stale). Its own entry in
    /// `zones()` keeps its last temperature and stage, and it counts again from its next
    /// reading. Takes effect at the next reading: the stage is only recomputed when one
    /// arrives, so with every zone silent it keeps its last value (see `stale_ns` in intf.h).
    pub fn set_stale_ms(&mut self, stale_ms: u64) -> Result<(), BpfError> {
        let old = self.cfg.stale_ns;
        self.cfg.stale_ns = stale_ns(stale_ms);
        // Only stale_ns changes: a program reading the config meanwhile sees the same
        // thresholds, and at worst a mix of the old and new stale_ns for that one reading,
        // which the next reading repairs.
        self.write_config().inspect_err(|_| self.cfg.stale_ns = old)
    }

    /// Feeds one temperature through the same stage rule as the tracepoint (BPF_PROG_TEST_RUN
    /// of the `feed` syscall program). This is how the thermal model reaches the kernel.
    pub fn feed(&self, zone: u32, temp_mc: i64, source: TempSource) -> Result<(), BpfError> {
        if source == TempSource::None {
            return Err(BpfError::Feed("a reading must say where it came from (sensor or model)"));
        }
        let mut ctx = joule_feed_ctx { zone, source: source.to_raw(), temp_mc };
        // SAFETY: joule_feed_ctx is Pod; the kernel reads ctx_size_in bytes of it.
        let bytes = unsafe {
            std::slice::from_raw_parts_mut((&mut ctx as *mut joule_feed_ctx).cast::<u8>(), size_of::<joule_feed_ctx>())
        };
        let input = ProgramInput { context_in: Some(bytes), ..Default::default() };
        let out = bpf("running the thermal feed program", self.skel.progs.joule_thermal_feed.test_run(input))?;
        match out.return_value {
            JOULE_FEED_OK => Ok(()),
            JOULE_FEED_NO_CONFIG => Err(BpfError::Feed("the thermal config map is empty")),
            JOULE_FEED_ZONES_FULL => Err(BpfError::Feed("too many thermal zones (JOULE_MAX_ZONES)")),
            _ => Err(BpfError::Feed("unknown return value")),
        }
    }

    pub fn read(&self) -> StageReading {
        read_stage(&*self.skel.maps.thermal_stage).expect("thermal_stage is an array map with one entry of our layout")
    }

    /// Every zone seen so far, by zone id.
    pub fn zones(&self) -> Vec<ZoneReading> {
        let map = &self.skel.maps.thermal_zones;
        let mut out: Vec<ZoneReading> = map
            .keys()
            .filter_map(|k| {
                let zone: u32 = from_bytes(&k)?;
                let z: joule_zone_state = from_bytes(&map.lookup(&k, MapFlags::ANY).ok()??)?;
                Some(ZoneReading {
                    zone,
                    temp_mc: z.temp_mc,
                    stage: z.stage,
                    source: TempSource::from_raw(z.source),
                    updated_ns: z.updated_ns,
                })
            })
            .collect();
        out.sort_by_key(|z| z.zone);
        out
    }

    /// True when thermal/thermal_temperature feeds the stage (zones report by themselves).
    pub fn attached_to_tracepoint(&self) -> bool {
        self.tp_link.is_some()
    }

    /// Why the tracepoint did not attach, when it did not.
    pub fn tracepoint_error(&self) -> Option<&str> {
        self.tp_error.as_deref()
    }

    /// Where the maps are pinned, if they are.
    pub fn pin_dir(&self) -> Option<&Path> {
        self.pin_dir.as_deref()
    }

    /// Reads the stage from a pinned map, as any other process (a scheduler loader, `joule
    /// status`) would.
    pub fn read_pinned(pin_dir: &Path) -> Result<StageReading, BpfError> {
        let path = pin_dir.join(PIN_STAGE);
        let map = bpf(format!("opening {}", path.display()), MapHandle::from_pinned_path(&path))?;
        read_stage(&map)
    }

    /// Detaches and removes the pins now (Drop does the same, ignoring errors).
    pub fn unpin(mut self) -> Result<(), BpfError> {
        self.remove_pins()
    }

    fn remove_pins(&mut self) -> Result<(), BpfError> {
        let mut first_err = None;
        for path in self.pins.drain(..) {
            if let Err(source) = std::fs::remove_file(&path) {
                if source.kind() != std::io::ErrorKind::NotFound {
                    first_err.get_or_insert(BpfError::Io { path, source });
                }
            }
        }
        if let (true, Some(dir)) = (self.created_dir, &self.pin_dir) {
            self.created_dir = false;
            // Fails harmlessly when someone else pinned something there meanwhile.
            let _ = std::fs::remove_dir(dir);
        }
        first_err.map_or(Ok(()), Err)
    }
}

fn read_stage(map: &dyn MapCore) -> Result<StageReading, BpfError> {
    let v = bpf("reading thermal_stage", map.lookup(&0u32.to_ne_bytes(), MapFlags::ANY))?;
    v.as_deref()
        .and_then(StageReading::from_map_value)
        .ok_or_else(|| BpfError::Unavailable("thermal_stage holds no value of this joule's layout".into()))
}

impl Drop for ThermalStage {
    fn drop(&mut self) {
        self.tp_link.take();
        if let Err(e) = self.remove_pins() {
            tracing::warn!("removing thermal stage pins: {e}");
        }
        // SAFETY: dropped exactly once, before `_storage` (which fields drop after this).
        unsafe { ManuallyDrop::drop(&mut self.skel) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(t: &[i64], h: i64) -> ThermalStageOpts {
        ThermalStageOpts { pin_dir: None, thresholds_mc: t.to_vec(), hysteresis_mc: h }
    }

    #[test]
    fn config_is_validated_before_anything_is_loaded() {
        assert!(validate(&opts(&[], 0)).is_err());
        assert!(validate(&opts(&[70_000, 70_000], 0)).is_err());
        assert!(validate(&opts(&[70_000], -1)).is_err());
        assert!(validate(&opts(&[1; 9], 0)).is_err());
        let cfg = validate(&opts(&[70_000, 80_000, 90_000], 3_000)).unwrap();
        assert_eq!((cfg.nr_thresholds, cfg.thresholds_mc[2], cfg.thresholds_mc[3]), (3, 90_000, 0));
        assert_eq!(cfg.stale_ns, DEFAULT_STALE_MS * 1_000_000);
        assert_eq!((stale_ns(0), stale_ns(300), stale_ns(u64::MAX)), (0, 300_000_000, i64::MAX as u64));
    }

    #[test]
    fn stage_value_decodes_from_map_bytes() {
        let s = joule_stage { stage: 2, zone: 7, temp_mc: 81_500, source: JOULE_TEMP_MODEL, transitions: 3, ..Default::default() };
        let r = StageReading::from_map_value(as_bytes(&s)).unwrap();
        assert_eq!((r.stage, r.zone, r.temp_mc, r.source, r.transitions), (2, 7, 81_500, TempSource::Model, 3));
        assert!(StageReading::from_map_value(&[0u8; 3]).is_none());
    }

    /// Regression: an all-zero entry (a stage map no one has written yet) decoded as `sensor`.
    #[test]
    fn an_unwritten_stage_entry_has_no_source() {
        let r = StageReading::from_map_value(as_bytes(&joule_stage::default())).unwrap();
        assert_eq!((r.source, r.updated_ns), (TempSource::None, 0));
        assert_eq!(TempSource::from_raw(TempSource::Sensor.to_raw()), TempSource::Sensor);
        assert_eq!(TempSource::from_raw(99), TempSource::None);
    }
}
