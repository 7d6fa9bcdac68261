/* A launch that lists every directory of a tree and reads every file in it (like an
 * interpreter importing a package tree): opendir/readdir, then open+read each file. */
#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
static long files, bytes;
static void walk(const char *dir)
{
	DIR *d = opendir(dir);
	struct dirent *e;
	char p[4096], buf[65536];
	if (!d) { perror(dir); return; }
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.') continue;
		snprintf(p, sizeof(p), "%s/%s", dir, e->d_name);
		if (e->d_type == DT_DIR) { walk(p); continue; }
		int fd = open(p, O_RDONLY);
		if (fd < 0) { perror(p); continue; }
		ssize_t n;
		while ((n = read(fd, buf, sizeof(buf))) > 0) bytes += n;
		close(fd);
		files++;
	}
	closedir(d);
}
int main(int argc, char **argv)
{
	walk(argv[1]);
	printf("%ld files %ld bytes\n", files, bytes);
	return 0;
}
