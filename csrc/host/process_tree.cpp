#include "host/process_tree.hpp"

#include "base/pid_namespace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>

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

// Whether `pid` has a descriptor open for reading on the pipe whose inode is `pipe_inode`.
bool reads_pipe(pid_t pid, ino_t pipe_inode) {
    char dir_path[32];
    std::snprintf(dir_path, sizeof dir_path, "/proc/%d/fd", static_cast<int>(pid));
    DIR* dir = opendir(dir_path);
    if (dir == nullptr) return false;
    char wanted[48];
    std::snprintf(wanted, sizeof wanted, "pipe:[%llu]", static_cast<unsigned long long>(pipe_inode));
    bool found = false;
    while (!found) {
        const dirent* entry = readdir(dir);
        if (entry == nullptr) break;
        if (entry->d_name[0] < '0' || entry->d_name[0] > '9') continue;
        char path[64];
        std::snprintf(path, sizeof path, "/proc/%d/fd/%s", static_cast<int>(pid), entry->d_name);
        char target[48];
        const ssize_t n = readlink(path, target, sizeof target - 1);
        if (n <= 0) continue;
        target[n] = '\0';
        if (std::strcmp(target, wanted) != 0) continue;
        // both ends of a pipe read alike: the flags say which one this is
        std::snprintf(path, sizeof path, "/proc/%d/fdinfo/%s", static_cast<int>(pid), entry->d_name);
        char info[256];
        if (read_small(path, info, sizeof info) <= 0) continue;
        const char* flags = std::strstr(info, "flags:");
        unsigned long value = 0;
        if (flags != nullptr && std::sscanf(flags + 6, "%lo", &value) == 1 &&
            (value & O_ACCMODE) == static_cast<unsigned long>(O_RDONLY))
            found = true;
    }
    closedir(dir);
    return found;
}

}  // namespace

namespace {

// The parent of `pid` and its command name from /proc/<pid>/stat; false when there is no such entry or it
// cannot be read.
bool read_stat(pid_t pid, pid_t* parent, std::string* command) {
    if (pid <= 0) return false;
    char path[32];
    std::snprintf(path, sizeof path, "/proc/%d/stat", static_cast<int>(pid));
    char buf[1024];
    if (read_small(path, buf, sizeof buf) <= 0) return false;
    // "pid (comm) S ppid ...": comm may hold anything, so the fields count from the last ')'.
    const char* close = std::strrchr(buf, ')');
    if (close == nullptr) return false;
    char state = 0;
    long ppid = -1;
    if (std::sscanf(close + 1, " %c %ld", &state, &ppid) != 2 || ppid < 0) return false;
    *parent = static_cast<pid_t>(ppid);
    if (command != nullptr) {
        const char* open = std::strchr(buf, '(');
        *command = open != nullptr && open < close ? std::string(open + 1, close) : std::string();
    }
    return true;
}

}  // namespace

pid_t parent_pid(pid_t pid) noexcept {
    pid_t parent = -1;
    return read_stat(pid, &parent, nullptr) ? parent : -1;
}

std::vector<ProcessAncestor> process_ancestry(pid_t pid, std::size_t limit) {
    std::vector<ProcessAncestor> chain;
    while (pid > 0 && chain.size() < limit) {
        ProcessAncestor ancestor;
        pid_t parent = -1;
        if (!read_stat(pid, &parent, &ancestor.command)) break;
        ancestor.pid = pid;
        chain.push_back(std::move(ancestor));
        pid = parent;
    }
    return chain;
}

pid_t ProcessTree::parent(pid_t pid) {
    auto it = parents_.find(pid);
    if (it == parents_.end()) it = parents_.emplace(pid, parent_pid(pid)).first;
    return it->second;
}

ProcessVerdict ProcessTree::classify(pid_t pid) {
    ProcessVerdict v;
    if (!namespace_read_) {
        std::uint64_t inode = 0;
        if (read_own_pid_namespace_inode(&inode)) pid_namespace_ = inode;
        namespace_read_ = true;
    }
    // elsewhere the process with this number here is another one than NVML's (or none): no match proves anything
    if (pid_namespace_ != kInitialPidNamespace) return v;
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

ParentEvidence parent_evidence(pid_t parent) noexcept {
    if (parent <= 0) return ParentEvidence::kNone;
    // 0 for a group (or session) whose leader is outside our pid namespace: equal zeros are a group
    // that came with our namespace's pid 1, which a reaper of ours shares only as pid 1's own
    const pid_t group = getpgid(parent);
    if (group >= 0 && group == getpgrp()) return ParentEvidence::kProcessGroup;
    const pid_t self = getpid();
    const pid_t session = getsid(0);
    if (getpgrp() == self && session != self) {
        const pid_t theirs = getsid(parent);
        if (theirs >= 0 && theirs == session) return ParentEvidence::kSession;
    }
    // statx, not fstat: fstat is a GLIBC_2.33 symbol, past the wheels' manylinux_2_28
    struct statx out{};
    if (statx(STDOUT_FILENO, "", AT_EMPTY_PATH, STATX_TYPE | STATX_INO, &out) == 0 && S_ISFIFO(out.stx_mode) &&
        reads_pipe(parent, static_cast<ino_t>(out.stx_ino)))
        return ParentEvidence::kReadsOutput;
    return ParentEvidence::kNone;
}

}  // namespace flinkgpu
