#include "coordination/liveness.hpp"

#include "base/pid_namespace.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace flinkgpu {
namespace coordination {
namespace {

// Bumped in every fork()ed child (own_pid's atfork handler): the per-process caches below are keyed by it
// too, since a child can have its parent's pid (a pid 1 that unshared CLONE_NEWPID forks a pid 1).
std::atomic<unsigned> g_generation{0};

// The calling process is alive and its start time never changes, so /proc/self/stat is read once
// per process (keyed by pid: a forked child reads its own). Saves a file read on every claim.
ProcInfo probe_self(pid_t self) {
    thread_local pid_t cached_pid = 0;
    thread_local unsigned cached_generation = 0;
    thread_local ProcInfo cached;
    const unsigned generation = g_generation.load(std::memory_order_relaxed);
    if (cached_pid != self || cached_generation != generation) {
        cached = probe_process(self);
        cached_pid = self;
        cached_generation = generation;
    }
    return cached;
}

// The namespace of a process never changes (unshare and setns move only its children), so it is read
// once per process (keyed by pid: a forked child may be in a new one).
PidNamespace read_own_pid_namespace() {
    PidNamespace ns;
    ns.known = read_own_pid_namespace_inode(&ns.inode);
    return ns;
}

}  // namespace

namespace {

std::atomic<pid_t> g_own_pid{0};

void forget_own_pid() {
    g_own_pid.store(0, std::memory_order_relaxed);
    g_generation.fetch_add(1, std::memory_order_relaxed);
}

}  // namespace

pid_t own_pid() noexcept {
    pid_t pid = g_own_pid.load(std::memory_order_relaxed);
    if (pid == 0) {
        // a function-local static, not std::call_once (GLIBC_2.34's pthread_once, beyond manylinux_2_28)
        static const int registered = pthread_atfork(nullptr, nullptr, forget_own_pid);
        (void)registered;
        pid = getpid();
        g_own_pid.store(pid, std::memory_order_relaxed);
    }
    return pid;
}

PidNamespace own_pid_namespace() noexcept { return own_pid_namespace(own_pid()); }

PidNamespace own_pid_namespace(pid_t self) noexcept {
    thread_local pid_t cached_pid = 0;
    thread_local unsigned cached_generation = 0;
    thread_local PidNamespace cached;
    const unsigned generation = g_generation.load(std::memory_order_relaxed);
    if (cached_pid != self || cached_generation != generation) {
        cached = read_own_pid_namespace();
        cached_pid = self;
        cached_generation = generation;
    }
    return cached;
}

bool own_thread(pid_t self, pid_t tid) noexcept { return tid > 0 && syscall(SYS_tgkill, self, tid, 0) == 0; }

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

Verdict judge(const Entry& e, const PidNamespace& ours, Evidence& evidence) {
    if (e.pid_is_in(ours)) {
        // Where its pid can be probed, the process decides, whatever its lease byte says: a byte is free on a
        // lease file someone put in the old one's place with its token, and held by anyone who can open the
        // lease file and read-lock it as the holder dies.
        const ProcInfo& p = evidence.process(e.pid);
        if (!p.exists) return Verdict::kGone;
        if (!same_process(e, p)) return Verdict::kPidReused;
        // a binding made for a TaskManager lasts no longer than it: its orphaned worker holds nothing
        if (e.tm > 0 && e.tm != e.pid && !evidence.process(e.tm).exists) return Verdict::kTaskManagerGone;
        return Verdict::kAlive;
    }
    LeaseState lease = e.has_lease ? evidence.lease(e.lease, e.lease_file) : LeaseState::kUnknown;
    // no token says which lease file it was taken on (an older version's line, or one whose lease file had
    // none): the lease file may have been created again since, with every byte free, so a free byte proves
    // nothing and the line is judged as if it had no lease
    if (lease == LeaseState::kFree && !e.lease_file_known()) lease = LeaseState::kUnknown;
    if (lease == LeaseState::kFree) return Verdict::kLeaseReleased;
    // a thread's line: its process's lease says nothing of the thread
    if (lease == LeaseState::kHeld && e.slot.empty()) return Verdict::kLeaseHeld;
    return Verdict::kOtherNamespace;
}

LineJudge::LineJudge(Leases* leases) : leases_(leases), self_(own_pid()) { ns_ = own_pid_namespace(self_); }

const ProcInfo& LineJudge::process(pid_t pid) {
    auto it = cache_.find(pid);
    if (it == cache_.end()) it = cache_.emplace(pid, pid == self_ ? probe_self(self_) : probe_process(pid)).first;
    return it->second;
}

LeaseState LineJudge::lease(std::uint32_t slot, const std::string& lease_file) {
    return leases_ == nullptr ? LeaseState::kUnknown : leases_->test(slot, lease_file);
}

void LineJudge::judge(Entry* e) {
    e->verdict = coordination::judge(*e, ns_, *this);
    e->alive = verdict_alive(e->verdict);
}

bool LineJudge::owns(const Entry& e, pid_t owner, const ProcInfo& owner_info) {
    std::uint32_t slot = 0;
    if (!e.records(owner, owner == self_, ns_)) return false;
    if (owner == self_ && e.has_lease && leases_ != nullptr && leases_->held(&slot) && slot == e.lease) return true;
    return same_process(e, owner_info);
}

}  // namespace coordination
}  // namespace flinkgpu
