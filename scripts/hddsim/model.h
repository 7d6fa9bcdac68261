/* Disk timing models of hddsim: given the time a request arrives, when does it complete?
 *
 * Pure computation, no I/O and no locking: the caller serialises calls (hddsim holds a mutex)
 * and passes CLOCK_MONOTONIC nanoseconds.  Units: bytes, nanoseconds, bytes per second.
 */
#ifndef HDDSIM_MODEL_H
#define HDDSIM_MODEL_H

#include <stdint.h>

struct hdd_params {
	double rpm;            /* spindle speed */
	double rate_bps;       /* media transfer rate (sequential), bytes/s */
	double iface_bps;      /* host interface rate for reads served from the drive buffer */
	double track_seek_ns;  /* shortest seek (adjacent track): settle time */
	double avg_seek_ns;    /* mean seek over uniformly random pairs of positions on the stroke */
	double full_seek_ns;   /* seek across the whole stroke */
	double knee;           /* fraction of the stroke where the sqrt curve turns linear */
	double overhead_ns;    /* controller overhead per request */
	uint64_t stroke_bytes; /* bytes the seek curve spans (the whole drive) */
	uint64_t offset_bytes; /* where the image starts on that drive */
	uint64_t cache_bytes;  /* read-ahead buffer: how far the drive reads ahead while idle */
};

struct hdd_model {
	struct hdd_params p;
	/* derived */
	double rev_ns;          /* one revolution */
	uint64_t track_bytes;   /* bytes per track: rate x revolution */
	uint64_t ntracks;
	double knee_seek_ns;    /* seek time at the knee, fitted so the mean is avg_seek_ns */
	/* state: the head was at head_pos at head_ns; if ra_valid it kept reading ahead from
	 * there (buffer holds [ra_lo, position now)), else it stays on that track. */
	uint64_t head_pos, ra_lo;
	uint64_t head_ns;
	int ra_valid;
	uint64_t ready_ns;      /* completion of the previous request (one head: FIFO) */
};

struct io_result {
	uint64_t start_ns;      /* when the drive began this request (after the previous one) */
	uint64_t done_ns;       /* when it completes */
	int seeked;             /* the head moved to another track */
	int cache_hit;          /* served entirely from the read-ahead buffer */
};

void hdd_default_params(struct hdd_params *p);
/* Returns 0 or -EINVAL if the parameters cannot describe a drive. */
int hdd_init(struct hdd_model *m, const struct hdd_params *p);
/* Seek time for a move of `frac` of the stroke (0..1); 0 for no move. */
double hdd_seek_ns(const struct hdd_model *m, double frac);
/* Mean of hdd_seek_ns over uniformly random pairs on [0, span] of the stroke (span 0..1). */
double hdd_mean_seek_ns(const struct hdd_model *m, double span);
void hdd_submit(struct hdd_model *m, uint64_t now_ns, uint64_t off, uint64_t len, int is_write,
		struct io_result *r);

#define SSD_MAX_CHANNELS 64
struct ssd_params {
	double latency_ns;     /* per request, overlapped across channels */
	double rate_bps;       /* shared transfer bandwidth */
	int channels;
};

struct ssd_model {
	struct ssd_params p;
	uint64_t chan_free[SSD_MAX_CHANNELS];
	uint64_t bus_free;
};

void ssd_default_params(struct ssd_params *p);
int ssd_init(struct ssd_model *m, const struct ssd_params *p);
void ssd_submit(struct ssd_model *m, uint64_t now_ns, uint64_t off, uint64_t len, int is_write,
		struct io_result *r);

#endif
