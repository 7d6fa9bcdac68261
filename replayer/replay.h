/* The replay loop: open and check files, fetch the plan through an engine, release the app
 * when the pre-buffer is resident, back off under memory pressure. */
#ifndef REPLAY_H
#define REPLAY_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "appwatch.h"
#include "clock.h"
#include "engine.h"
#include "fsmeta.h"
#include "wsr_format.h"

enum replay_mode { MODE_SEGMENTED, MODE_REORDER, MODE_INTERLEAVE };

struct replay_opts {
	enum replay_mode mode;
	int notify_fd;           /* gets "ready\n" when the app may start; -1: none */
	uint64_t reserve_bytes;  /* memory pressure: keep this much MemAvailable untouched */
	double psi_limit;        /* memory pressure: PSI some avg10 (%) at which to stop */
	bool wait_resident;      /* verify residency of the pre-buffer before releasing */
	bool measure_at_open;    /* the exit check will judge the launch: see outside_at_open */
	struct appwatch *watch;  /* told the release and each segment as it starts; NULL: none */
};

#define MAX_DECISIONS 32

struct decision {
	uint64_t t_ns;
	uint32_t at_range;        /* plan position */
	int64_t mem_available_kb;
	double psi_some_avg10;
	const char *action;       /* ok | shrink | skip */
	uint64_t budget_bytes;    /* bytes still allowed after the decision */
};

struct seg_stat {
	uint32_t idx, ranges, ranges_fetched;
	uint32_t meta_entries;   /* of the metadata step, warmed just before this segment's data */
	uint64_t bytes, bytes_fetched, t_start_ns, t_end_ns, t_meta_ns;
};

struct replay_stats {
	uint64_t start_mono_ns, first_io_mono_ns, release_mono_ns, end_mono_ns;
	bool released, first_io_done;
	uint64_t prebuffer_bytes, prebuffer_wait_ns;  /* wait: async reads still in flight at release */
	uint32_t ranges_total, ranges_fetched, ranges_resident, ranges_skipped_file;
	uint32_t ranges_skipped_pressure, device_ranges;
	uint64_t bytes_scheduled, bytes_fetched, bytes_resident, bytes_skipped_pressure;
	uint32_t files_total, files_opened, files_changed, files_missing, files_denied, files_other;
	uint32_t noatime_fallbacks;
	struct fsmeta_stats meta;   /* the metadata step (WSR_FILE_WARM_META files) */
	uint32_t ndecisions;
	struct decision decisions[MAX_DECISIONS];
	uint32_t nsegs;
	struct seg_stat *segs;
	/* per file: bytes cached outside its ranges when the replay first opened it, before
	 * fetching any of it and while the app was still held (with measure_at_open), or
	 * UNMEASURED; the exit check does not count them as misses */
	uint64_t *outside_at_open;
};

/* Runs the whole replay. Returns 0, or -errno for a setup failure (the app is still released). */
int replay_run(const struct wsr_schedule *s, struct engine *e, const struct replay_opts *o,
	       struct replay_stats *st);

/* How many segments the replay times in this mode (one: all but segmented). */
uint32_t replay_nsegs(const struct wsr_schedule *s, enum replay_mode mode);

/* Builds the fetch order for a mode into order[] (s->nranges entries); returns how many plan
 * entries come before the release point. Exposed for the C tests. */
uint32_t replay_plan(const struct wsr_schedule *s, enum replay_mode mode, uint32_t *order);

#endif
