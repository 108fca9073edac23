//! joule-bpf: joule's eBPF programs (run-queue latency, in-kernel thermal stage) and their loaders.
