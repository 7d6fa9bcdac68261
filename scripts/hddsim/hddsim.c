/* hddsim: a FUSE file system whose file `disk` is a backing image with a disk's timing.
 *
 *   hddsim --profile hdd7200 --image /dev/shm/x.img [model options] MOUNTPOINT
 *
 * Attach <mnt>/disk with `losetup --direct-io=on` and every block request of the loop device
 * arrives here: the model (under one mutex) says when it completes, the thread copies the data
 * from/to the image (on tmpfs) and sleeps until that time.  <mnt>/stats reports counters as
 * `key value` lines; writing "reset" to it zeroes them.
 */
#define FUSE_USE_VERSION 35
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "model.h"

enum profile { PROFILE_HDD, PROFILE_SSD };

struct stats {
	uint64_t requests, reads, writes, seeks, cache_hits, bytes_read, bytes_written, busy_ns;
	uint64_t busy_end;      /* end of the busy interval counted so far */
};

static struct {
	enum profile profile;
	const char *image;
	int fd;
	uint64_t size;
	pthread_mutex_t lock;   /* guards the model and the stats */
	struct hdd_model hdd;
	struct ssd_model ssd;
	struct stats st;
} g = { .fd = -1, .lock = PTHREAD_MUTEX_INITIALIZER };

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static void sleep_until(uint64_t t)
{
	struct timespec ts = { .tv_sec = (time_t)(t / 1000000000u), .tv_nsec = (long)(t % 1000000000u) };

	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
		;
}

/* Run the model for one request and count it; returns its completion time. */
static uint64_t model_request(uint64_t off, uint64_t len, int is_write)
{
	struct io_result r;

	pthread_mutex_lock(&g.lock);
	if (g.profile == PROFILE_HDD)
		hdd_submit(&g.hdd, now_ns(), off, len, is_write, &r);
	else
		ssd_submit(&g.ssd, now_ns(), off, len, is_write, &r);
	g.st.requests++;
	if (is_write) {
		g.st.writes++;
		g.st.bytes_written += len;
	} else {
		g.st.reads++;
		g.st.bytes_read += len;
	}
	g.st.seeks += (uint64_t)r.seeked;
	g.st.cache_hits += (uint64_t)r.cache_hit;
	/* busy time = length of the union of [start, done) intervals */
	if (r.start_ns >= g.st.busy_end)
		g.st.busy_ns += r.done_ns - r.start_ns;
	else if (r.done_ns > g.st.busy_end)
		g.st.busy_ns += r.done_ns - g.st.busy_end;
	if (r.done_ns > g.st.busy_end)
		g.st.busy_end = r.done_ns;
	pthread_mutex_unlock(&g.lock);
	return r.done_ns;
}

static int format_stats(char *buf, size_t cap)
{
	struct stats s;
	int n;

	pthread_mutex_lock(&g.lock);
	s = g.st;
	pthread_mutex_unlock(&g.lock);
	n = snprintf(buf, cap,
		     "requests %llu\nreads %llu\nwrites %llu\nseeks %llu\ncache_hits %llu\n"
		     "bytes_read %llu\nbytes_written %llu\nbusy_ns %llu\nimage_bytes %llu\n",
		     (unsigned long long)s.requests, (unsigned long long)s.reads,
		     (unsigned long long)s.writes, (unsigned long long)s.seeks,
		     (unsigned long long)s.cache_hits, (unsigned long long)s.bytes_read,
		     (unsigned long long)s.bytes_written, (unsigned long long)s.busy_ns,
		     (unsigned long long)g.size);
	if (g.profile == PROFILE_HDD) {
		const struct hdd_model *m = &g.hdd;
		double span = (double)g.size / (double)m->p.stroke_bytes;

		n += snprintf(buf + n, cap - (size_t)n,
			      "model_rev_ns %.0f\nmodel_rate_bps %.0f\nmodel_track_bytes %llu\n"
			      "model_stroke_bytes %llu\nmodel_offset_bytes %llu\nmodel_cache_bytes %llu\n"
			      "model_track_seek_ns %.0f\nmodel_avg_seek_ns %.0f\nmodel_full_seek_ns %.0f\n"
			      "model_knee_seek_ns %.0f\nmodel_image_mean_seek_ns %.0f\n",
			      m->rev_ns, m->p.rate_bps, (unsigned long long)m->track_bytes,
			      (unsigned long long)m->p.stroke_bytes, (unsigned long long)m->p.offset_bytes,
			      (unsigned long long)m->p.cache_bytes, m->p.track_seek_ns,
			      hdd_mean_seek_ns(m, 1.0), hdd_seek_ns(m, 1.0), m->knee_seek_ns,
			      hdd_mean_seek_ns(m, span > 1 ? 1 : span));
	} else {
		n += snprintf(buf + n, cap - (size_t)n,
			      "model_latency_ns %.0f\nmodel_rate_bps %.0f\nmodel_channels %d\n",
			      g.ssd.p.latency_ns, g.ssd.p.rate_bps, g.ssd.p.channels);
	}
	return n;
}

/* ---- FUSE operations ------------------------------------------------------------------ */

static int is_disk(const char *path) { return strcmp(path, "/disk") == 0; }
static int is_stats(const char *path) { return strcmp(path, "/stats") == 0; }

static int op_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
	(void)fi;
	memset(st, 0, sizeof(*st));
	st->st_uid = getuid();
	st->st_gid = getgid();
	if (strcmp(path, "/") == 0) {
		st->st_mode = S_IFDIR | 0755;
		st->st_nlink = 2;
	} else if (is_disk(path)) {
		st->st_mode = S_IFREG | 0600;
		st->st_nlink = 1;
		st->st_size = (off_t)g.size;
		st->st_blocks = (blkcnt_t)(g.size / 512);
	} else if (is_stats(path)) {
		st->st_mode = S_IFREG | 0644;
		st->st_nlink = 1;
		st->st_size = 0;        /* generated on read (direct_io) */
	} else {
		return -ENOENT;
	}
	return 0;
}

static int op_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
		      struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
	(void)off;
	(void)fi;
	(void)flags;
	if (strcmp(path, "/") != 0)
		return -ENOENT;
	fill(buf, ".", NULL, 0, 0);
	fill(buf, "..", NULL, 0, 0);
	fill(buf, "disk", NULL, 0, 0);
	fill(buf, "stats", NULL, 0, 0);
	return 0;
}

static int op_open(const char *path, struct fuse_file_info *fi)
{
	if (!is_disk(path) && !is_stats(path))
		return -ENOENT;
	/* FOPEN_DIRECT_IO: no FUSE page cache, every read/write comes here, and O_DIRECT opens
	 * (the loop driver's) are accepted. */
	fi->direct_io = 1;
	fi->keep_cache = 0;
	return 0;
}

static int op_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
	(void)fi;
	if (is_stats(path)) {
		char text[4096];
		int n = format_stats(text, sizeof(text));

		if (off >= n)
			return 0;
		if (size > (size_t)(n - off))
			size = (size_t)(n - off);
		memcpy(buf, text + off, size);
		return (int)size;
	}
	if (!is_disk(path))
		return -ENOENT;
	if ((uint64_t)off >= g.size)
		return 0;
	if (size > g.size - (uint64_t)off)
		size = g.size - (uint64_t)off;
	uint64_t done = model_request((uint64_t)off, size, 0);
	/* Copy first (tmpfs, microseconds), then wait out the model's time. */
	ssize_t n = pread(g.fd, buf, size, off);
	if (n < 0)
		return -errno;
	sleep_until(done);
	return (int)n;
}

static int op_write(const char *path, const char *buf, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	(void)fi;
	if (is_stats(path)) {
		if (size >= 5 && strncmp(buf, "reset", 5) == 0) {
			pthread_mutex_lock(&g.lock);
			memset(&g.st, 0, sizeof(g.st));
			pthread_mutex_unlock(&g.lock);
			return (int)size;
		}
		return -EINVAL;
	}
	if (!is_disk(path))
		return -ENOENT;
	if ((uint64_t)off >= g.size)
		return -ENOSPC;
	if (size > g.size - (uint64_t)off)
		size = g.size - (uint64_t)off;
	uint64_t done = model_request((uint64_t)off, size, 1);
	ssize_t n = pwrite(g.fd, buf, size, off);
	if (n < 0)
		return -errno;
	sleep_until(done);
	return (int)n;
}

static int op_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
	(void)fi;
	if (is_stats(path))
		return 0;       /* `echo reset > stats` opens with O_TRUNC */
	return is_disk(path) && (uint64_t)size == g.size ? 0 : -EPERM;
}

/* The model writes through (no volatile write cache): a flush has nothing left to do. */
static int op_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
	(void)path;
	(void)datasync;
	(void)fi;
	return 0;
}

static void *op_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
	cfg->entry_timeout = 3600;
	cfg->attr_timeout = 3600;
	cfg->negative_timeout = 3600;
	/* up to 1 MiB per request (the loop device sends up to max_sectors_kb) */
	conn->max_read = 1u << 20;
	/* async direct I/O: the loop device's concurrent requests arrive concurrently */
	if (conn->capable & FUSE_CAP_ASYNC_DIO)
		conn->want |= FUSE_CAP_ASYNC_DIO;
	/* Model time is ours alone: no timer slack on the sleeps (inherited by FUSE's threads). */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	return NULL;
}

static const struct fuse_operations ops = {
	.init = op_init,
	.getattr = op_getattr,
	.readdir = op_readdir,
	.open = op_open,
	.read = op_read,
	.write = op_write,
	.truncate = op_truncate,
	.fsync = op_fsync,
};

/* ---- command line ----------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
"usage: hddsim --profile hdd7200|ssd --image FILE [options] MOUNTPOINT\n"
"\n"
"Serves FILE as MOUNTPOINT/disk with the timing of a disk model; MOUNTPOINT/stats has counters\n"
"(write \"reset\" to zero them).  Runs in the foreground; unmount with fusermount3 -u.\n"
"\n"
"hdd7200 options (defaults: typical 7200 rpm 3.5\" drive, see docs/emulated-disk.md):\n"
"  --stroke-bytes N    bytes the seek curve spans (default: the image size)\n"
"  --offset-bytes N    where the image starts on the drive (default 0, outer edge)\n"
"  --rpm R             spindle speed (7200)\n"
"  --rate-mbs R        media rate, MB/s (130)\n"
"  --iface-mbs R       buffer-to-host rate, MB/s (600)\n"
"  --track-seek-ms T   adjacent-track seek (1.0)\n"
"  --avg-seek-ms T     mean random seek over the full stroke (8.5)\n"
"  --full-seek-ms T    full-stroke seek (16.0)\n"
"  --knee F            stroke fraction where sqrt turns linear (0.3)\n"
"  --overhead-us T     controller overhead per request (0)\n"
"  --cache-kb N        read-ahead buffer (4096)\n"
"ssd options:\n"
"  --ssd-latency-us T  per-request latency (90)\n"
"  --ssd-rate-mbs R    transfer rate, MB/s (500)\n"
"  --ssd-channels N    requests served in parallel (4)\n"
"\n"
"Example:\n"
"  hddsim --profile hdd7200 --image /dev/shm/a.img /run/emu/fuse &\n"
"  losetup --find --show --direct-io=on /run/emu/fuse/disk\n");
}

static int parse_double(const char *s, double scale, double *out)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end)
		return -EINVAL;
	*out = v * scale;
	return 0;
}

static int parse_u64(const char *s, uint64_t *out)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 0);

	if (end == s || *end || *s == '-')
		return -EINVAL;
	*out = v;
	return 0;
}

/* Fills g.profile, g.image, *hp and *sp from argv. Returns -1 to go on, or the exit code
 * (help, bad usage or value). */
static int parse_options(int argc, char **argv, struct hdd_params *hp, struct ssd_params *sp)
{
	static const struct option longopts[] = {
		{ "profile", required_argument, 0, 'p' }, { "image", required_argument, 0, 'i' },
		{ "stroke-bytes", required_argument, 0, 's' }, { "offset-bytes", required_argument, 0, 'o' },
		{ "rpm", required_argument, 0, 'r' }, { "rate-mbs", required_argument, 0, 'R' },
		{ "iface-mbs", required_argument, 0, 'I' }, { "track-seek-ms", required_argument, 0, 't' },
		{ "avg-seek-ms", required_argument, 0, 'a' }, { "full-seek-ms", required_argument, 0, 'f' },
		{ "knee", required_argument, 0, 'k' }, { "overhead-us", required_argument, 0, 'O' },
		{ "cache-kb", required_argument, 0, 'c' }, { "ssd-latency-us", required_argument, 0, 'L' },
		{ "ssd-rate-mbs", required_argument, 0, 'S' }, { "ssd-channels", required_argument, 0, 'C' },
		{ "help", no_argument, 0, 'h' }, { 0, 0, 0, 0 },
	};
	uint64_t cache_kb = 0;
	int opt, err = 0, have_profile = 0;
	double channels = 0;

	while ((opt = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (opt) {
		case 'p':
			have_profile = 1;
			if (strcmp(optarg, "hdd7200") == 0)
				g.profile = PROFILE_HDD;
			else if (strcmp(optarg, "ssd") == 0)
				g.profile = PROFILE_SSD;
			else
				err = -EINVAL;
			break;
		case 'i': g.image = optarg; break;
		case 's': err = parse_u64(optarg, &hp->stroke_bytes); break;
		case 'o': err = parse_u64(optarg, &hp->offset_bytes); break;
		case 'r': err = parse_double(optarg, 1, &hp->rpm); break;
		case 'R': err = parse_double(optarg, 1e6, &hp->rate_bps); break;
		case 'I': err = parse_double(optarg, 1e6, &hp->iface_bps); break;
		case 't': err = parse_double(optarg, 1e6, &hp->track_seek_ns); break;
		case 'a': err = parse_double(optarg, 1e6, &hp->avg_seek_ns); break;
		case 'f': err = parse_double(optarg, 1e6, &hp->full_seek_ns); break;
		case 'k': err = parse_double(optarg, 1, &hp->knee); break;
		case 'O': err = parse_double(optarg, 1e3, &hp->overhead_ns); break;
		case 'c': err = parse_u64(optarg, &cache_kb); if (!err) hp->cache_bytes = cache_kb * 1024; break;
		case 'L': err = parse_double(optarg, 1e3, &sp->latency_ns); break;
		case 'S': err = parse_double(optarg, 1e6, &sp->rate_bps); break;
		case 'C': err = parse_double(optarg, 1, &channels); sp->channels = (int)channels; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
		if (err) {
			fprintf(stderr, "hddsim: bad value %s (see --help)\n", optarg);
			return 2;
		}
	}
	if (!have_profile || !g.image || optind != argc - 1) {
		usage(stderr);
		return 2;
	}
	return -1;
}

/* Open the image and set up the profile's model over it. Returns 0, or the exit code (the
 * image closed again). */
static int open_model(struct hdd_params *hp, const struct ssd_params *sp)
{
	struct stat st;
	int err;

	g.fd = open(g.image, O_RDWR | O_CLOEXEC);
	if (g.fd < 0 || fstat(g.fd, &st) < 0) {
		fprintf(stderr, "hddsim: cannot open image %s: %s\n", g.image, strerror(errno));
		if (g.fd >= 0)
			close(g.fd);
		return 1;
	}
	g.size = (uint64_t)st.st_size;
	if (!hp->stroke_bytes)
		hp->stroke_bytes = g.size + hp->offset_bytes;
	if (g.profile == PROFILE_HDD) {
		if (hp->offset_bytes + g.size > hp->stroke_bytes) {
			fprintf(stderr, "hddsim: image (%llu bytes at offset %llu) does not fit in the stroke (%llu bytes): raise --stroke-bytes\n",
				(unsigned long long)g.size, (unsigned long long)hp->offset_bytes,
				(unsigned long long)hp->stroke_bytes);
			close(g.fd);
			return 2;
		}
		err = hdd_init(&g.hdd, hp);
	} else {
		err = ssd_init(&g.ssd, sp);
	}
	if (err) {
		fprintf(stderr, "hddsim: the model parameters describe no possible drive (%s): need "
			"track-seek < avg-seek < full-seek, 0 < knee < 1, positive rates\n", strerror(-err));
		close(g.fd);
		return 2;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct hdd_params hp;
	struct ssd_params sp;

	hdd_default_params(&hp);
	ssd_default_params(&sp);
	int ex = parse_options(argc, argv, &hp, &sp);
	if (ex >= 0)
		return ex;
	ex = open_model(&hp, &sp);
	if (ex)
		return ex;
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);

	char fsname[4200];
	snprintf(fsname, sizeof(fsname), "-ofsname=hddsim,subtype=hddsim,max_read=1048576");
	char *fargv[] = { argv[0], "-f", fsname, argv[optind], NULL };
	int rc = fuse_main(4, fargv, &ops, NULL);
	close(g.fd);
	return rc;
}
