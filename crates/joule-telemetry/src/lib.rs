//! joule-telemetry: sources that read the machine (procfs, sysfs, cgroupfs) and the models that stand in for missing sensors; they fill a Snapshot and never decide.
