#include "pressure.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

static int read_text(const char *path, char *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	if (fd < 0)
		return -errno;
	n = read(fd, buf, size - 1);
	int rc = n < 0 ? -errno : 0;
	close(fd);
	if (rc)
		return rc;
	buf[n] = 0;
	return 0;
}

int pressure_parse_meminfo(const char *text, struct pressure *p)
{
	const char *a = strstr(text, "MemAvailable:");
	const char *t = strstr(text, "MemTotal:");
	long long v;
	p->mem_available_kb = -1;
	p->mem_total_kb = -1;
	if (t && sscanf(t, "MemTotal: %lld", &v) == 1)
		p->mem_total_kb = v;
	if (!a || sscanf(a, "MemAvailable: %lld", &v) != 1)
		return -EINVAL;
	p->mem_available_kb = v;
	return 0;
}

int pressure_parse_psi(const char *text, struct pressure *p)
{
	const char *s = strstr(text, "some avg10=");
	const char *f = strstr(text, "full avg10=");
	p->psi_some_avg10 = -1;
	p->psi_full_avg10 = -1;
	if (!s || sscanf(s, "some avg10=%lf", &p->psi_some_avg10) != 1)
		return -EINVAL;
	if (f)
		sscanf(f, "full avg10=%lf", &p->psi_full_avg10);
	return 0;
}

int pressure_sample(struct pressure *p)
{
	char buf[4096];
	int rc = read_text("/proc/meminfo", buf, sizeof(buf));
	if (!rc)
		rc = pressure_parse_meminfo(buf, p);
	if (read_text("/proc/pressure/memory", buf, sizeof(buf)) || pressure_parse_psi(buf, p)) {
		p->psi_some_avg10 = -1;
		p->psi_full_avg10 = -1;
	}
	return rc;
}
