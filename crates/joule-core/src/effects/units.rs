//! systemd units through systemd's own D-Bus API (`org.freedesktop.systemd1`): read a unit's
//! resource property, set it as `systemctl set-property --runtime` does (`SetUnitProperties`
//! with runtime = true: nothing persists past a reboot). On a host where
//! systemd owns the cgroup tree this is the one way joule changes another unit (systemd's
//! rule: one writer per subtree, docs/systemd.md). D-Bus through zbus, never by shelling out
//! to systemctl. A nap freezes a unit with `FreezeUnit`/`ThawUnit`, so `systemctl show -p
//! FreezerState` agrees, and [`watch_jobs`] tells the nap when an operator queues a job on a
//! napped unit (systemd refuses jobs on a frozen unit, docs/systemd.md). A napped slice's
//! services get [`Gate`]s: transient units whose jobs systemd runs before a reload or stop
//! of the service, and which thaw the slice first, so that job works.

use super::{not_found, FakeEffects, RealEffects};
use serde::{Deserialize, Serialize};
use std::io;
use std::path::PathBuf;

/// A unit property's value, in the D-Bus type systemd gives it: `t` (u64; `u64::MAX` is
/// systemd's "not set", which SetUnitProperties takes back as a reset) or `ay` (`AllowedCPUs`'
/// CPU bitmask, CPU 0 in the lowest bit of byte 0; empty: not set).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum UnitValue {
    U64(u64),
    Bytes(Vec<u8>),
}

impl UnitValue {
    /// Whether two values mean the same: systemd hands a CPU mask back in whole 64-bit words
    /// (`AllowedCPUs` set as `02` reads `02 00 00 00 00 00 00 00`), so trailing zero bytes
    /// do not count.
    pub fn same(&self, other: &UnitValue) -> bool {
        match (self, other) {
            (UnitValue::Bytes(a), UnitValue::Bytes(b)) => trim(a) == trim(b),
            (a, b) => a == b,
        }
    }
}

fn trim(b: &[u8]) -> &[u8] {
    let end = b.iter().rposition(|x| *x != 0).map_or(0, |i| i + 1);
    &b[..end]
}

impl std::fmt::Display for UnitValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UnitValue::U64(u64::MAX) => write!(f, "infinity"),
            UnitValue::U64(v) => write!(f, "{v}"),
            UnitValue::Bytes(b) => write!(f, "{}", b.iter().map(|x| format!("{x:02x}")).collect::<String>()),
        }
    }
}

/// The resource properties joule sets, with their D-Bus types: what `CPUQuota=`,
/// `CPUQuotaPeriodSec=`, `CPUWeight=` and `AllowedCPUs=` set.
pub const UNIT_PROPERTIES: &[&str] = &["CPUQuotaPerSecUSec", "CPUQuotaPeriodUSec", "CPUWeight", "AllowedCPUs"];

/// Whether `name` is a unit joule may act on: a service, slice or scope, named with the
/// characters systemd allows (no path separators, nothing to escape).
pub fn valid_unit_name(name: &str) -> bool {
    let Some((stem, kind)) = name.rsplit_once('.') else { return false };
    !stem.is_empty()
        && name.len() <= 255
        && ["service", "slice", "scope"].contains(&kind)
        && stem.chars().all(|c| c.is_ascii_alphanumeric() || ":-_.\\@".contains(c))
}

/// The names of the gate units joule starts: `joule-gate-<kind>-<service>.service`.
pub const GATE_PREFIX: &str = "joule-gate-";

/// Which of a service's jobs a gate goes before.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateKind {
    /// `reload` (and `reload-or-restart`): the gate is `Before=` the service and gets a reload
    /// job through `ReloadPropagatedFrom=`; its `ExecReload=` thaws.
    Reload,
    /// `stop`, `restart`, `try-restart`: the gate is `After=` the service (stops run in
    /// reverse order) and `PartOf=` it; its `ExecStop=` thaws.
    Stop,
}

/// A transient oneshot unit (`RemainAfterExit=yes`) that systemd 257 runs before a job on
/// `service`, whose command (`exe nap gate SLICE SERVICE`) thaws the napped `slice` and waits
/// until the service runs: systemd refuses any job on a frozen unit, and refuses to thaw a
/// unit with a job queued, but thaws a slice's services with the slice (docs/systemd.md).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gate {
    pub kind: GateKind,
    pub service: String,
    pub slice: String,
    /// The joule binary the gate runs (the agent's own).
    pub exe: PathBuf,
}

impl Gate {
    pub fn name(&self) -> String {
        let kind = match self.kind {
            GateKind::Reload => "reload",
            GateKind::Stop => "stop",
        };
        // `@` would make the gate a template's instance: escaped as systemd-escape does.
        format!("{GATE_PREFIX}{kind}-{}.service", self.service.trim_end_matches(".service").replace('@', "\\x40"))
    }

    /// The thawing command, as `ExecReload=`/`ExecStop=` runs it.
    pub fn command(&self) -> Vec<String> {
        vec![self.exe.display().to_string(), "nap".into(), "gate".into(), self.slice.clone(), self.service.clone()]
    }

    fn check(&self) -> io::Result<()> {
        check_name(&self.service)?;
        check_name(&self.slice)?;
        check_name(&self.name())?;
        if !self.exe.is_absolute() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("a gate runs an absolute path, not {}", self.exe.display())));
        }
        Ok(())
    }
}

pub trait Units {
    /// The current value of `property` (one of [`UNIT_PROPERTIES`]) of `unit`.
    /// `ErrorKind::NotFound` when there is no such unit.
    fn unit_property(&self, unit: &str, property: &str) -> io::Result<UnitValue>;
    /// Sets `property` of `unit` for this boot (SetUnitProperties, runtime = true).
    fn set_unit_property(&self, unit: &str, property: &str, value: &UnitValue) -> io::Result<()>;
    /// The unit's `FreezerState`: `running`, `freezing`, `frozen`, `thawing` (systemd 257 adds
    /// `frozen-by-parent`, ...). `ErrorKind::NotFound` when there is no such unit.
    fn unit_freezer_state(&self, unit: &str) -> io::Result<String>;
    /// Freezes every process of the unit (`FreezeUnit`); returns once systemd says frozen.
    fn freeze_unit(&self, unit: &str) -> io::Result<()>;
    /// Thaws the unit (`ThawUnit`); a unit that is not frozen is left as it is.
    fn thaw_unit(&self, unit: &str) -> io::Result<()>;
    /// Starts `gate` as a transient unit (`StartTransientUnit`); one that exists is left.
    fn start_gate(&self, gate: &Gate) -> io::Result<()>;
    /// Stops every gate unit systemd has loaded (`joule-gate-*`); returns how many.
    fn stop_gates(&self) -> io::Result<usize>;
}

fn check_name(unit: &str) -> io::Result<()> {
    if valid_unit_name(unit) {
        Ok(())
    } else {
        Err(io::Error::new(io::ErrorKind::InvalidInput, format!("{unit:?} is not a service, slice or scope name")))
    }
}

impl Units for RealEffects {
    fn unit_property(&self, unit: &str, property: &str) -> io::Result<UnitValue> {
        check_name(unit)?;
        dbus::property(unit, property)
    }
    fn set_unit_property(&self, unit: &str, property: &str, value: &UnitValue) -> io::Result<()> {
        check_name(unit)?;
        dbus::set_property(unit, property, value)
    }
    fn unit_freezer_state(&self, unit: &str) -> io::Result<String> {
        check_name(unit)?;
        dbus::freezer_state(unit)
    }
    fn freeze_unit(&self, unit: &str) -> io::Result<()> {
        check_name(unit)?;
        dbus::manager_call(unit, "FreezeUnit")
    }
    fn thaw_unit(&self, unit: &str) -> io::Result<()> {
        check_name(unit)?;
        dbus::manager_call(unit, "ThawUnit")
    }
    fn start_gate(&self, gate: &Gate) -> io::Result<()> {
        gate.check()?;
        dbus::start_gate(gate)
    }
    fn stop_gates(&self) -> io::Result<usize> {
        dbus::stop_gates()
    }
}

/// A job's life as systemd's manager signals it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JobEvent {
    /// `JobNew`: queued.
    New,
    /// `JobRemoved`: finished, whatever its result.
    Removed,
}

/// Calls `on_job(event, job id, unit)` for every job systemd queues and finishes (its `JobNew`
/// and `JobRemoved` signals), from a thread of its own, until `on_job` returns false;
/// `on_job` picks the units it cares about. Returns once subscribed, so a job queued after it
/// returns is seen. The thread ends with the process otherwise.
pub fn watch_jobs(mut on_job: impl FnMut(JobEvent, u32, &str) -> bool + Send + 'static) -> io::Result<std::thread::JoinHandle<()>> {
    let signals = dbus::job_signals()?;
    std::thread::Builder::new().name("joule-unit-jobs".into()).spawn(move || {
        for (event, id, unit) in signals {
            if !on_job(event, id, &unit) {
                return;
            }
        }
    })
}

/// The D-Bus side: one system-bus connection per process, made on first use.
mod dbus {
    use super::{Gate, GateKind, JobEvent, UnitValue, GATE_PREFIX};
    use std::io;
    use std::sync::OnceLock;
    use zbus::blocking::{Connection, Proxy};
    use zbus::zvariant::{OwnedObjectPath, OwnedValue, Value};

    const DEST: &str = "org.freedesktop.systemd1";
    const PATH: &str = "/org/freedesktop/systemd1";
    const MANAGER: &str = "org.freedesktop.systemd1.Manager";

    fn conn() -> io::Result<&'static Connection> {
        static CONN: OnceLock<Connection> = OnceLock::new();
        if let Some(c) = CONN.get() {
            return Ok(c);
        }
        let c = Connection::system().map_err(|e| io::Error::new(io::ErrorKind::NotConnected, format!("the system bus: {e}")))?;
        Ok(CONN.get_or_init(|| c))
    }

    /// systemd's errors as io errors: a unit that does not exist is NotFound.
    fn err(what: &str, e: zbus::Error) -> io::Error {
        let kind = match &e {
            zbus::Error::MethodError(name, _, _) if name.as_str().ends_with("NoSuchUnit") => io::ErrorKind::NotFound,
            zbus::Error::MethodError(name, _, _) if name.as_str().ends_with("AccessDenied") => io::ErrorKind::PermissionDenied,
            _ => io::ErrorKind::Other,
        };
        io::Error::new(kind, format!("{what}: {e}"))
    }

    fn manager() -> io::Result<Proxy<'static>> {
        Proxy::new(conn()?, DEST, PATH, MANAGER).map_err(|e| err("systemd's manager", e))
    }

    /// The unit type's interface (`org.freedesktop.systemd1.Service`, `.Slice`, `.Scope`),
    /// where its resource properties live.
    fn interface(unit: &str) -> &'static str {
        match unit.rsplit_once('.').map(|(_, k)| k) {
            Some("slice") => "org.freedesktop.systemd1.Slice",
            Some("scope") => "org.freedesktop.systemd1.Scope",
            _ => "org.freedesktop.systemd1.Service",
        }
    }

    pub fn property(unit: &str, property: &str) -> io::Result<UnitValue> {
        let path: OwnedObjectPath = manager()?.call("GetUnit", &(unit,)).map_err(|e| err(&format!("GetUnit {unit}"), e))?;
        let p = Proxy::new(conn()?, DEST, path, interface(unit)).map_err(|e| err(unit, e))?;
        let v: OwnedValue = p.get_property(property).map_err(|e| err(&format!("{unit} {property}"), e))?;
        if let Ok(n) = u64::try_from(&v) {
            return Ok(UnitValue::U64(n));
        }
        Vec::<u8>::try_from(v).map(UnitValue::Bytes).map_err(|e| io::Error::other(format!("{unit} {property}: neither t nor ay: {e}")))
    }

    pub fn freezer_state(unit: &str) -> io::Result<String> {
        let path: OwnedObjectPath = manager()?.call("GetUnit", &(unit,)).map_err(|e| err(&format!("GetUnit {unit}"), e))?;
        let p = Proxy::new(conn()?, DEST, path, "org.freedesktop.systemd1.Unit").map_err(|e| err(unit, e))?;
        p.get_property::<String>("FreezerState").map_err(|e| err(&format!("{unit} FreezerState"), e))
    }

    /// `FreezeUnit`/`ThawUnit`: systemd replies once the unit reached the state.
    pub fn manager_call(unit: &str, method: &str) -> io::Result<()> {
        manager()?.call::<_, _, ()>(method, &(unit,)).map_err(|e| err(&format!("{method} {unit}"), e))
    }

    /// Each job systemd queues or finishes from now on (`JobNew`, `JobRemoved`, after
    /// `Subscribe`): the event, the job's id and its unit.
    pub fn job_signals() -> io::Result<impl Iterator<Item = (JobEvent, u32, String)>> {
        let m = manager()?;
        let all = m.receive_all_signals().map_err(|e| err("the manager's signals", e))?;
        m.call::<_, _, ()>("Subscribe", &()).map_err(|e| err("Subscribe", e))?;
        Ok(all.filter_map(|msg| {
            let header = msg.header();
            let event = match header.member().map(|m| m.as_str()) {
                Some("JobNew") => JobEvent::New,
                Some("JobRemoved") => JobEvent::Removed,
                _ => return None,
            };
            let body = msg.body();
            let (id, unit) = match event {
                JobEvent::New => body.deserialize::<(u32, OwnedObjectPath, String)>().ok().map(|(id, _, u)| (id, u))?,
                JobEvent::Removed => body.deserialize::<(u32, OwnedObjectPath, String, String)>().ok().map(|(id, _, u, _)| (id, u))?,
            };
            Some((event, id, unit))
        }))
    }

    /// A gate as a transient unit; `UnitExists` (it runs already) is fine.
    pub fn start_gate(gate: &Gate) -> io::Result<()> {
        let exe = gate.exe.display().to_string();
        let exec = |argv: Vec<String>| Value::from(vec![(exe.clone(), argv, false)]);
        let service = vec![gate.service.clone()];
        let mut props: Vec<(&str, Value)> = vec![
            ("Description", Value::from(format!("joule: thaws {} before a job on {} (nap)", gate.slice, gate.service))),
            ("Type", Value::from("oneshot")),
            ("RemainAfterExit", Value::from(true)),
            ("CollectMode", Value::from("inactive-or-failed")),
            ("ExecStart", exec(vec![exe.clone(), "--version".into()])),
        ];
        match gate.kind {
            GateKind::Reload => {
                props.push(("ExecReload", exec(gate.command())));
                props.push(("Before", Value::from(service.clone())));
                props.push(("ReloadPropagatedFrom", Value::from(service)));
            }
            GateKind::Stop => {
                props.push(("ExecStop", exec(gate.command())));
                props.push(("After", Value::from(service.clone())));
                props.push(("PartOf", Value::from(service)));
            }
        }
        let aux: Vec<(&str, Vec<(&str, Value)>)> = Vec::new();
        match manager()?.call::<_, _, OwnedObjectPath>("StartTransientUnit", &(gate.name(), "fail", props, aux)) {
            Ok(_) => Ok(()),
            Err(zbus::Error::MethodError(name, _, _)) if name.as_str().ends_with("UnitExists") => Ok(()),
            Err(e) => Err(err(&format!("StartTransientUnit {}", gate.name()), e)),
        }
    }

    /// Stops each loaded `joule-gate-*` unit (a stop gate's `ExecStop=` thaws its slice).
    pub fn stop_gates() -> io::Result<usize> {
        type Listed = (String, String, String, String, String, String, OwnedObjectPath, u32, String, OwnedObjectPath);
        let m = manager()?;
        let pattern = format!("{GATE_PREFIX}*");
        let units: Vec<Listed> = m.call("ListUnitsByPatterns", &(Vec::<&str>::new(), vec![pattern.as_str()])).map_err(|e| err("ListUnitsByPatterns", e))?;
        let mut n = 0;
        for (name, ..) in units {
            match m.call::<_, _, OwnedObjectPath>("StopUnit", &(name.as_str(), "replace")) {
                Ok(_) => n += 1,
                Err(e) => return Err(err(&format!("StopUnit {name}"), e)),
            }
        }
        Ok(n)
    }

    pub fn set_property(unit: &str, property: &str, value: &UnitValue) -> io::Result<()> {
        let v = match value {
            UnitValue::U64(n) => Value::from(*n),
            UnitValue::Bytes(b) => Value::from(b.clone()),
        };
        let props = vec![(property, v)];
        manager()?.call::<_, _, ()>("SetUnitProperties", &(unit, true, props)).map_err(|e| err(&format!("SetUnitProperties {unit} {property}={value}"), e))
    }
}

impl Units for FakeEffects {
    fn unit_property(&self, unit: &str, property: &str) -> io::Result<UnitValue> {
        check_name(unit)?;
        self.units.lock().unwrap().get(&(unit.to_string(), property.to_string())).cloned().ok_or_else(|| not_found(format!("unit {unit} ({property})")))
    }
    fn set_unit_property(&self, unit: &str, property: &str, value: &UnitValue) -> io::Result<()> {
        check_name(unit)?;
        let key = (unit.to_string(), property.to_string());
        if !self.units.lock().unwrap().contains_key(&key) {
            return Err(not_found(format!("unit {unit} ({property})")));
        }
        // As systemd, which keeps a CPU mask in whole 64-bit words.
        let stored = match value {
            UnitValue::Bytes(b) => UnitValue::Bytes([b.as_slice(), &vec![0; (8 - b.len() % 8) % 8]].concat()),
            v => v.clone(),
        };
        self.act(format!("set-property {unit} {property}={value}"), || {
            self.units.lock().unwrap().insert(key, stored);
            Ok(())
        })
    }
    fn unit_freezer_state(&self, unit: &str) -> io::Result<String> {
        check_name(unit)?;
        let units = self.units.lock().unwrap();
        match units.get(&(unit.to_string(), FREEZER_STATE.to_string())) {
            Some(UnitValue::U64(1)) => Ok("frozen".into()),
            Some(_) => Ok("running".into()),
            None => Err(not_found(format!("unit {unit}"))),
        }
    }
    fn freeze_unit(&self, unit: &str) -> io::Result<()> {
        self.set_frozen(unit, true)
    }
    fn thaw_unit(&self, unit: &str) -> io::Result<()> {
        self.set_frozen(unit, false)
    }
    fn start_gate(&self, gate: &Gate) -> io::Result<()> {
        gate.check()?;
        let key = (gate.name(), GATE.to_string());
        if self.units.lock().unwrap().contains_key(&key) {
            return Ok(());
        }
        self.act(format!("start-gate {} {}", gate.name(), gate.command().join(" ")), || {
            self.units.lock().unwrap().insert(key, UnitValue::Bytes(Vec::new()));
            Ok(())
        })
    }
    fn stop_gates(&self) -> io::Result<usize> {
        let gates: Vec<(String, String)> = self.units.lock().unwrap().keys().filter(|(u, p)| p == GATE && u.starts_with(GATE_PREFIX)).cloned().collect();
        for key in &gates {
            self.act(format!("stop-unit {}", key.0), || {
                self.units.lock().unwrap().remove(key);
                Ok(())
            })?;
        }
        Ok(gates.len())
    }
}

/// The fake's key for a gate unit it started.
const GATE: &str = "Gate";

/// The fake's key for a unit's freezer (1: frozen).
const FREEZER_STATE: &str = "FreezerState";

impl FakeEffects {
    /// A unit with its resource properties at systemd's defaults (nothing set), running.
    pub fn with_unit(self, unit: &str) -> Self {
        let mut units = self.units.lock().unwrap();
        for p in UNIT_PROPERTIES {
            let v = if *p == "AllowedCPUs" { UnitValue::Bytes(Vec::new()) } else { UnitValue::U64(u64::MAX) };
            units.insert((unit.to_string(), p.to_string()), v);
        }
        units.insert((unit.to_string(), FREEZER_STATE.to_string()), UnitValue::U64(0));
        drop(units);
        self
    }

    fn set_frozen(&self, unit: &str, frozen: bool) -> io::Result<()> {
        check_name(unit)?;
        let key = (unit.to_string(), FREEZER_STATE.to_string());
        if !self.units.lock().unwrap().contains_key(&key) {
            return Err(not_found(format!("unit {unit}")));
        }
        self.act(format!("{} {unit}", if frozen { "freeze-unit" } else { "thaw-unit" }), || {
            self.units.lock().unwrap().insert(key, UnitValue::U64(u64::from(frozen)));
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn masks_are_the_same_whatever_their_trailing_zero_bytes() {
        assert!(UnitValue::Bytes(vec![2]).same(&UnitValue::Bytes(vec![2, 0, 0, 0, 0, 0, 0, 0])));
        assert!(UnitValue::Bytes(vec![]).same(&UnitValue::Bytes(vec![0; 8])));
        assert!(!UnitValue::Bytes(vec![2]).same(&UnitValue::Bytes(vec![3])));
        assert!(!UnitValue::U64(1).same(&UnitValue::Bytes(vec![1])));
    }

    #[test]
    fn unit_names_are_services_slices_or_scopes_without_paths() {
        for ok in ["nginx.service", "batch.slice", "session-3.scope", "getty@tty1.service", "system-foo\\x2dbar.slice"] {
            assert!(valid_unit_name(ok), "{ok}");
        }
        for bad in ["nginx", ".service", "a/b.service", "x.socket", "x.service\n", "../x.slice", "x y.service"] {
            assert!(!valid_unit_name(bad), "{bad:?}");
        }
    }

    #[test]
    fn a_gate_is_named_after_its_service_and_runs_an_absolute_path() {
        let g = |service: &str, exe: &str| Gate { kind: GateKind::Stop, service: service.into(), slice: "web.slice".into(), exe: exe.into() };
        assert_eq!(g("nginx.service", "/usr/bin/joule").name(), "joule-gate-stop-nginx.service");
        let templated = g("getty@tty1.service", "/usr/bin/joule");
        assert_eq!(templated.name(), "joule-gate-stop-getty\\x40tty1.service");
        assert_ne!(templated.name(), g("getty_tty1.service", "/usr/bin/joule").name());
        assert!(templated.check().is_ok());
        assert_eq!(g("nginx.service", "joule").check().unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(g("../x.service", "/usr/bin/joule").check().unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(g("nginx.service", "/usr/bin/joule").command(), ["/usr/bin/joule", "nap", "gate", "web.slice", "nginx.service"]);
    }

    #[test]
    fn the_fake_sets_known_units_only_and_logs_each_change() {
        let fx = FakeEffects::default().with_unit("nginx.service");
        assert_eq!(fx.unit_property("nginx.service", "CPUWeight").unwrap(), UnitValue::U64(u64::MAX));
        fx.set_unit_property("nginx.service", "CPUQuotaPerSecUSec", &UnitValue::U64(300_000)).unwrap();
        fx.set_unit_property("nginx.service", "AllowedCPUs", &UnitValue::Bytes(vec![0b10])).unwrap();
        assert_eq!(fx.unit_property("nginx.service", "CPUQuotaPerSecUSec").unwrap(), UnitValue::U64(300_000));
        assert_eq!(fx.set_unit_property("gone.service", "CPUWeight", &UnitValue::U64(5)).unwrap_err().kind(), io::ErrorKind::NotFound);
        assert_eq!(fx.set_unit_property("a/b.service", "CPUWeight", &UnitValue::U64(5)).unwrap_err().kind(), io::ErrorKind::InvalidInput);
        assert_eq!(fx.calls(), vec!["set-property nginx.service CPUQuotaPerSecUSec=300000", "set-property nginx.service AllowedCPUs=02"]);
    }
}
