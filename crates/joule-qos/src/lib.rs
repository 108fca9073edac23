//! joule-qos: CPU guarantees for task classes with cgroups (RT and CFS bandwidth, weights, cpusets) behind admission control.
