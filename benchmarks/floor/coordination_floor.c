/* The syscall floor of one coordinated claim + release (docs/design.md §8): only the calls the
 * protocol cannot do without, in C, with no parsing, no NVML and no checks. Built by the benchmarks'
 * conftest.py into a shared library and called through ctypes, so it links no code of flink-gpu.
 *
 * claim:   open the file, flock, read it, take the lease (open the lease file, F_OFD_SETLK one
 *          byte), append our lines, close (which unlocks);
 * release: open the file, flock, read it, cut our lines out (ftruncate alone when they are the last
 *          bytes, else pwrite what follows them first), close; close the lease descriptor (which
 *          drops the lease).
 * Each process uses its own lease byte `slot`, so that no claim tries a second one. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdint.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

static char buffer[65536];

static int locked_open(const char* path, ssize_t* size) {
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return -1;
    if (flock(fd, LOCK_EX) != 0 || (*size = pread(fd, buffer, sizeof buffer, 0)) < 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* One claim + release of `lines` (the bytes a real claim appends). 0 on success, -1 on failure. */
int floor_cycle(const char* path, const char* lease_path, const char* lines, size_t length, unsigned slot) {
    ssize_t size = 0;
    int fd = locked_open(path, &size);
    if (fd < 0) return -1;
    int lease = open(lease_path, O_RDWR | O_CLOEXEC);
    struct flock byte;
    memset(&byte, 0, sizeof byte);
    byte.l_type = F_WRLCK;
    byte.l_whence = SEEK_SET;
    byte.l_start = (off_t)slot;
    byte.l_len = 1;
    if (lease < 0 || fcntl(lease, F_OFD_SETLK, &byte) != 0 || pwrite(fd, lines, length, size) != (ssize_t)length) {
        if (lease >= 0) close(lease);
        close(fd);
        return -1;
    }
    close(fd);
    fd = locked_open(path, &size);
    char* ours = fd < 0 ? NULL : memmem(buffer, (size_t)size, lines, length);
    size_t at = ours == NULL ? 0 : (size_t)(ours - buffer), rest = (size_t)size - at - length;
    if (ours == NULL || (rest > 0 && pwrite(fd, ours + length, rest, (off_t)at) != (ssize_t)rest) ||
        ftruncate(fd, (off_t)(at + rest)) != 0) {
        if (fd >= 0) close(fd);
        close(lease);
        return -1;
    }
    close(fd);
    close(lease);
    return 0;
}

/* `cycles` cycles, each one's latency in nanoseconds into `latencies` (the contention benchmark). */
int floor_cycles(const char* path, const char* lease_path, const char* lines, size_t length, unsigned slot, int cycles,
                 int64_t* latencies) {
    for (int i = 0; i < cycles; ++i) {
        struct timespec t0, t1;
        clock_gettime(CLOCK_MONOTONIC, &t0);
        if (floor_cycle(path, lease_path, lines, length, slot) != 0) return -1;
        clock_gettime(CLOCK_MONOTONIC, &t1);
        latencies[i] = (int64_t)(t1.tv_sec - t0.tv_sec) * 1000000000 + (t1.tv_nsec - t0.tv_nsec);
    }
    return 0;
}
