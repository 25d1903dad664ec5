// The stock script's side of the coordination file, as /proc tells it (docs/design.md §5.2): who holds
// a flock, and whether a stock script is still writing a copy of the file that it replaced; see
// proc_locks.hpp.
#include "coordination/proc_locks.hpp"

#include "base/pid_namespace.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <set>
#include <utility>
#include <vector>

namespace flinkgpu {
namespace coordination {
namespace {

std::int64_t monotonic_ms() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

// A small /proc file, whole ("" when it cannot be read).
std::string read_small_file(const std::string& path) {
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return "";
    std::string text;
    char buf[4096];
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        text.append(buf, static_cast<std::size_t>(n));
        if (text.size() > (1u << 20)) break;
    }
    close(fd);
    return text;
}

// The pids of the flock lines of /proc/locks, or of the "lock:" lines of an fdinfo file, that lock the
// inode `want` ("08:01:5678"): "1: FLOCK  ADVISORY  WRITE 1234 08:01:5678 0 EOF"; waiters carry "->" and
// hold nothing.
std::set<long> flock_pids(const std::string& text, const char* want) {
    std::set<long> pids;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        // an fdinfo line is "lock:\t" followed by a /proc/locks line
        const std::size_t skip = text.compare(pos, 5, "lock:") == 0 ? 5 : 0;
        const std::string line = text.substr(pos + skip, end - pos - skip);
        pos = end + 1;
        if (line.find("FLOCK") == std::string::npos || line.find("->") != std::string::npos) continue;
        char kind[16], adv[16], rw[16], dev[64];
        long pid = 0;
        if (std::sscanf(line.c_str(), "%*[^:]: %15s %15s %15s %ld %63s", kind, adv, rw, &pid, dev) != 5) continue;
        if (std::strcmp(dev, want) == 0) pids.insert(pid);
    }
    return pids;
}

// Whether process `pid` has a descriptor on the open file description that holds the lock.
bool holds_lock(const std::string& pid, const char* want) {
    const std::string dir = "/proc/" + pid + "/fdinfo";
    DIR* fds = opendir(dir.c_str());
    if (fds == nullptr) return false;
    bool found = false;
    while (!found) {
        const dirent* f = readdir(fds);
        if (f == nullptr) break;
        if (f->d_name[0] != '.') found = !flock_pids(read_small_file(dir + "/" + f->d_name), want).empty();
    }
    closedir(fds);
    return found;
}

// Who holds a flock on this inode (best effort: "" when unknown). /proc/locks names the process that
// took the lock; it may have exited while a child that inherited the descriptor holds the lock on. Every
// process sharing the locked open file description shows the lock in /proc/<pid>/fdinfo, so when none of
// the named processes does, all of /proc is searched (only on a timeout; another user's fdinfo is not
// readable, and then the /proc/locks pids are named).
}  // namespace

std::string lock_holders(const struct statx& st) {
    char want[64];
    std::snprintf(want, sizeof want, "%02x:%02x:%llu", st.stx_dev_major, st.stx_dev_minor,
                  static_cast<unsigned long long>(st.stx_ino));
    const std::set<long> lockers = flock_pids(read_small_file("/proc/locks"), want);
    std::set<long> holders;
    for (long pid : lockers) {
        if (holds_lock(std::to_string(pid), want)) holders.insert(pid);
    }
    if (holders.empty() && !lockers.empty()) {
        if (DIR* proc = opendir("/proc")) {
            while (const dirent* e = readdir(proc)) {
                const std::string name = e->d_name;
                if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
                if (holds_lock(name, want)) holders.insert(std::strtol(name.c_str(), nullptr, 10));
            }
            closedir(proc);
        }
    }
    std::string pids;
    for (long pid : holders.empty() ? lockers : holders) {
        if (!pids.empty()) pids += ", ";
        pids += std::to_string(pid);
    }
    return pids;
}

namespace {

// ---- a stock script's transaction on the file it replaced (docs/SECURITY.md, B2) --------------------
//
// A stock script that reclaims runs `sed -i`, which renames a new file over the path, while it keeps the
// flock of the old inode, and then appends its lines to the new one. Between the two the new inode is
// unlocked: a claim that locks it reads a file its owner is still writing. Such a transaction shows in
// /proc/locks as a FLOCK WRITE lock (or a waiter for one) on an inode of our device other than ours,
// held by a process that has "<our path> (deleted)" open. /proc/locks is read at an exclusive open only
// where such a writer can exist ("When to look", below); the processes are looked at only for a lock of
// another inode of our device, and a lock found to be some other file's is not looked at again.

// A write flock (held or waited for) on another inode of the device: "1: FLOCK  ADVISORY  WRITE 1234
// 08:01:5678 0 EOF", "1: -> FLOCK ...".
struct ForeignLock {
    long pid = 0;
    unsigned long long inode = 0;
};

// Lines of `text` that lock an inode of device "<major>:<minor>:" (`dev`) other than `inode`.
std::vector<ForeignLock> foreign_write_flocks(const std::string& text, const char* dev, unsigned long long inode) {
    std::vector<ForeignLock> found;
    const std::size_t dev_len = std::strlen(dev);
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        const char* line = text.c_str() + pos;
        const std::size_t len = end - pos;
        pos = end + 1;
        // cheap filters first: most hosts hold POSIX locks and flocks of other devices
        const char* flock_at = static_cast<const char*>(memmem(line, len, "FLOCK", 5));
        if (flock_at == nullptr) continue;
        const char* dev_at = static_cast<const char*>(memmem(line, len, dev, dev_len));
        if (dev_at == nullptr || dev_at == line || dev_at[-1] != ' ') continue;
        char rw[16];
        long pid = 0;
        unsigned long long ino = 0;
        if (std::sscanf(flock_at, "FLOCK %*15s %15s %ld", rw, &pid) != 2 || std::strcmp(rw, "WRITE") != 0) continue;
        if (std::sscanf(dev_at + dev_len, "%llu", &ino) != 1 || ino == inode || pid <= 0) continue;
        found.push_back({pid, ino});
    }
    return found;
}

// The descriptor the stock script locks: `( flock -x 200; ... ) 200<> $coordination_file`. The stock
// script is the one writer that replaces the file (ours never do), so it is the one looked for.
constexpr const char* kStockScriptFd = "200";

// The inode of descriptor 200 of process `pid` (its /proc name) when it is a deleted copy of our file
// ("<path> (deleted)", `deleted_link`), else 0: one readlink for most processes.
unsigned long long copy_inode(const char* pid, const std::string& deleted_link) noexcept {
    char entry[sizeof "/proc//fd/" + NAME_MAX + 8];
    std::snprintf(entry, sizeof entry, "/proc/%s/fd/%s", pid, kStockScriptFd);
    char target[PATH_MAX];
    const ssize_t n = readlink(entry, target, sizeof target);
    if (n != static_cast<ssize_t>(deleted_link.size()) ||
        deleted_link.compare(0, deleted_link.size(), target, static_cast<std::size_t>(n)) != 0)
        return 0;
    struct statx st{};
    return statx(AT_FDCWD, entry, AT_STATX_SYNC_AS_STAT, STATX_INO, &st) == 0 ? st.stx_ino : 0;
}

// Who holds one of `locks` on a deleted copy of our file, as the stock script holds it: on descriptor
// 200 of the locker (`flock -x 200`, while it runs or waits) or, once the locker has exited, which it
// does at once, of the subshell that forked it (and of the commands that subshell runs, each for a
// moment). That subshell's pid is below the locker's by as many pids as the host handed out between
// the two forks, any number on a busy host, so every process in /proc is asked: one readlink each,
// paid once for locks of other files (remembered as such). 0: other files' locks, or a holder we
// cannot see (another user's descriptors are hidden).
// `any`: whichever copy its descriptor 200 is open on, `locks` aside (where /proc/locks cannot show them).
long deleted_copy_holder(const std::vector<ForeignLock>& locks, const std::string& deleted_link,
                         bool any = false) noexcept {
    DIR* proc = opendir("/proc");
    if (proc == nullptr) return 0;
    long holder = 0;
    while (holder == 0) {
        const dirent* e = readdir(proc);
        if (e == nullptr) break;
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;  // not a process's directory (its pid)
        const unsigned long long inode = copy_inode(e->d_name, deleted_link);
        if (inode != 0 && any) holder = std::strtol(e->d_name, nullptr, 10);
        for (const ForeignLock& lock : locks) {
            if (inode != 0 && inode == lock.inode) holder = std::strtol(e->d_name, nullptr, 10);
        }
    }
    closedir(proc);
    return holder;
}

// Locks already found to be some other file's: (locker pid, inode). Bounded; forgotten when full. Per
// thread, like the memo below: no lock that a fork() in another thread could leave held in the child.
thread_local std::set<std::pair<long, unsigned long long>> t_unrelated_locks;

// When to look. Reading /proc/locks is not free: the kernel takes its file-lock lock for writing
// (percpu_down_write, an RCU grace period: milliseconds, and every flock(2) of the host waits
// meanwhile). So it is read only where such a writer can exist (docs/design.md §5.2 has the proof):
//
//   * a writer that writes the inode W the path names without holding W's lock opened the path before
//     W was put there (had it opened it later, it would have opened and locked W), so W is young. The
//     stock script's `sed -i` renames its copy in as soon as it has written it, and we create the file
//     where it is: W came at its birth (statx btime) or milliseconds after. A stock transaction ends in milliseconds to
//     seconds; an inode born more than kYoungFileS ago is not looked at, a stock script hung that long is not waited
//     for.
//   * such a writer is in /proc/locks, holding its copy's lock or waiting for it, from kFlockGapMs after
//     it opened the path at the latest (the stock script's `flock -x 200` is a fork and exec after the
//     open: milliseconds; kFlockGapMs bounds that and sed's run with a wide margin, for a loaded or
//     swapping host), until it has written its last byte.
//     So one look that finds none, taken kFlockGapMs after W's birth or later, shows (assuming no stock script
//     is stopped longer than that between its open and its flock: docs/design.md §5.2) that none is left and none can
//     come: a later one would have had to open the path before W came, and would have been in that look. W is then
//     settled for good: this thread does not look again, and the look is recorded on W itself (the
//     extended attribute kSettledAttr, the btime of the inode it vouches for), so that other processes,
//     a fresh flink-gpu-discovery each time, do not look either. A copy or a new file has no such
//     attribute, or one with another btime, and is looked at.
//   * a look at a W younger than that proves nothing about a writer still between its open and its
//     flock: this thread looks again after kRecheckMs (at most once a second, as before settling existed).
constexpr std::int64_t kYoungFileS = 60;
constexpr std::int64_t kFlockGapMs = 5000;
constexpr std::int64_t kRecheckMs = 1000;
constexpr const char* kSettledAttr = "user.flink-gpu.settled";

std::atomic<std::uint64_t> g_proc_locks_reads{0};

long find_replaced_copy_writer(int fd, const struct statx& locked, bool* looked);

struct CheckedInode {
    std::uint32_t dev_major = 0, dev_minor = 0;
    std::uint64_t ino = 0;
    std::int64_t btime_sec = 0;  // a new file that got a freed inode number is another file
    std::uint32_t btime_nsec = 0;
    std::int64_t at_ms = 0;
    bool valid = false;
    bool settled = false;  // looked at kFlockGapMs after its birth or later: never again

    bool same_file(const CheckedInode& o) const {
        return dev_major == o.dev_major && dev_minor == o.dev_minor && ino == o.ino && btime_sec == o.btime_sec &&
               btime_nsec == o.btime_nsec;
    }
};

thread_local CheckedInode t_checked;

// How long ago the inode was born, in ms; -1 without a birth time (a filesystem that keeps none: every
// inode counts as young, none is ever settled). Not the change time instead: asking for it makes the
// kernel (multigrain timestamps) stamp the next write finely, which costs every claim.
std::int64_t age_ms(const struct statx& st) {
    if ((st.stx_mask & STATX_BTIME) == 0) return -1;
    timespec wall{};
    clock_gettime(CLOCK_REALTIME, &wall);
    return (static_cast<std::int64_t>(wall.tv_sec) - st.stx_btime.tv_sec) * 1000 +
           (static_cast<std::int64_t>(wall.tv_nsec) - static_cast<std::int64_t>(st.stx_btime.tv_nsec)) / 1000000;
}

// kSettledAttr's value for an inode: its birth time.
std::string settled_value(const CheckedInode& inode) {
    char value[48];
    std::snprintf(value, sizeof value, "%lld.%09u", static_cast<long long>(inode.btime_sec), inode.btime_nsec);
    return value;
}

// Whether the locked inode carries the record of a settling look at itself.
bool recorded_settled(int fd, const CheckedInode& inode) {
    char value[48];
    const ssize_t n = fgetxattr(fd, kSettledAttr, value, sizeof value);
    return n > 0 && settled_value(inode) == std::string(value, static_cast<std::size_t>(n));
}

// The pid of a process in a transaction on a copy of `path` replaced by another file (the stock
// script's `sed -i`), found from the locked descriptor `fd` of the inode the path names now; 0 when
// there is none (or when there cannot be one, above).
}  // namespace

long replaced_copy_writer(int fd, const struct statx& locked) {
    const std::int64_t age = age_ms(locked);
    if (age > kYoungFileS * 1000) return 0;
    // born in the future (the clock was set back): young, and never settled
    const bool known_age = (locked.stx_mask & STATX_BTIME) != 0 && age >= 0;
    CheckedInode now;
    now.dev_major = locked.stx_dev_major;
    now.dev_minor = locked.stx_dev_minor;
    now.ino = locked.stx_ino;
    if ((locked.stx_mask & STATX_BTIME) != 0) {
        now.btime_sec = locked.stx_btime.tv_sec;
        now.btime_nsec = locked.stx_btime.tv_nsec;
    }
    now.at_ms = monotonic_ms();
    now.valid = true;
    if (t_checked.valid && t_checked.same_file(now) && (t_checked.settled || now.at_ms - t_checked.at_ms < kRecheckMs))
        return 0;
    if (known_age && recorded_settled(fd, now)) {
        now.settled = true;
        t_checked = now;
        return 0;
    }
    // the age taken before the look: the look is at least that late
    now.settled = known_age && age >= kFlockGapMs;
    bool looked = false;
    const long writer = find_replaced_copy_writer(fd, locked, &looked);
    if (writer != 0 || !looked) {
        t_checked.valid = false;
        return writer;
    }
    t_checked = now;
    if (now.settled) {
        const std::string value = settled_value(now);
        // best effort: where the filesystem keeps no user attributes, each process looks once
        (void)fsetxattr(fd, kSettledAttr, value.data(), value.size(), 0);
    }
    return 0;
}

namespace {

// /proc/locks in one read() where it fits: each read() of it takes the kernel's lock again. False when
// it cannot be read (then nothing was looked at).
bool read_proc_locks(std::string* text) {
    text->clear();
    int fd = open("/proc/locks", O_RDONLY | O_CLOEXEC);
    if (fd < 0) return false;
    g_proc_locks_reads.fetch_add(1, std::memory_order_relaxed);
    std::size_t size = 0;
    bool ok = true;
    text->resize(64u << 10);
    for (;;) {
        const ssize_t n = read(fd, &(*text)[size], text->size() - size);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) ok = false;
        if (n <= 0) break;
        size += static_cast<std::size_t>(n);
        if (size < text->size()) break;  // a seq_file read fills the buffer unless it reached the end
        if (text->size() >= (4u << 20)) {
            ok = false;  // not all of it: what is beyond was not looked at
            break;
        }
        text->resize(text->size() * 2);
    }
    close(fd);
    text->resize(size);
    return ok;
}

// `*looked`: /proc/locks was read whole (a writer, had there been one, would show).
long find_replaced_copy_writer(int fd, const struct statx& locked, bool* looked) {
    char dev[32];
    std::snprintf(dev, sizeof dev, "%02x:%02x:", locked.stx_dev_major, locked.stx_dev_minor);
    std::string text;
    *looked = read_proc_locks(&text);
    const std::vector<ForeignLock> locks =
        foreign_write_flocks(text, dev, static_cast<unsigned long long>(locked.stx_ino));
    // In a pid namespace of its own, /proc/locks leaves out every lock whose locker is none of the
    // namespace's processes, and so the lock of a stock transaction whose `flock` has exited: there the
    // transaction is looked for by its descriptor alone, in every process of the namespace.
    std::uint64_t ns = 0;
    const bool locks_shown = read_own_pid_namespace_inode(&ns) && ns == kInitialPidNamespace;
    if (locks.empty() && locks_shown) return 0;
    // the copy that `sed -i` replaced had our file's name: its descriptors read "<name> (deleted)"
    char link[PATH_MAX];
    const std::string self = "/proc/self/fd/" + std::to_string(fd);
    const ssize_t n = readlink(self.c_str(), link, sizeof link);
    if (n <= 0 || static_cast<std::size_t>(n) >= sizeof link) {
        *looked = false;
        return 0;
    }
    const std::string deleted_link = std::string(link, static_cast<std::size_t>(n)) + " (deleted)";
    if (!locks_shown) return deleted_copy_holder(locks, deleted_link, true);
    std::vector<ForeignLock> unknown;
    for (const ForeignLock& lock : locks) {
        if (t_unrelated_locks.count({lock.pid, lock.inode}) == 0) unknown.push_back(lock);
    }
    if (unknown.empty()) return 0;
    if (const long holder = deleted_copy_holder(unknown, deleted_link)) return holder;
    for (const ForeignLock& lock : unknown) {
        if (t_unrelated_locks.size() >= 256) t_unrelated_locks.clear();
        t_unrelated_locks.insert({lock.pid, lock.inode});
    }
    return 0;
}
}  // namespace

std::uint64_t proc_locks_reads() noexcept { return g_proc_locks_reads.load(std::memory_order_relaxed); }

}  // namespace coordination
}  // namespace flinkgpu
