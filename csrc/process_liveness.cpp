#include "process_liveness.hpp"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace flinkgpu {
namespace coordination {
namespace {

// The calling process is alive and its start time never changes, so /proc/self/stat is read once
// per process (keyed by pid: a forked child reads its own). Saves a file read on every claim.
ProcInfo probe_self(pid_t self) {
    thread_local pid_t cached_pid = 0;
    thread_local ProcInfo cached;
    if (cached_pid != self) {
        cached = probe_process(self);
        cached_pid = self;
    }
    return cached;
}

}  // namespace

// A zombie (or dying) process, state Z, X or x, holds nothing.
ProcInfo probe_process(pid_t pid) noexcept {
    ProcInfo info;
    if (pid <= 0) return info;
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[1024];
        std::size_t len = 0;
        for (;;) {
            ssize_t n = read(fd, buf + len, sizeof buf - 1 - len);
            if (n < 0 && errno == EINTR) continue;
            if (n <= 0) break;
            len += static_cast<std::size_t>(n);
            if (len == sizeof buf - 1) break;
        }
        close(fd);
        buf[len] = '\0';
        // "pid (comm) S ppid ...": comm may contain anything, so fields count from the last ')'.
        const char* close_paren = std::strrchr(buf, ')');
        if (close_paren != nullptr) {
            const char* p = close_paren + 1;
            int field = 2;
            char state = 0;
            const char* start_field = nullptr;
            while (*p != '\0') {
                while (*p == ' ') ++p;
                if (*p == '\0') break;
                ++field;
                if (field == 3) state = *p;
                if (field == 22) {
                    start_field = p;
                    break;
                }
                while (*p != '\0' && *p != ' ') ++p;
            }
            if (state != 0) {
                info.exists = !(state == 'Z' || state == 'X' || state == 'x');
                if (start_field != nullptr) {
                    char* end = nullptr;
                    errno = 0;
                    const unsigned long long v = std::strtoull(start_field, &end, 10);
                    if (errno == 0 && end != start_field) {
                        info.has_start_time = true;
                        info.start_time = v;
                    }
                }
                return info;
            }
        }
    }
    info.exists = kill(pid, 0) == 0 || errno == EPERM;
    return info;
}

bool same_process(const Entry& e, const ProcInfo& p) noexcept {
    return !e.has_start_time || !p.has_start_time || p.start_time == e.start_time;
}

const ProcInfo& Liveness::get(pid_t pid) {
    auto it = cache_.find(pid);
    if (it == cache_.end()) {
        const pid_t self = getpid();
        it = cache_.emplace(pid, pid == self ? probe_self(self) : probe_process(pid)).first;
    }
    return it->second;
}

bool Liveness::alive(const Entry& e) {
    const ProcInfo& p = get(e.pid);
    return p.exists && same_process(e, p);
}

}  // namespace coordination
}  // namespace flinkgpu
