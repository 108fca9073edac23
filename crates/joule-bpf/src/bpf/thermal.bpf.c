/* Mechanism 1's kernel half: turns temperatures into a thermal *stage* inside the kernel, so a
 * sched_ext scheduler can read it from the pinned `thermal_stage` map with no user-space hop.
 * Readings come from thermal zones (tp_btf/thermal_temperature) or, where the machine has none,
 * from user space's model through the `feed` syscall program; both use the same stage rule. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "intf.h"
#include "thermal_stage_map.h"

char LICENSE[] SEC("license") = "GPL";

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct joule_thermal_config);
} thermal_config SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, JOULE_MAX_ZONES);
	__type(key, __u32);
	__type(value, struct joule_zone_state);
} thermal_zones SEC(".maps");

/* thermal_tp_zones[tz->id] = 1: that zone's tracepoint readings count (with tp_filter). */
struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, JOULE_MAX_ZONES);
	__type(key, __u32);
	__type(value, __u8);
} thermal_tp_zones SEC(".maps");

/* Every change of the machine-wide stage (struct joule_stage_event); user space sleeps on it. */
struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4096);
} thermal_events SEC(".maps");

/* Stage rule: rise to n when temp >= threshold[n-1]; fall from n only when
 * temp < threshold[n-1] - hysteresis, possibly several stages at once. */
static __always_inline __u32 next_stage(__u32 cur, __s64 temp_mc, const struct joule_thermal_config *cfg)
{
	__u32 n = cfg->nr_thresholds, rise = 0, s, i;

	if (n > JOULE_MAX_STAGES)
		n = JOULE_MAX_STAGES;
	for (i = 0; i < JOULE_MAX_STAGES; i++)
		if (i < n && temp_mc >= cfg->thresholds_mc[i])
			rise = i + 1;
	if (rise > cur)
		return rise;
	s = cur < n ? cur : n;
	/* Walk down with constant indices (the verifier wants bounded array offsets): each
	 * stage we are in and are below the exit point of drops us to the one beneath. */
	for (i = JOULE_MAX_STAGES; i > 0; i--)
		if (i == s && temp_mc < cfg->thresholds_mc[i - 1] - cfg->hysteresis_mc)
			s = i - 1;
	return s;
}

/* No zone picked yet: best.zone is NO_ZONE and best.temp_mc the lowest value, so the first
 * fresh zone wins the comparison itself. A flag (`any`, false until the first pick) is a
 * constant in the callback's first call; Debian's 6.1 verifier, which checks the callback as
 * if it ran once, then dropped the comparison (measured: with the flag every zone overwrote
 * the pick, the last one visited winning; without it 6.1 picks the hottest, as 6.12+ do). */
#define NO_ZONE ((__u32)-1)

struct max_ctx {
	struct joule_stage best;
	__u64 now;
	__u64 stale_ns;
};

/* A zone counts while its last reading is at most stale_ns old. Signed: another CPU may have
 * stamped the zone after this one read the clock, which is fresh, not 2^64 ns old. */
static __always_inline bool is_fresh(const struct joule_zone_state *z, const struct max_ctx *c)
{
	return c->stale_ns == 0 || (__s64)(c->now - z->updated_ns) <= (__s64)c->stale_ns;
}

static long pick_max(struct bpf_map *map, __u32 *zone, struct joule_zone_state *z, struct max_ctx *c)
{
	if (!is_fresh(z, c))
		return 0;
	if (z->stage > c->best.stage || (z->stage == c->best.stage && z->temp_mc > c->best.temp_mc)) {
		c->best.stage = z->stage;
		c->best.zone = *zone;
		c->best.temp_mc = z->temp_mc;
		c->best.source = z->source;
	}
	return 0;
}

/* Records one reading and recomputes the machine-wide stage as the max over the zones that are
 * fresh (see stale_ns in intf.h). Two CPUs may race here; each recomputes from all zones, so
 * the next reading repairs a lost update. */
static __always_inline int update_stage(__u32 zone, __s64 temp_mc, __u32 source)
{
	struct joule_thermal_config *cfg;
	struct joule_zone_state *z, fresh = {};
	struct joule_stage *st;
	struct max_ctx c = {};
	__u32 key = 0, old;
	__u64 now = bpf_ktime_get_ns();

	cfg = bpf_map_lookup_elem(&thermal_config, &key);
	st = bpf_map_lookup_elem(&thermal_stage, &key);
	if (!cfg || !st || cfg->nr_thresholds == 0)
		return JOULE_FEED_NO_CONFIG;

	z = bpf_map_lookup_elem(&thermal_zones, &zone);
	if (!z) {
		/* Fails with -EEXIST when another CPU inserted it first; the lookup finds it then. */
		bpf_map_update_elem(&thermal_zones, &zone, &fresh, BPF_NOEXIST);
		z = bpf_map_lookup_elem(&thermal_zones, &zone);
		if (!z)
			return JOULE_FEED_ZONES_FULL;
	}
	z->stage = next_stage(z->stage, temp_mc, cfg);
	z->temp_mc = temp_mc;
	z->source = source;
	z->updated_ns = now;

	c.best.zone = NO_ZONE;
	c.best.temp_mc = -0x7fffffffffffffffLL - 1;
	c.now = now;
	c.stale_ns = cfg->stale_ns;
	bpf_for_each_map_elem(&thermal_zones, pick_max, &c, 0);
	if (c.best.zone == NO_ZONE) /* cannot happen (this zone was just stamped), but never publish nothing */
		return JOULE_FEED_OK;
	old = st->stage;
	st->stage = c.best.stage;
	st->zone = c.best.zone;
	st->temp_mc = c.best.temp_mc;
	st->source = c.best.source;
	st->updated_ns = now;
	if (c.best.stage != old) {
		struct joule_stage_event ev = {
			.at_ns = now,
			.temp_mc = c.best.temp_mc,
			.stage = c.best.stage,
			.old_stage = old,
			.zone = c.best.zone,
			.source = c.best.source,
		};

		__sync_fetch_and_add(&st->transitions, 1);
		/* Best effort: a full buffer (nobody reading) loses the event, not the stage. */
		bpf_ringbuf_output(&thermal_events, &ev, sizeof(ev), 0);
	}
	return JOULE_FEED_OK;
}

SEC("tp_btf/thermal_temperature")
int BPF_PROG(joule_thermal_temperature, struct thermal_zone_device *tz)
{
	__u32 id = BPF_CORE_READ(tz, id), key = 0;
	struct joule_thermal_config *cfg = bpf_map_lookup_elem(&thermal_config, &key);

	if (cfg && cfg->tp_filter) {
		__u8 *on = bpf_map_lookup_elem(&thermal_tp_zones, &id);

		if (!on || !*on)
			return 0;
	}
	update_stage(id, BPF_CORE_READ(tz, temperature), JOULE_TEMP_SENSOR);
	return 0;
}

SEC("syscall")
int joule_thermal_feed(struct joule_feed_ctx *ctx)
{
	return update_stage(ctx->zone, ctx->temp_mc, ctx->source);
}
