#include "stats.h"

#include <sys/resource.h>

#include "residency.h"

static void json_str(FILE *f, const char *s)
{
	fputc('"', f);
	for (; s && *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			fprintf(f, "\\%c", ch);
		else if (ch < 0x20 || ch >= 0x7f)
			fprintf(f, "\\u%04x", ch);
		else
			fputc(ch, f);
	}
	fputc('"', f);
}

/* Peak RSS of this program: VmHWM. (ru_maxrss would include the parent's peak: the kernel
 * carries it across fork+exec.) */
static long vm_hwm_kb(void)
{
	char line[256];
	long kb = -1;
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static unsigned long long since(const struct replay_stats *st, unsigned long long t)
{
	return t ? t - st->start_mono_ns : 0;
}

void stats_write(FILE *f, const struct run_info *ri, const struct replay_stats *st,
		 const struct engine *e)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);   /* includes the worker threads */

	fprintf(f, "{\"version\": 1, \"status\": ");
	json_str(f, ri->status);
	fprintf(f, ", \"error\": ");
	if (ri->error)
		json_str(f, ri->error);
	else
		fputs("null", f);
	fprintf(f, ", \"mode\": \"%s\", \"engine\": \"%s\", \"ioprio\": \"%s\", \"depth\": %u, "
		"\"schedule_id\": %llu, \"residency_method\": \"%s\",\n",
		ri->mode, ri->engine, ri->ioprio, ri->depth, ri->schedule_id, residency_method());
	fprintf(f, " \"ranges_total\": %u, \"ranges_fetched\": %u, \"ranges_resident\": %u, "
		"\"ranges_skipped_file\": %u, \"ranges_skipped_pressure\": %u, \"device_ranges\": %u,\n",
		st->ranges_total, st->ranges_fetched, st->ranges_resident, st->ranges_skipped_file,
		st->ranges_skipped_pressure, st->device_ranges);
	fprintf(f, " \"bytes_scheduled\": %llu, \"bytes_fetched\": %llu, \"bytes_resident\": %llu, "
		"\"bytes_skipped_pressure\": %llu, \"prebuffer_bytes\": %llu, \"prebuffer_wait_ns\": %llu,\n",
		(unsigned long long)st->bytes_scheduled, (unsigned long long)st->bytes_fetched,
		(unsigned long long)st->bytes_resident, (unsigned long long)st->bytes_skipped_pressure,
		(unsigned long long)st->prebuffer_bytes, (unsigned long long)st->prebuffer_wait_ns);
	fprintf(f, " \"files_total\": %u, \"files_opened\": %u, \"files_changed\": %u, "
		"\"files_missing\": %u, \"files_denied\": %u, \"files_other_error\": %u, "
		"\"noatime_fallbacks\": %u,\n",
		st->files_total, st->files_opened, st->files_changed, st->files_missing,
		st->files_denied, st->files_other, st->noatime_fallbacks);
	fprintf(f, " \"meta_files_looked_up\": %u, \"meta_dirs_listed\": %u, \"meta_dirs_looked_up\": %u, "
		"\"meta_errors\": %u, \"meta_files_opened\": %u, \"meta_ranges_sought\": %u, \"meta_dirents_bytes\": %llu, "
		"\"t_meta_pass_ns\": %llu, \"t_meta_ns\": %llu, \"t_meta_prebuffer_ns\": %llu,\n",
		st->meta.files_looked_up, st->meta.dirs_listed, st->meta.dirs_looked_up, st->meta.errors,
		st->meta.files_opened, st->meta.ranges_sought, (unsigned long long)st->meta.dirents_bytes,
		(unsigned long long)st->meta.pass_ns, (unsigned long long)st->meta.ns,
		(unsigned long long)st->meta.prebuffer_ns);
	fprintf(f, " \"start_mono_ns\": %llu, \"first_io_mono_ns\": %llu, \"t_first_io_ns\": %llu, "
		"\"t_prebuffer_ns\": %llu, \"t_total_ns\": %llu,\n",
		(unsigned long long)st->start_mono_ns, (unsigned long long)st->first_io_mono_ns,
		since(st, st->first_io_mono_ns), since(st, st->release_mono_ns),
		since(st, st->end_mono_ns));
	fprintf(f, " \"cpu_user_ns\": %llu, \"cpu_sys_ns\": %llu, \"max_rss_kb\": %ld, "
		"\"engine_calls\": %llu, \"io_errors\": %llu,\n",
		(unsigned long long)ru.ru_utime.tv_sec * 1000000000ull + ru.ru_utime.tv_usec * 1000ull,
		(unsigned long long)ru.ru_stime.tv_sec * 1000000000ull + ru.ru_stime.tv_usec * 1000ull,
		vm_hwm_kb(), e ? (unsigned long long)e->calls : 0ull,
		e ? (unsigned long long)e->io_errors : 0ull);
	fprintf(f, " \"pressure\": [");
	for (unsigned i = 0; i < st->ndecisions; i++) {
		const struct decision *d = &st->decisions[i];
		fprintf(f, "%s{\"t_ns\": %llu, \"at_range\": %u, \"mem_available_kb\": %lld, "
			"\"psi_some_avg10\": %.2f, \"action\": \"%s\", \"budget_bytes\": %llu}",
			i ? ", " : "", (unsigned long long)d->t_ns, d->at_range,
			(long long)d->mem_available_kb, d->psi_some_avg10, d->action,
			(unsigned long long)d->budget_bytes);
	}
	fprintf(f, "],\n \"segments\": [");
	for (unsigned i = 0; i < st->nsegs && st->segs; i++) {
		const struct seg_stat *g = &st->segs[i];
		fprintf(f, "%s{\"idx\": %u, \"ranges\": %u, \"ranges_fetched\": %u, \"bytes\": %llu, "
			"\"bytes_fetched\": %llu, \"t_start_ns\": %llu, \"t_end_ns\": %llu, \"meta_entries\": %u, "
			"\"t_meta_ns\": %llu}",
			i ? ",\n   " : "", g->idx, g->ranges, g->ranges_fetched,
			(unsigned long long)g->bytes, (unsigned long long)g->bytes_fetched,
			(unsigned long long)g->t_start_ns, (unsigned long long)g->t_end_ns, g->meta_entries,
			(unsigned long long)g->t_meta_ns);
	}
	fprintf(f, "]");
	if (ri->exit) {
		fprintf(f, ",\n ");
		exit_check_write(f, ri->exit);
	}
	if (ri->watch) {
		fprintf(f, ",\n ");
		appwatch_write(f, ri->watch);
	}
	fprintf(f, "}\n");
	fflush(f);
}
