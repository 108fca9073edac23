/* The `thermal_stage` map, declared once for every BPF program that touches it: thermal.bpf.c
 * writes it, scx.bpf.c reads it through the pinned map's fd (libbpf's reuse_fd checks that type,
 * key, value size and max_entries match, so both must declare it exactly alike). BPF side only;
 * the value's layout is struct joule_stage in intf.h. */
#ifndef __JOULE_THERMAL_STAGE_MAP_H
#define __JOULE_THERMAL_STAGE_MAP_H

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct joule_stage);
} thermal_stage SEC(".maps");

#endif /* __JOULE_THERMAL_STAGE_MAP_H */
