// The coordination file (SPEC 5.2); see coordination.hpp for the rules and the reasons behind them.
#include "coordination.hpp"

#include "gpu_index.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>
#include <map>
#include <new>
#include <set>
#include <utility>

namespace flinkgpu {
namespace coordination {
namespace {

// A coordination file holds one short line per GPU; anything this large is not one.
constexpr std::size_t kMaxFileSize = 16u << 20;
// Short enough not to allocate (small-string optimisation), so reporting them cannot throw.
constexpr const char* kOutOfMemory = "out of memory";
constexpr const char* kInternalError = "internal error";

// strerror_r comes in a GNU (returns char*) and an XSI (returns int) flavour; accept either.
inline const char* pick_strerror(int /*xsi_result*/, const char* buf) { return buf; }
inline const char* pick_strerror(const char* gnu_result, const char* /*buf*/) { return gnu_result; }

std::string errno_text(int err) {
    char buf[256];
    buf[0] = '\0';
    return pick_strerror(strerror_r(err, buf, sizeof buf), buf);
}

Status make_status(Code code, std::string message, int err = 0) {
    Status s;
    s.code = code;
    s.sys_errno = err;
    s.message = std::move(message);
    return s;
}

Status os_error(int err, const std::string& what, const std::string& path) {
    return make_status(Code::kOsError, what + " coordination file " + path + ": " + errno_text(err), err);
}

std::int64_t monotonic_ms() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

void sleep_ms(std::int64_t ms) {
    timespec ts{static_cast<time_t>(ms / 1000), static_cast<long>((ms % 1000) * 1000000)};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

// statx, not stat/fstat: the wheel targets manylinux_2_28, where stat@GLIBC_2.33 does not exist.
int statx_path(const std::string& path, struct statx* out) {
    return statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW | AT_STATX_SYNC_AS_STAT,
                 STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_UID | STATX_INO, out);
}

int statx_fd(int fd, struct statx* out) {
    return statx(fd, "", AT_EMPTY_PATH | AT_STATX_SYNC_AS_STAT,
                 STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_UID | STATX_INO, out);
}

bool same_inode(const struct statx& a, const struct statx& b) {
    return a.stx_ino == b.stx_ino && a.stx_dev_major == b.stx_dev_major && a.stx_dev_minor == b.stx_dev_minor;
}

const char* file_kind(std::uint16_t mode) {
    switch (mode & S_IFMT) {
        case S_IFLNK: return "a symbolic link";
        case S_IFDIR: return "a directory";
        case S_IFIFO: return "a FIFO";
        case S_IFSOCK: return "a socket";
        case S_IFCHR: return "a character device";
        case S_IFBLK: return "a block device";
        default: return "not a regular file";
    }
}

// Refuses what is not a plain, singly linked regular file. Nothing behind it is read or written.
Status check_file_type(const struct statx& st, const std::string& path) {
    const std::uint16_t mode = st.stx_mode;
    if (!S_ISREG(mode)) {
        const int err = S_ISLNK(mode) ? ELOOP : S_ISDIR(mode) ? EISDIR : EINVAL;
        return make_status(Code::kOsError,
                           "Refusing to use the coordination file " + path + ": it is " + file_kind(mode) +
                               ", not a regular file (" + errno_text(err) + "). Choose a regular file "
                               "as the coordination file.",
                           err);
    }
    // A coordination file is never hard-linked (the stock script and we only create it or replace it
    // by rename). A second link may be a trap pointing at another user's file, which we would rewrite.
    if (st.stx_nlink > 1) {
        return make_status(Code::kOsError,
                           "Refusing to use the coordination file " + path + ": it has " +
                               std::to_string(st.stx_nlink) + " hard links, so it may be another file in "
                               "disguise (" + errno_text(EMLINK) + "). Remove it; it is recreated on the "
                               "next claim.",
                           EMLINK);
    }
    return {};
}

// Adds who owns the file and its mode to a permission error, since that is what the operator must fix.
Status permission_error(int err, const std::string& what, const std::string& path) {
    Status s = os_error(err, what, path);
    struct statx st {};
    if (statx_path(path, &st) == 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.stx_mode & 07777));
        s.message += " (owned by uid " + std::to_string(st.stx_uid) + ", mode " + mode +
                     "). Every worker of this host must be able to read and write it: give it group write "
                     "permission for the workers' group, or choose a coordination file they can all write.";
    }
    return s;
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

// An open, flock()ed coordination file. Unlocks explicitly before closing: a child forked meanwhile
// shares the open file description, and a plain close would leave the lock held by that child.
class LockedFile {
public:
    LockedFile() = default;
    LockedFile(const LockedFile&) = delete;
    LockedFile& operator=(const LockedFile&) = delete;
    ~LockedFile() { reset(); }

    void reset() {
        if (fd_ >= 0) {
            flock(fd_, LOCK_UN);
            close(fd_);
            fd_ = -1;
        }
    }
    void adopt(int fd) {
        reset();
        fd_ = fd;
    }
    int fd() const { return fd_; }

private:
    int fd_ = -1;
};

enum class Access { kCreate, kWriteExisting, kReadExisting };

// Opens `path` without following a symlink and without blocking on a FIFO, creating it (0644) when asked.
// *fd = -1 with an ok status: the file does not exist and was not to be created.
Status open_file(const std::string& path, Access access, int* fd) {
    *fd = -1;
    const int base = (access == Access::kReadExisting ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY |
                     O_NONBLOCK;
    for (int attempt = 0; attempt < 100; ++attempt) {
        // Looked at before opening, so that a device or FIFO is never opened at all.
        struct statx pre {};
        if (statx_path(path, &pre) == 0) {
            Status st = check_file_type(pre, path);
            if (!st.ok()) return st;
        } else if (errno != ENOENT) {
            const int err = errno;
            return err == EACCES ? permission_error(err, "Cannot access the", path) : os_error(err, "Cannot access the", path);
        }
        // Without O_CREAT first: fs.protected_regular refuses O_CREAT on another user's file in /var/tmp.
        int f = open(path.c_str(), base);
        if (f < 0 && errno == ENOENT && access == Access::kCreate) {
            f = open(path.c_str(), base | O_CREAT | O_EXCL, 0644);
            if (f < 0 && errno == EEXIST) continue;  // created by someone else meanwhile: open theirs
        }
        if (f < 0) {
            const int err = errno;
            if (err == EINTR) continue;
            if (err == ENOENT && access != Access::kCreate) return {};
            if (err == ELOOP) {
                return make_status(Code::kOsError,
                                   "Refusing to use the coordination file " + path + ": it is a symbolic link (" +
                                       errno_text(err) + "). Links are not followed; use the real file's path.",
                                   err);
            }
            if (err == EACCES || err == EPERM) return permission_error(err, "Cannot open the", path);
            return os_error(err, "Cannot open the", path);
        }
        struct statx post {};
        if (statx_fd(f, &post) != 0) {
            const int err = errno;
            close(f);
            return os_error(err, "Cannot inspect the", path);
        }
        Status st = check_file_type(post, path);
        if (!st.ok()) {
            close(f);
            return st;
        }
        const int flags = fcntl(f, F_GETFL);
        if (flags < 0 || fcntl(f, F_SETFL, flags & ~O_NONBLOCK) != 0) {
            const int err = errno;
            close(f);
            return os_error(err, "Cannot configure the", path);
        }
        *fd = f;
        return {};
    }
    return make_status(Code::kOsError, "Cannot open the coordination file " + path +
                                           ": it keeps appearing and disappearing.", EAGAIN);
}

// Opens and locks the file, starting again when the path no longer names the locked inode (a stock
// script's `sed -i` replaces the file while holding the lock on the old one).
Status open_locked(const Options& opts, Access access, LockedFile* out, bool* exists) {
    *exists = false;
    if (opts.path.empty()) return make_status(Code::kInvalidArgument, "The coordination file path is empty.");
    if (opts.path.find('\0') != std::string::npos) {
        return make_status(Code::kInvalidArgument, "The coordination file path contains a NUL byte.");
    }
    if (opts.timeout_ms < 0) {
        return make_status(Code::kInvalidArgument, "The lock timeout must not be negative, got " +
                                                       std::to_string(opts.timeout_ms) + " ms.");
    }
    const std::string& path = opts.path;
    const int op = (access == Access::kReadExisting ? LOCK_SH : LOCK_EX) | LOCK_NB;
    const std::int64_t start = monotonic_ms();
    // Saturated: a huge timeout ("for ever") must not overflow into a deadline already passed.
    const std::int64_t deadline =
        opts.timeout_ms > INT64_MAX - start ? INT64_MAX : start + opts.timeout_ms;
    int replaced = 0;
    for (;;) {
        int fd = -1;
        Status st = open_file(path, access, &fd);
        if (!st.ok()) return st;
        if (fd < 0) return {};  // absent and not to be created
        out->adopt(fd);
        std::int64_t backoff = 1;
        for (;;) {
            if (flock(fd, op) == 0) break;
            const int err = errno;
            if (err == EINTR) continue;
            if (err != EWOULDBLOCK) return os_error(err, "Cannot lock the", path);
            const std::int64_t now = monotonic_ms();
            if (now >= deadline) {
                struct statx locked {};
                std::string holders;
                if (statx_fd(fd, &locked) == 0) holders = lock_holders(locked);
                char secs[32];
                std::snprintf(secs, sizeof secs, "%.10g", static_cast<double>(opts.timeout_ms) / 1000.0);
                return make_status(Code::kTimeout,
                                   "Timed out after " + std::string(secs) + " s waiting for the lock on the "
                                   "coordination file " + path +
                                       (holders.empty() ? std::string(" (held by another process)")
                                                        : " (held by pid " + holders + ")") +
                                       ". Another worker may hang while claiming GPUs.",
                                   ETIMEDOUT);
            }
            sleep_ms(std::min(backoff, deadline - now));
            backoff = std::min<std::int64_t>(backoff * 2, 25);
        }
        struct statx locked {}, named {};
        if (statx_fd(fd, &locked) != 0) {
            const int err = errno;
            return os_error(err, "Cannot inspect the", path);
        }
        const bool path_ok = statx_path(path, &named) == 0 && same_inode(locked, named);
        if (path_ok) {
            Status type = check_file_type(locked, path);  // links may have been added before we locked
            if (!type.ok()) return type;
            *exists = true;
            return {};
        }
        out->reset();
        ++replaced;
        if (replaced >= 3 && monotonic_ms() >= deadline) {
            return make_status(Code::kTimeout,
                               "Timed out waiting for the coordination file " + path +
                                   ": it was replaced by another file " + std::to_string(replaced) +
                                   " times while we waited for its lock.",
                               ETIMEDOUT);
        }
    }
}

Status read_all(int fd, const std::string& path, std::string* out) {
    out->clear();
    char buf[8192];
    off_t offset = 0;
    for (;;) {
        ssize_t n = pread(fd, buf, sizeof buf, offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            const int err = errno;
            return os_error(err, "Cannot read the", path);
        }
        if (n == 0) return {};
        out->append(buf, static_cast<std::size_t>(n));
        offset += n;
        if (out->size() > kMaxFileSize) {
            return make_status(Code::kOsError,
                               "The coordination file " + path + " is larger than " +
                                   std::to_string(kMaxFileSize >> 20) + " MiB, so it is not a coordination "
                                   "file (" + errno_text(EFBIG) + ").",
                               EFBIG);
        }
    }
}

Status pwrite_all(int fd, const char* data, std::size_t size, off_t offset) {
    while (size > 0) {
        ssize_t n = pwrite(fd, data, size, offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            return make_status(Code::kOsError, "", errno);
        }
        data += n;
        size -= static_cast<std::size_t>(n);
        offset += n;
    }
    return {};
}

// Rewrites the locked file in place (same inode). The data concerns processes of this boot only, so
// it is not fsync()ed. Appends when only lines were added; restores the old bytes if a write fails.
// A shrinking rewrite is written padded with newlines to the old size, in one write, before the
// truncate: a process killed between the two leaves blank lines behind, never a fragment of an old
// line that could read as "<index> <pid>" of some live process.
Status write_in_place(int fd, const std::string& path, const std::string& old_text, const std::string& new_text) {
    const bool append = new_text.size() >= old_text.size() && new_text.compare(0, old_text.size(), old_text) == 0;
    Status st;
    if (append) {
        st = pwrite_all(fd, new_text.data() + old_text.size(), new_text.size() - old_text.size(),
                        static_cast<off_t>(old_text.size()));
    } else if (new_text.size() < old_text.size()) {
        std::string padded = new_text;
        padded.resize(old_text.size(), '\n');
        st = pwrite_all(fd, padded.data(), padded.size(), 0);
    } else {
        st = pwrite_all(fd, new_text.data(), new_text.size(), 0);
    }
    if (st.ok() && new_text.size() < old_text.size() && ftruncate(fd, static_cast<off_t>(new_text.size())) != 0) {
        st = make_status(Code::kOsError, "", errno);
    }
    if (st.ok()) return {};
    const int err = st.sys_errno;
    if (pwrite_all(fd, old_text.data(), old_text.size(), 0).ok()) {
        (void)ftruncate(fd, static_cast<off_t>(old_text.size()));
    }
    return os_error(err, "Cannot write the", path);
}

// ---- parsing -------------------------------------------------------------------------------------

enum class LineKind { kEntry, kBlank, kBad };

struct Line {
    LineKind kind = LineKind::kBad;
    std::size_t number = 0;  // 1-based
    std::string raw;         // without the '\n'
    std::string word;   // kBad: the first word, which blocks that index
    Entry entry;        // kEntry
    bool keep = true;
};

bool is_blank_char(char c) { return c == ' ' || c == '\t' || c == '\r'; }

// An index as NVML/nvidia-smi prints it: printable ASCII without spaces.
bool valid_index(const std::string& s) {
    if (s.empty()) return false;
    for (unsigned char c : s) {
        if (c <= 0x20 || c >= 0x7f) return false;
    }
    return true;
}

bool parse_decimal(const std::string& s, std::uint64_t max, std::uint64_t* out) {
    if (s.empty() || s.size() > 20) return false;
    std::uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

// `<index> <pid>[ <start time>]`: the index starts the line and is followed by a space (what the stock
// script's `grep "^$i "` finds); the rest is split on blanks (its `awk '{print $2}'`).
Line parse_line(std::string raw, std::size_t number) {
    Line line;
    line.number = number;
    line.raw = std::move(raw);
    const std::string& s = line.raw;
    if (std::all_of(s.begin(), s.end(), is_blank_char)) {
        line.kind = LineKind::kBlank;
        return line;
    }
    std::vector<std::string> words;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
        std::size_t j = i;
        while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
        if (j > i) words.push_back(s.substr(i, j - i));
        i = j;
    }
    line.kind = LineKind::kBad;
    line.word = words.empty() ? std::string() : words[0];
    const std::size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || words.size() < 2 || words.size() > 3) return line;
    if (s.compare(0, space, words[0]) != 0 || !valid_index(words[0])) return line;
    std::uint64_t pid = 0, start = 0;
    if (!parse_decimal(words[1], INT_MAX, &pid) || pid == 0) return line;
    if (words.size() == 3 && !parse_decimal(words[2], UINT64_MAX, &start)) return line;
    line.kind = LineKind::kEntry;
    line.entry.line_number = number;
    line.entry.index = words[0];
    line.entry.pid = static_cast<pid_t>(pid);
    line.entry.has_start_time = words.size() == 3;
    line.entry.start_time = start;
    return line;
}

std::vector<Line> parse_file(const std::string& text) {
    std::vector<Line> lines;
    std::size_t pos = 0, number = 0;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        lines.push_back(parse_line(text.substr(pos, end - pos), ++number));
        pos = end + 1;
    }
    return lines;
}

std::string serialize(const std::vector<Line>& lines) {
    std::string out;
    for (const Line& l : lines) {
        if (!l.keep) continue;
        out += l.raw;
        out += '\n';
    }
    return out;
}

std::vector<BadLine> bad_lines(const std::vector<Line>& lines) {
    std::vector<BadLine> out;
    for (const Line& l : lines) {
        if (l.kind == LineKind::kBad) out.push_back(BadLine{l.number, l.raw});
    }
    return out;
}

// ---- liveness ------------------------------------------------------------------------------------

struct ProcInfo {
    bool exists = false;
    bool has_start_time = false;
    std::uint64_t start_time = 0;
};

// Reads /proc/<pid>/stat: a zombie (or dying) process holds nothing. Falls back to kill(pid, 0) when
// /proc does not show the process (not mounted, or hidepid for another user's process).
ProcInfo probe_process(pid_t pid) {
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

// Whether `e` was written for the process `p` describes: where both start times are known they
// agree (else the pid was reused).
bool same_process(const Entry& e, const ProcInfo& p) {
    return !e.has_start_time || !p.has_start_time || p.start_time == e.start_time;
}

class Liveness {
public:
    const ProcInfo& get(pid_t pid) {
        auto it = cache_.find(pid);
        if (it == cache_.end()) {
            const pid_t self = getpid();
            it = cache_.emplace(pid, pid == self ? probe_self(self) : probe_process(pid)).first;
        }
        return it->second;
    }
    // Alive: the pid exists and is still the process the entry was written for.
    bool alive(const Entry& e) {
        const ProcInfo& p = get(e.pid);
        return p.exists && same_process(e, p);
    }

private:
    std::map<pid_t, ProcInfo> cache_;
};

void mark_alive(std::vector<Line>* lines, Liveness* live) {
    for (Line& l : *lines) {
        if (l.kind == LineKind::kEntry) l.entry.alive = live->alive(l.entry);
    }
}

// ---- choosing ------------------------------------------------------------------------------------

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) {
        if (!out.empty()) out += ", ";
        out += s;
    }
    return out;
}

Status validate_indices(const std::vector<std::string>& indices, std::vector<std::string>* out) {
    std::set<std::string> seen;
    for (const std::string& s : indices) {
        if (!valid_index(s)) {
            std::string shown;
            for (unsigned char c : s) {
                if (c >= 0x20 && c < 0x7f) {
                    shown += static_cast<char>(c);
                } else {
                    char hex[8];
                    std::snprintf(hex, sizeof hex, "\\x%02x", c);
                    shown += hex;
                }
            }
            return make_status(Code::kInvalidArgument,
                               "Invalid GPU index '" + shown + "': an index is a non-empty word of printable "
                               "ASCII without spaces, as nvidia-smi prints it (e.g. 0).");
        }
        if (seen.insert(s).second) out->push_back(s);
    }
    sort_indices(out);
    return {};
}

Status validate_owner(pid_t owner) {
    if (owner <= 0) {
        return make_status(Code::kInvalidArgument,
                           "Invalid owner pid " + std::to_string(owner) + ": it must be a positive process id.");
    }
    return {};
}

// `<index> <pid>\t<start time>`: a tab, not a space, before the start time. The stock script deletes a
// reclaimed GPU's line with the unanchored `sed "/<index> /d"`, so "3 12341 5555" would vanish when it
// reclaims GPU 1; its `awk '{print $2}'` splits on tabs as well, so it still reads the pid.
std::string new_line(const std::string& index, pid_t owner, const ProcInfo& info) {
    std::string s = index + " " + std::to_string(owner);
    if (info.has_start_time) s += "\t" + std::to_string(info.start_time);
    return s;
}

// Opens and locks the file for `access`, then reads it. `*exists` is false (and nothing is read)
// when an existing file was asked for and there is none.
Status open_and_read(const Options& opts, Access access, LockedFile* file, bool* exists, std::string* text) {
    Status st = open_locked(opts, access, file, exists);
    if (!st.ok() || !*exists) return st;
    return read_all(file->fd(), opts.path, text);
}

ClaimResult claim_impl(const Options& opts, pid_t owner, const std::vector<std::string>& existing_in,
                       std::size_t amount) {
    ClaimResult r;
    if (!(r.status = validate_owner(owner)).ok()) return r;
    std::vector<std::string> existing;
    if (!(r.status = validate_indices(existing_in, &existing)).ok()) return r;
    if (amount == 0) return r;

    Liveness live;
    const ProcInfo owner_info = live.get(owner);
    if (!owner_info.exists) {
        r.status = make_status(Code::kInvalidArgument, "Cannot claim GPUs for process " + std::to_string(owner) +
                                                           ": it does not exist.");
        return r;
    }
    LockedFile file;
    bool exists = false;
    std::string text;
    if (!(r.status = open_and_read(opts, Access::kCreate, &file, &exists, &text)).ok()) return r;
    std::vector<Line> lines = parse_file(text);
    mark_alive(&lines, &live);
    r.unparsable = bad_lines(lines);

    // What each existing index is: ours, blocked by a line we cannot read, held by a live owner, free, or
    // held by dead owners only (reclaimable).
    std::vector<std::string> held, free_idx, reclaimable;
    std::map<pid_t, std::vector<std::string>> others;
    std::vector<std::string> blocked;
    for (const std::string& idx : existing) {
        bool mine = false, bad = false, mentioned = false;
        pid_t live_other = 0;
        for (const Line& l : lines) {
            if (l.kind == LineKind::kBad && l.word == idx) bad = true;
            if (l.kind != LineKind::kEntry || l.entry.index != idx) continue;
            mentioned = true;
            if (!l.entry.alive) continue;
            if (l.entry.pid == owner && same_process(l.entry, owner_info)) {
                mine = true;
            } else if (live_other == 0) {
                live_other = l.entry.pid;
            }
        }
        if (mine) {
            held.push_back(idx);
        } else if (bad) {
            blocked.push_back(idx);
        } else if (live_other != 0) {
            others[live_other].push_back(idx);
        } else if (!mentioned) {
            free_idx.push_back(idx);
        } else {
            reclaimable.push_back(idx);
        }
    }

    if (held.size() >= amount) {
        r.indices.assign(held.begin(), held.begin() + static_cast<std::ptrdiff_t>(amount));
        return r;
    }
    std::size_t need = amount - held.size();
    std::vector<std::string> take;
    for (const std::string& idx : free_idx) {
        if (need == 0) break;
        take.push_back(idx);
        --need;
    }
    for (const std::string& idx : reclaimable) {
        if (need == 0) break;
        take.push_back(idx);
        r.reclaimed.push_back(idx);
        --need;
    }
    if (need > 0) {
        std::string msg = "Could not get enough GPU resources. Requested " + std::to_string(amount) +
                          ", the host has " + std::to_string(existing.size()) + " GPU" +
                          (existing.size() == 1 ? "" : "s") + (existing.empty() ? "" : " (" + join(existing) + ")");
        std::string holders;
        for (const auto& kv : others) {
            if (!holders.empty()) holders += "; ";
            holders += "pid " + std::to_string(kv.first) + " holds " + join(kv.second);
        }
        if (!held.empty()) msg += "; this process (pid " + std::to_string(owner) + ") holds " + join(held);
        if (!holders.empty()) msg += "; " + holders;
        if (!blocked.empty()) {
            msg += "; " + join(blocked) + (blocked.size() == 1 ? " is" : " are") +
                   " blocked by lines that cannot be parsed";
        }
        msg += ". Coordination file: " + opts.path + ".";
        r.status = make_status(Code::kNotEnough, msg);
        r.reclaimed.clear();
        return r;
    }

    const std::set<std::string> gone(r.reclaimed.begin(), r.reclaimed.end());
    for (Line& l : lines) {
        if (l.kind == LineKind::kEntry && gone.count(l.entry.index) != 0) l.keep = false;
    }
    for (const std::string& idx : take) {
        Line l;
        l.kind = LineKind::kEntry;
        l.raw = new_line(idx, owner, owner_info);
        lines.push_back(std::move(l));
    }
    if (!(r.status = write_in_place(file.fd(), opts.path, text, serialize(lines))).ok()) {
        r.reclaimed.clear();
        return r;
    }
    r.added = take;
    r.indices = held;
    r.indices.insert(r.indices.end(), take.begin(), take.end());
    sort_indices(&r.indices);
    sort_indices(&r.added);
    return r;
}

ReleaseResult release_impl(const Options& opts, pid_t owner, const std::vector<std::string>* only) {
    ReleaseResult r;
    if (!(r.status = validate_owner(owner)).ok()) return r;
    std::set<std::string> wanted;
    if (only != nullptr) {
        std::vector<std::string> v;
        if (!(r.status = validate_indices(*only, &v)).ok()) return r;
        wanted.insert(v.begin(), v.end());
        if (wanted.empty()) return r;
    }
    LockedFile file;
    bool exists = false;
    std::string text;
    if (!(r.status = open_and_read(opts, Access::kWriteExisting, &file, &exists, &text)).ok() || !exists) return r;
    std::vector<Line> lines = parse_file(text);
    std::set<std::string> released;
    for (Line& l : lines) {
        if (l.kind == LineKind::kEntry && l.entry.pid == owner && (only == nullptr || wanted.count(l.entry.index))) {
            l.keep = false;
            released.insert(l.entry.index);
        }
    }
    if (released.empty()) return r;
    if (!(r.status = write_in_place(file.fd(), opts.path, text, serialize(lines))).ok()) return r;
    r.released.assign(released.begin(), released.end());
    sort_indices(&r.released);
    return r;
}

Snapshot snapshot_impl(const Options& opts) {
    Snapshot r;
    LockedFile file;
    std::string text;
    if (!(r.status = open_and_read(opts, Access::kReadExisting, &file, &r.exists, &text)).ok() || !r.exists) return r;
    file.reset();  // liveness is probed after unlocking: the lock only guards the file's bytes
    std::vector<Line> lines = parse_file(text);
    Liveness live;
    mark_alive(&lines, &live);
    for (const Line& l : lines) {
        if (l.kind == LineKind::kEntry) r.entries.push_back(l.entry);
    }
    r.unparsable = bad_lines(lines);
    return r;
}

CleanResult clean_stale_impl(const Options& opts) {
    CleanResult r;
    LockedFile file;
    bool exists = false;
    std::string text;
    if (!(r.status = open_and_read(opts, Access::kWriteExisting, &file, &exists, &text)).ok() || !exists) return r;
    std::vector<Line> lines = parse_file(text);
    Liveness live;
    mark_alive(&lines, &live);
    r.unparsable = bad_lines(lines);
    std::vector<Entry> removed;
    for (Line& l : lines) {
        if (l.kind == LineKind::kEntry && !l.entry.alive) {
            l.keep = false;
            removed.push_back(l.entry);
        }
    }
    if (removed.empty()) return r;
    if (!(r.status = write_in_place(file.fd(), opts.path, text, serialize(lines))).ok()) return r;
    r.removed = std::move(removed);
    return r;
}

// Runs `body` so that nothing escapes: std::bad_alloc (or anything else) becomes a Status.
template <typename Result, typename Body>
Result guarded(Body body) noexcept {
    Result r;
    try {
        return body();
    } catch (const std::bad_alloc&) {
        r.status.code = Code::kOutOfMemory;
        r.status.sys_errno = ENOMEM;
        r.status.message = kOutOfMemory;
    } catch (...) {
        r.status.code = Code::kInternal;
        r.status.message = kInternalError;
    }
    return r;
}

}  // namespace

ClaimResult claim(const Options& opts, pid_t owner, const std::vector<std::string>& existing_indices,
                  std::size_t amount) noexcept {
    return guarded<ClaimResult>([&] { return claim_impl(opts, owner, existing_indices, amount); });
}

ReleaseResult release(const Options& opts, pid_t owner) noexcept {
    return guarded<ReleaseResult>([&] { return release_impl(opts, owner, nullptr); });
}

ReleaseResult release_indices(const Options& opts, pid_t owner, const std::vector<std::string>& indices) noexcept {
    return guarded<ReleaseResult>([&] { return release_impl(opts, owner, &indices); });
}

Snapshot snapshot(const Options& opts) noexcept {
    return guarded<Snapshot>([&] { return snapshot_impl(opts); });
}

CleanResult clean_stale(const Options& opts) noexcept {
    return guarded<CleanResult>([&] { return clean_stale_impl(opts); });
}

bool process_start_time(pid_t pid, std::uint64_t* start_time) noexcept {
    const ProcInfo info = probe_process(pid);
    if (!info.exists || !info.has_start_time) return false;
    *start_time = info.start_time;
    return true;
}

}  // namespace coordination
}  // namespace flinkgpu
