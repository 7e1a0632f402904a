/* A power-cut recorder for redis-server / valkey-server, loaded with LD_PRELOAD.
 *
 * Every successful fsync or fdatasync of an AOF file (a path holding ".aof") appends a line
 * "SIZE PATH" to the file named by KS_FSYNC_LOG, where SIZE is the file's size when the
 * call began: whatever was written before the call is on disk once it returns. Cutting the
 * power is then simulated by killing the server and truncating each AOF file to its last
 * recorded size (tests/power/power_cut.py).
 *
 * KS_FSYNC_DELAY_MS stalls every AOF fsync that long first: a slow disk, so that a server
 * which answers before its fsync is done shows it. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

typedef int (*sync_fn)(int);

static int aof_path(int fd, char *path, size_t size) {
    char link[64];
    snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
    ssize_t n = readlink(link, path, size - 1);
    if (n <= 0) return 0;
    path[n] = '\0';
    return strstr(path, ".aof") != NULL;
}

static void stall(void) {
    const char *delay = getenv("KS_FSYNC_DELAY_MS");
    long ms = delay ? atol(delay) : 0;
    if (ms > 0) {
        struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&t, NULL);
    }
}

static void record(const char *path, off_t size) {
    const char *log = getenv("KS_FSYNC_LOG");
    if (!log) return;
    char line[PATH_MAX + 32];
    int n = snprintf(line, sizeof line, "%lld %s\n", (long long)size, path);
    int out = open(log, O_WRONLY | O_APPEND | O_CREAT, 0644);
    if (out < 0) return;
    if (write(out, line, (size_t)n) != n) { /* nothing to do: the test sees a short log */ }
    close(out);
}

static int synced(const char *name, int fd) {
    static sync_fn real_fsync, real_fdatasync;
    sync_fn *real = strcmp(name, "fsync") == 0 ? &real_fsync : &real_fdatasync;
    if (!*real) *real = (sync_fn)dlsym(RTLD_NEXT, name);
    char path[PATH_MAX];
    struct stat before;
    if (!aof_path(fd, path, sizeof path) || fstat(fd, &before) != 0) return (*real)(fd);
    stall();
    int result = (*real)(fd);
    if (result == 0) record(path, before.st_size);
    return result;
}

int fsync(int fd) { return synced("fsync", fd); }
int fdatasync(int fd) { return synced("fdatasync", fd); }
