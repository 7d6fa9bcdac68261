/* Memory pressure as the kernel reports it: MemAvailable (/proc/meminfo) and PSI
 * (/proc/pressure/memory). Used to shrink or skip prefetch that would evict useful pages. */
#ifndef PRESSURE_H
#define PRESSURE_H

#include <stdint.h>

struct pressure {
	int64_t mem_available_kb;   /* -1 when unknown */
	int64_t mem_total_kb;
	double psi_some_avg10;      /* percent; -1 when PSI is not available */
	double psi_full_avg10;
};

/* Returns 0, or -errno when /proc/meminfo cannot be read (PSI is optional). */
int pressure_sample(struct pressure *p);

/* Parsers, separate so the C tests can feed them text. */
int pressure_parse_meminfo(const char *text, struct pressure *p);
int pressure_parse_psi(const char *text, struct pressure *p);

#endif
