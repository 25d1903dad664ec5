// The coordination file on disk (docs/design.md §5.1, §5.2); see coordination/file.hpp.
#include "coordination/file.hpp"
#include "coordination/proc_locks.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
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

// A coordination file holds one short line per GPU; anything this large is not one.
constexpr std::size_t kMaxFileSize = 16u << 20;

bool ends_with(const std::string& text, const char* suffix) {
    const std::size_t n = std::strlen(suffix);
    return text.size() >= n && text.compare(text.size() - n, n, suffix) == 0;
}

// What the file at `path` is to its readers, for messages: the files beside a coordination file are
// named by their suffix (docs/design.md §9.3, §9.4), so an error about them never calls them the
// coordination file.
std::string role(const std::string& path) {
    if (ends_with(path, kLeaseSuffix)) return "lease file";
    if (ends_with(path, kBindingsSuffix)) return "bindings file";
    if (ends_with(path, kTopologySuffix)) return "topology file";
    return "coordination file";
}

Status os_error(int err, const std::string& what, const std::string& path) {
    return failure(StatusCode::kOsError, what + " " + role(path) + " " + path + ": " + errno_text(err), err);
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

// With the size: read_all stops at the size found under the lock instead of reading once more for EOF.
int statx_fd(int fd, struct statx* out) {
    return statx(fd, "", AT_EMPTY_PATH | AT_STATX_SYNC_AS_STAT,
                 STATX_TYPE | STATX_MODE | STATX_NLINK | STATX_UID | STATX_INO | STATX_SIZE | STATX_BTIME, out);
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
        return failure(StatusCode::kOsError,
                       "Refusing to use the " + role(path) + " " + path + ": it is " + file_kind(mode) +
                           ", not a regular file (" + errno_text(err) +
                           "). Choose a regular file "
                           "as the " +
                           role(path) + ".",
                       err);
    }
    // A coordination file is never hard-linked (the stock script and we only create it or replace it
    // by rename). A second link may be a trap pointing at another user's file, which we would rewrite.
    if (st.stx_nlink > 1) {
        return failure(StatusCode::kOsError,
                       "Refusing to use the " + role(path) + " " + path + ": it has " + std::to_string(st.stx_nlink) +
                           " hard links, so it may be another file in "
                           "disguise (" +
                           errno_text(EMLINK) +
                           "). Remove it; it is recreated on the "
                           "next claim.",
                       EMLINK);
    }
    return {};
}

// The file a companion of the coordination file serves: "<x>.lease" <x>, "<x>.bindings" <x>, "<x>.topology" <x>;
// empty for a
// coordination file.
std::string served_file(const std::string& path) {
    for (const char* suffix : {kLeaseSuffix, kBindingsSuffix, kTopologySuffix}) {
        if (ends_with(path, suffix) && path.size() > std::strlen(suffix))
            return path.substr(0, path.size() - std::strlen(suffix));
    }
    return std::string();
}

}  // namespace

std::vector<std::string> companion_paths(const std::string& path) {
    const std::string bindings = path + kBindingsSuffix;
    return {path + kLeaseSuffix, bindings, bindings + kLeaseSuffix, path + kTopologySuffix};
}

Status check_companion_owner(const struct statx& st, const std::string& path) {
    const std::string served = served_file(path);
    if (served.empty()) return {};
    struct statx anchor{};
    const bool anchored = statx_path(served, &anchor) == 0;
    const uid_t owner = anchored ? anchor.stx_uid : geteuid();
    const bool foreign = st.stx_uid != 0 && st.stx_uid != owner;
    const bool others_write = (st.stx_mode & S_IWOTH) != 0;
    if (!foreign && !others_write) return {};
    char mode[8];
    std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.stx_mode & 07777));
    const std::string trusted = owner == 0
                                    ? std::string("not by root")
                                    : "neither by root nor by " +
                                          (anchored ? "the owner of " + served : std::string("this process's user")) +
                                          " (uid " + std::to_string(owner) + ")";
    return failure(StatusCode::kOsError,
                   "Refusing to use the " + role(path) + " " + path + ": it is " +
                       (foreign ? "owned by uid " + std::to_string(st.stx_uid) + ", " + trusted +
                                      (others_write ? ", and writable by every user" : "")
                                : std::string("writable by every user")) +
                       " (mode " + mode +
                       "), so another local user may have put it there to speak for the GPUs' holders. Remove it "
                       "if it is nobody's (it is created again when needed), and create the coordination file's "
                       "companions before the workers start (docs/SECURITY.md, Permissions).",
                   EACCES);
}

Status check_companion_owner(const std::string& path) {
    struct statx st{};
    if (statx_path(path, &st) != 0) return {};
    return check_companion_owner(st, path);
}

namespace {

// Adds who owns the file and its mode to a permission error, since that is what the operator must fix.
Status permission_error(int err, const std::string& what, const std::string& path) {
    Status s = os_error(err, what, path);
    struct statx st{};
    if (statx_path(path, &st) == 0) {
        char mode[8];
        std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.stx_mode & 07777));
        s.message += " (owned by uid " + std::to_string(st.stx_uid) + ", mode " + mode +
                     "). Every worker of this host must be able to read and write it: give it group write "
                     "permission for the workers' group, or choose a coordination file they can all write.";
    }
    return s;
}

// Opens `path` without following a symlink and without blocking on a FIFO, creating it (0644) when asked;
// the descriptor stays O_NONBLOCK. *fd = -1 with an ok status: the file does not exist and was not to be
// created.
// `checked_later`: the caller checks the type and links of what it opened itself, under its lock
// (LockedFile::open), so the check right after open() would only repeat it.
Status open_file(const std::string& path, Access access, int* fd, bool* created, bool checked_later) {
    *fd = -1;
    if (created != nullptr) *created = false;
    const int base =
        (access == Access::kReadExisting ? O_RDONLY : O_RDWR) | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;
    for (int attempt = 0; attempt < 100; ++attempt) {
        // Looked at before opening, so that a device or FIFO is never opened at all. Not for a file the
        // caller checks once locked: O_NOFOLLOW refuses a link, O_NONBLOCK keeps a FIFO from blocking the
        // open, and a device node can only be put there by root (a hard link to one from another file
        // system is impossible, and fs.protected_hardlinks forbids linking another user's).
        struct statx pre{};
        if (checked_later) {
            // nothing before the open
        } else if (statx_path(path, &pre) == 0) {
            Status st = check_file_type(pre, path);
            if (!st.ok()) return st;
        } else if (errno != ENOENT) {
            const int err = errno;
            return err == EACCES ? permission_error(err, "Cannot access the", path)
                                 : os_error(err, "Cannot access the", path);
        }
        // Without O_CREAT first: fs.protected_regular refuses O_CREAT on another user's file in /var/tmp.
        int f = open(path.c_str(), base);
        if (f < 0 && errno == ENOENT && access == Access::kCreate) {
            f = open(path.c_str(), base | O_CREAT | O_EXCL, 0644);
            if (f < 0 && errno == EEXIST) continue;  // created by someone else meanwhile: open theirs
            if (f >= 0 && created != nullptr) *created = true;
        }
        if (f < 0) {
            const int err = errno;
            if (err == EINTR) continue;
            if (err == ENOENT && access != Access::kCreate) return {};
            if (err == ELOOP) {
                return failure(StatusCode::kOsError,
                               "Refusing to use the " + role(path) + " " + path + ": it is a symbolic link (" +
                                   errno_text(err) + "). Links are not followed; use the real file's path.",
                               err);
            }
            if (err == EACCES || err == EPERM) return permission_error(err, "Cannot open the", path);
            return os_error(err, "Cannot open the", path);
        }
        if (checked_later) {
            *fd = f;
            return {};
        }
        struct statx post{};
        if (statx_fd(f, &post) != 0) {
            const int err = errno;
            close(f);
            return os_error(err, "Cannot inspect the", path);
        }
        Status st = check_file_type(post, path);
        if (st.ok()) st = check_companion_owner(post, path);
        if (!st.ok()) {
            close(f);
            return st;
        }
        *fd = f;
        return {};
    }
    return failure(StatusCode::kOsError,
                   "Cannot open the " + role(path) + " " + path + ": it keeps appearing and disappearing.", EAGAIN);
}

// `size`: the size statx gave under the lock. A short read that reaches it is the end (a writer that
// ignores the lock may still append: then the read goes on until pread says end of file).
Status read_all(int fd, const std::string& path, std::uint64_t size, std::string* out) {
    out->clear();
    if (size <= kMaxFileSize) out->reserve(static_cast<std::size_t>(size));
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
        if (static_cast<std::size_t>(n) < sizeof buf && static_cast<std::uint64_t>(offset) >= size) return {};
        if (out->size() > kMaxFileSize) {
            return failure(StatusCode::kOsError,
                           "The " + role(path) + " " + path + " is larger than " + std::to_string(kMaxFileSize >> 20) +
                               " MiB, so it is not a " + role(path) + " (" + errno_text(EFBIG) + ").",
                           EFBIG);
        }
    }
}

// Keeps SIGXFSZ from killing the calling thread in the middle of a rewrite, where its action is the
// default (a process started by a JVM, a C program): under RLIMIT_FSIZE the write that crosses the
// limit is short and the next one raises SIGXFSZ, which would end the process with half a line in the
// file. Armed at the first short write (a write that is not short costs nothing more), it blocks the
// signal, so that the next write fails with EFBIG instead and the old bytes are put back; the signal
// that write raised (directed at this thread) is then taken back. A process that ignores SIGXFSZ
// (Python does) or handles it is left alone, and so is one that blocks it already. A first write that
// starts beyond the limit still raises it before writing anything: nothing is torn.
class FileSizeSignalGuard {
public:
    FileSizeSignalGuard() = default;
    FileSizeSignalGuard(const FileSizeSignalGuard&) = delete;
    FileSizeSignalGuard& operator=(const FileSizeSignalGuard&) = delete;

    void arm() noexcept {
        if (armed_) return;
        armed_ = true;
        struct sigaction action{};
        if (sigaction(SIGXFSZ, nullptr, &action) != 0 || (action.sa_flags & SA_SIGINFO) != 0 ||
            action.sa_handler != SIG_DFL)
            return;
        sigset_t xfsz;
        sigemptyset(&xfsz);
        sigaddset(&xfsz, SIGXFSZ);
        // sigprocmask, not pthread_sigmask: the same per-thread call in glibc (rt_sigprocmask), but
        // pthread_sigmask moved to libc as GLIBC_2.32, beyond what a manylinux_2_28 wheel may require
        if (sigprocmask(SIG_BLOCK, &xfsz, &old_) != 0) return;
        blocked_ = !sigismember(&old_, SIGXFSZ);
        if (!blocked_) sigprocmask(SIG_SETMASK, &old_, nullptr);
    }

    ~FileSizeSignalGuard() {
        if (!blocked_) return;
        sigset_t pending, xfsz;
        sigemptyset(&xfsz);
        sigaddset(&xfsz, SIGXFSZ);
        if (sigpending(&pending) == 0 && sigismember(&pending, SIGXFSZ)) {
            const timespec now{0, 0};
            while (sigtimedwait(&xfsz, nullptr, &now) < 0 && errno == EINTR) {
            }
        }
        sigprocmask(SIG_SETMASK, &old_, nullptr);
    }

private:
    sigset_t old_{};
    bool armed_ = false;
    bool blocked_ = false;
};

// What a rewrite changed, so that only that is put back and what the file holds is known: old bytes
// [0, overwritten) may differ from the old text, and `grew` says bytes were written past its end.
struct Changed {
    std::size_t overwritten = 0;
    bool grew = false;
};

// Writes [offset, offset + size) whole, noting in *changed what each write changed. Under RLIMIT_FSIZE
// a write is cut at the limit, and one that starts there writes nothing (EFBIG).
Status pwrite_all(int fd, const char* data, std::size_t size, off_t offset, std::size_t old_size,
                  FileSizeSignalGuard* guard, Changed* changed) {
    while (size > 0) {
        ssize_t n = pwrite(fd, data, size, offset);
        if (n < 0) {
            if (errno == EINTR) continue;
            return failure(StatusCode::kOsError, "", errno);
        }
        const std::size_t end = static_cast<std::size_t>(offset) + static_cast<std::size_t>(n);
        if (n > 0 && static_cast<std::size_t>(offset) < old_size)
            changed->overwritten = std::max(changed->overwritten, std::min(end, old_size));
        if (end > old_size) changed->grew = true;
        if (static_cast<std::size_t>(n) < size) guard->arm();  // the next write may cross RLIMIT_FSIZE
        data += n;
        size -= static_cast<std::size_t>(n);
        offset += n;
    }
    return {};
}

// The lines of `text`, each with its newline (a last one without is kept as it is).
std::set<std::string> lines_of(const std::string& text) {
    std::set<std::string> lines;
    std::size_t pos = 0;
    while (pos < text.size()) {
        const std::size_t end = text.find('\n', pos);
        const std::size_t next = end == std::string::npos ? text.size() : end + 1;
        lines.insert(text.substr(pos, next - pos));
        pos = next;
    }
    return lines;
}

// What a file that could not be restored holds, for the message: the number (from 1) of its first line
// that is neither one of the old text nor one of the new (a fragment, or a line without its newline), 0
// when every line is whole.
std::size_t first_torn_line(const std::string& now, const std::string& old_text, const std::string& new_text) {
    const std::set<std::string> old_lines = lines_of(old_text), new_lines = lines_of(new_text);
    std::size_t pos = 0, number = 1;
    while (pos < now.size()) {
        const std::size_t end = now.find('\n', pos);
        if (end == std::string::npos) return number;
        const std::string line = now.substr(pos, end + 1 - pos);
        if (line != "\n" && old_lines.count(line) == 0 && new_lines.count(line) == 0) return number;
        pos = end + 1;
        ++number;
    }
    return 0;
}

// Rewrites the locked file in place (same inode). The data concerns processes of this boot only, so
// it is not fsync()ed. Appends when only lines were added; restores the old bytes if a write fails.
// A shrinking rewrite is written padded with newlines to the old size, in one write, before the
// truncate: a process killed between the two leaves blank lines behind, never a fragment of an old
// line that could read as "<index> <pid>" of some live process.
//
// Whole lines or nothing: a write may be short (RLIMIT_FSIZE crossed, the filesystem full) and the
// next one fail (EFBIG, ENOSPC). Then what was changed is put back: the old bytes over those that were
// overwritten (the same blocks, and below the limit that cut the write short, so neither the limit nor
// a full filesystem refuses them), and the file cut back to its old length when it grew (a truncation
// that shrinks needs no space and no limit allows it not). The message says what is true (docs/design.md
// §5.2): nothing was written (the file is unchanged); or the file, read back, holds its old bytes
// again (restored); or it does not, and then what it holds.
Status write_in_place(int fd, const std::string& path, const std::string& old_text, const std::string& new_text) {
    const bool append = new_text.size() >= old_text.size() && new_text.compare(0, old_text.size(), old_text) == 0;
    // the removed lines were the last ones: the truncation alone, one step a crash cannot split
    const bool cut_tail = new_text.size() < old_text.size() && old_text.compare(0, new_text.size(), new_text) == 0;
    const std::size_t old_size = old_text.size();
    FileSizeSignalGuard guard;
    Changed changed;
    Status st;
    if (append) {
        st = pwrite_all(fd, new_text.data() + old_size, new_text.size() - old_size, static_cast<off_t>(old_size),
                        old_size, &guard, &changed);
    } else if (cut_tail) {
        // nothing to write: the ftruncate below removes the tail
    } else if (new_text.size() < old_size) {
        std::string padded = new_text;
        padded.resize(old_size, '\n');
        st = pwrite_all(fd, padded.data(), padded.size(), 0, old_size, &guard, &changed);
    } else {
        st = pwrite_all(fd, new_text.data(), new_text.size(), 0, old_size, &guard, &changed);
    }
    // a failed ftruncate changed nothing
    if (st.ok() && new_text.size() < old_size && ftruncate(fd, static_cast<off_t>(new_text.size())) != 0) {
        st = failure(StatusCode::kOsError, "", errno);
    }
    if (st.ok()) return {};
    Status failed = os_error(st.sys_errno, "Cannot write the", path);
    if (changed.overwritten == 0 && !changed.grew) {
        failed.message += "; nothing was written, the file is unchanged.";
        return failed;
    }
    Changed again;  // what putting the old bytes back changes: nothing beyond them
    Status undo = changed.overwritten == 0
                      ? Status{}
                      : pwrite_all(fd, old_text.data(), changed.overwritten, 0, old_size, &guard, &again);
    if (undo.ok() && changed.grew && ftruncate(fd, static_cast<off_t>(old_size)) != 0) {
        undo = failure(StatusCode::kOsError, "", errno);
    }
    std::string now;
    const Status read_back = read_all(fd, path, old_size, &now);
    if (!read_back.ok()) {
        failed.message +=
            "; putting its old content back " +
            std::string(undo.ok() ? "seemed to work" : "failed too (" + errno_text(undo.sys_errno) + ")") +
            " but it cannot be read back to check (" + errno_text(read_back.sys_errno) +
            "): check it with `flink-gpu coordination show`.";
        return failed;
    }
    if (now == old_text) {
        failed.message += "; its old content was restored.";
        return failed;
    }
    const std::size_t torn = first_torn_line(now, old_text, new_text);
    failed.message += "; putting its old content back failed" +
                      (undo.ok() ? std::string() : " too (" + errno_text(undo.sys_errno) + ")") + ": it holds " +
                      std::to_string(now.size()) + " bytes where it held " + std::to_string(old_size) +
                      (torn != 0 ? ", and its line " + std::to_string(torn) + " is a partial line"
                                 : ", in whole lines, its old ones and new ones") +
                      ": check it with `flink-gpu coordination show`.";
    return failed;
}

}  // namespace

LockedFile::~LockedFile() { unlock(); }

void LockedFile::unlock() noexcept {
    if (fd_ >= 0) {
        flock(fd_, LOCK_UN);
        close(fd_);
        fd_ = -1;
    }
}

Status LockedFile::open(const std::string& path, std::int64_t timeout_ms, Access access, bool* exists) {
    unlock();
    *exists = false;
    if (path.empty()) return failure(StatusCode::kInvalidArgument, "The coordination file path is empty.");
    if (path.find('\0') != std::string::npos) {
        return failure(StatusCode::kInvalidArgument, "The coordination file path contains a NUL byte.");
    }
    if (timeout_ms < 0) {
        return failure(StatusCode::kInvalidArgument,
                       "The lock timeout must not be negative, got " + std::to_string(timeout_ms) + " ms.");
    }
    const int op = (access == Access::kReadExisting ? LOCK_SH : LOCK_EX) | LOCK_NB;
    const std::int64_t start = monotonic_ms();
    // Saturated: a huge timeout ("for ever") must not overflow into a deadline already passed.
    const std::int64_t deadline = timeout_ms > INT64_MAX - start ? INT64_MAX : start + timeout_ms;
    int replaced = 0;
    std::int64_t writer_backoff = 1;
    for (;;) {
        int fd = -1;
        Status st = open_file(path, access, &fd, nullptr, true);
        if (!st.ok()) return st;
        if (fd < 0) return {};  // absent and not to be created
        fd_ = fd;
        path_ = path;
        // O_NONBLOCK was for the open only: reads and writes block. No other flag F_SETFL changes was
        // set by open_file, so clearing them all needs no F_GETFL first.
        if (fcntl(fd, F_SETFL, 0) != 0) {
            const int err = errno;
            return os_error(err, "Cannot configure the", path);
        }
        std::int64_t backoff = 1;
        for (;;) {
            if (flock(fd, op) == 0) break;
            const int err = errno;
            if (err == EINTR) continue;
            if (err != EWOULDBLOCK) return os_error(err, "Cannot lock the", path);
            const std::int64_t now = monotonic_ms();
            if (now >= deadline) {
                struct statx locked{};
                std::string holders;
                if (statx_fd(fd, &locked) == 0) holders = lock_holders(locked);
                char secs[32];
                std::snprintf(secs, sizeof secs, "%.10g", static_cast<double>(timeout_ms) / 1000.0);
                return failure(StatusCode::kTimeout,
                               "Timed out after " + std::string(secs) + " s waiting for the lock on the " + role(path) +
                                   " " + path +
                                   (holders.empty() ? std::string(" (held by another process)")
                                                    : " (held by pid " + holders + ")") +
                                   ". Another worker may hang while claiming GPUs.",
                               ETIMEDOUT);
            }
            sleep_ms(std::min(backoff, deadline - now));
            backoff = std::min<std::int64_t>(backoff * 2, 25);
        }
        struct statx locked{}, named{};
        if (statx_fd(fd, &locked) != 0) {
            const int err = errno;
            return os_error(err, "Cannot inspect the", path);
        }
        const bool path_ok = statx_path(path, &named) == 0 && same_inode(locked, named);
        if (path_ok) {
            Status type = check_file_type(locked, path);  // links may have been added before we locked
            if (type.ok()) type = check_companion_owner(locked, path);
            if (!type.ok()) return type;
            // A writer still busy with a copy it replaced: its lines are not in this inode yet.
            if (access != Access::kReadExisting) {
                if (const long writer = replaced_copy_writer(fd, locked)) {
                    unlock();
                    const std::int64_t now = monotonic_ms();
                    if (now >= deadline) {
                        char secs[32];
                        std::snprintf(secs, sizeof secs, "%.10g", static_cast<double>(timeout_ms) / 1000.0);
                        return failure(StatusCode::kTimeout,
                                       "Timed out after " + std::string(secs) +
                                           " s waiting for the coordination "
                                           "file " +
                                           path + ": pid " + std::to_string(writer) +
                                           " still holds "
                                           "the lock of the copy it replaced (as Flink's stock discovery script "
                                           "does when it reclaims, with sed -i) and has not finished writing the "
                                           "new one. Another worker may hang while claiming GPUs.",
                                       ETIMEDOUT);
                    }
                    sleep_ms(std::min(writer_backoff, deadline - now));
                    writer_backoff = std::min<std::int64_t>(writer_backoff * 2, 25);
                    continue;
                }
            }
            mode_ = static_cast<std::uint16_t>(locked.stx_mode & 07777);
            size_ = locked.stx_size;
            identity_ = std::to_string(locked.stx_dev_major) + ":" + std::to_string(locked.stx_dev_minor) + ":" +
                        std::to_string(locked.stx_ino);
            *exists = true;
            return {};
        }
        unlock();
        ++replaced;
        if (replaced >= 3 && monotonic_ms() >= deadline) {
            return failure(StatusCode::kTimeout,
                           "Timed out waiting for the " + role(path) + " " + path +
                               ": it was replaced by another file " + std::to_string(replaced) +
                               " times while we waited for its lock.",
                           ETIMEDOUT);
        }
    }
}

Status open_checked(const std::string& path, Access access, int* fd, bool* created) {
    return open_file(path, access, fd, created, false);
}

bool names_inode(const std::string& path, int fd) noexcept {
    struct statx named{}, open_one{};
    return statx_path(path, &named) == 0 && statx_fd(fd, &open_one) == 0 && same_inode(named, open_one);
}

bool file_id(int fd, FileId* id) noexcept {
    struct statx st{};
    if (statx_fd(fd, &st) != 0) return false;
    *id = FileId{st.stx_dev_major, st.stx_dev_minor, st.stx_ino};
    return true;
}

bool names_file(const std::string& path, const FileId& id) noexcept {
    struct statx named{};
    return statx_path(path, &named) == 0 && named.stx_ino == id.ino && named.stx_dev_major == id.dev_major &&
           named.stx_dev_minor == id.dev_minor;
}

Status LockedFile::read(std::string* text) const { return read_all(fd_, path_, size_, text); }

Status LockedFile::rewrite(const std::string& old_text, const std::string& new_text) const {
    return write_in_place(fd_, path_, old_text, new_text);
}

}  // namespace coordination
}  // namespace flinkgpu
