#include "process_tree.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace flinkgpu {
namespace {

// A chain longer than this is a loop (a pid reused while we walk): stop there.
constexpr int kMaxDepth = 4096;

// Up to `size - 1` bytes of `path`, NUL-terminated; the length read, -1 when it cannot be opened.
ssize_t read_small(const char* path, char* buf, std::size_t size) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    std::size_t len = 0;
    while (len < size - 1) {
        const ssize_t n = read(fd, buf + len, size - 1 - len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        len += static_cast<std::size_t>(n);
    }
    close(fd);
    buf[len] = '\0';
    return static_cast<ssize_t>(len);
}

}  // namespace

pid_t parent_pid(pid_t pid) noexcept {
    if (pid <= 0) return -1;
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    char buf[1024];
    if (read_small(path, buf, sizeof buf) <= 0) return -1;
    // "pid (comm) S ppid ...": comm may hold anything, so the fields count from the last ')'.
    const char* p = std::strrchr(buf, ')');
    if (p == nullptr) return -1;
    char state = 0;
    long ppid = -1;
    if (std::sscanf(p + 1, " %c %ld", &state, &ppid) != 2 || ppid < 0) return -1;
    return static_cast<pid_t>(ppid);
}

pid_t ProcessTree::parent(pid_t pid) {
    auto it = parents_.find(pid);
    if (it == parents_.end()) it = parents_.emplace(pid, parent_pid(pid)).first;
    return it->second;
}

ProcessVerdict ProcessTree::classify(pid_t pid) {
    ProcessVerdict v;
    pid_t p = pid;
    pid_t up = parent(p);
    v.visible = up >= 0;
    for (int depth = 0; depth < kMaxDepth && p > 0; ++depth) {
        if (p == owner_ || (taskmanager_ > 0 && p == taskmanager_)) {
            v.own = true;
            break;
        }
        if (up <= 0) break;
        p = up;
        up = parent(p);
    }
    return v;
}

pid_t find_taskmanager(pid_t pid) noexcept {
    try {
        pid_t p = parent_pid(pid);
        std::string cmdline;
        for (int depth = 0; depth < kMaxDepth && p > 0; ++depth) {
            char path[32];
            std::snprintf(path, sizeof path, "/proc/%d/cmdline", static_cast<int>(p));
            const int fd = open(path, O_RDONLY | O_CLOEXEC);
            if (fd >= 0) {
                cmdline.clear();
                char buf[4096];
                for (;;) {
                    const ssize_t n = read(fd, buf, sizeof buf);
                    if (n < 0 && errno == EINTR) continue;
                    if (n <= 0) break;
                    cmdline.append(buf, static_cast<std::size_t>(n));
                    if (cmdline.size() > (1u << 20)) break;  // a class name sits well before
                }
                close(fd);
                // arguments are NUL-separated; the class is one whole argument
                std::size_t start = 0;
                while (start < cmdline.size()) {
                    std::size_t end = cmdline.find('\0', start);
                    if (end == std::string::npos) end = cmdline.size();
                    if (cmdline.compare(start, end - start, kTaskManagerMainClass) == 0) return p;
                    start = end + 1;
                }
            }
            p = parent_pid(p);
        }
        return 0;
    } catch (...) {
        return 0;
    }
}

}  // namespace flinkgpu
