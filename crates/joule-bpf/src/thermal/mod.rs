//! thermal.bpf.c's loader, mechanism 1's kernel half: thresholds and hysteresis go into the
//! kernel, temperatures (zones through the tracepoint, the model through `feed`) come out as a
//! stage in the pinned `thermal_stage` map, which a sched_ext scheduler reads directly.
//! `opts.rs` is what it is told before load, `stats.rs` what it reports.

mod opts;
mod stats;

pub use opts::{ThermalStageOpts, DEFAULT_STALE_MS};
pub use stats::{StageReading, TempSource, ZoneReading};

use crate::error::{bpf, BpfError};
use crate::intf::{joule_feed_ctx, joule_thermal_config, JOULE_FEED_NO_CONFIG, JOULE_FEED_OK, JOULE_FEED_ZONES_FULL};
use crate::pins::{PinEffects, PinSet, RealPinEffects, UndoRecorder};
use crate::pod::as_bytes;
use crate::storage::ObjectStorage;
use joule_core::journal::Journal;
use libbpf_rs::skel::{OpenSkel, SkelBuilder};
use libbpf_rs::{Link, MapCore, MapFlags, MapHandle, ProgramInput};
use skel::{ThermalSkel, ThermalSkelBuilder};
use std::mem::ManuallyDrop;
use std::os::fd::AsFd;
use std::path::Path;

#[allow(clippy::all, dead_code, unused_imports)]
mod skel {
    include!(concat!(env!("OUT_DIR"), "/thermal.skel.rs"));
}

/// Names of the pinned maps inside the pin directory (the scheduler's side of the contract).
pub const PIN_STAGE: &str = "thermal_stage";
pub const PIN_ZONES: &str = "thermal_zones";
pub const PIN_CONFIG: &str = "thermal_config";
/// Zone id the thermal model feeds under (`JOULE_MODEL_ZONE` in intf.h).
pub const MODEL_ZONE: u32 = crate::intf::JOULE_MODEL_ZONE;
/// First zone id of hwmon sensors fed from user space (`JOULE_HWMON_ZONE_BASE` in intf.h).
pub const HWMON_ZONE_BASE: u32 = crate::intf::JOULE_HWMON_ZONE_BASE;

/// The loaded thermal stage programs and their pins. Dropping it detaches the tracepoint and
/// removes the pins.
pub struct ThermalStage {
    skel: ManuallyDrop<ThermalSkel<'static>>,
    tp_link: Option<Link>,
    tp_error: Option<String>,
    pins: Option<PinSet>,
    pin_fx: Box<dyn PinEffects + Send>,
    /// What `thermal_config` holds.
    cfg: joule_thermal_config,
    _storage: ObjectStorage,
}

impl ThermalStage {
    /// Loads the programs, writes the config, pins the maps on bpffs (recording each pin in
    /// `journal` first) and attaches the tracepoint. A tracepoint that cannot attach is not an
    /// error: `feed` still works; see `attached_to_tracepoint`.
    pub fn load(opts: ThermalStageOpts, journal: Option<&mut Journal>) -> Result<ThermalStage, BpfError> {
        Self::load_with(opts, journal.map(|j| j as &mut dyn UndoRecorder), Box::new(RealPinEffects))
    }

    /// [`Self::load`] with any [`UndoRecorder`] in place of the journal, and pins made through
    /// `pin_fx`.
    pub fn load_with(
        opts: ThermalStageOpts,
        journal: Option<&mut dyn UndoRecorder>,
        pin_fx: Box<dyn PinEffects + Send>,
    ) -> Result<ThermalStage, BpfError> {
        let cfg = opts::validate(&opts)?;
        let mut storage = ObjectStorage::new();
        // SAFETY: `skel` is dropped before `storage` (see Drop), and `get` is called once.
        let open_object = unsafe { storage.get() };
        let open = bpf("opening thermal.bpf.o", ThermalSkelBuilder::default().open(open_object))?;
        let skel = bpf("loading the thermal stage programs into the kernel", open.load())?;
        let mut me = ThermalStage {
            skel: ManuallyDrop::new(skel),
            tp_link: None,
            tp_error: None,
            pins: opts.pin_dir.map(PinSet::new),
            pin_fx,
            cfg,
            _storage: storage,
        };
        me.write_config()?;
        if let Some(pins) = me.pins.as_mut() {
            let maps = &me.skel.maps;
            let objects = [
                (PIN_STAGE, maps.thermal_stage.as_fd()),
                (PIN_ZONES, maps.thermal_zones.as_fd()),
                (PIN_CONFIG, maps.thermal_config.as_fd()),
            ];
            // On error `me` drops here and removes whatever it pinned already.
            pins.pin_all(&*me.pin_fx, &objects, journal)?;
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
        self.cfg.stale_ns = opts::stale_ns(stale_ms);
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
        stats::read_stage(&*self.skel.maps.thermal_stage).expect("thermal_stage is an array map with one entry of our layout")
    }

    /// Every zone seen so far, by zone id.
    pub fn zones(&self) -> Vec<ZoneReading> {
        stats::read_zones(&*self.skel.maps.thermal_zones)
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
        self.pins.as_ref().map(PinSet::dir)
    }

    /// Reads the stage from a pinned map, as any other process (a scheduler loader, `joule
    /// status`) would.
    pub fn read_pinned(pin_dir: &Path) -> Result<StageReading, BpfError> {
        let path = pin_dir.join(PIN_STAGE);
        let map = bpf(format!("opening {}", path.display()), MapHandle::from_pinned_path(&path))?;
        stats::read_stage(&map)
    }

    /// Removes the pins now, then detaches (Drop does the same, ignoring errors).
    pub fn unpin(mut self) -> Result<(), BpfError> {
        self.remove_pins()
    }

    fn remove_pins(&mut self) -> Result<(), BpfError> {
        match self.pins.as_mut() {
            Some(pins) => pins.remove(&*self.pin_fx),
            None => Ok(()),
        }
    }
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
