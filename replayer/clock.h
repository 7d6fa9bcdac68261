/* The replayer's clock: CLOCK_MONOTONIC in nanoseconds (what the daemon, the recorder's trace
 * clock "mono" and Python's time.monotonic_ns() read too). */
#ifndef WARMSTART_CLOCK_H
#define WARMSTART_CLOCK_H

#include <stdint.h>
#include <time.h>

static inline uint64_t mono_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
