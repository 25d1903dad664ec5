// The lease file beside the coordination file (docs/design.md §9.4); see coordination/lease.hpp.
#include "coordination/lease.hpp"

#include "coordination/file.hpp"
#include "coordination/lines.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <unistd.h>

#include <sys/random.h>
#include <time.h>

#include <sys/file.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

namespace flinkgpu {
namespace coordination {

// This process's lease on one coordination path.
struct Record {
    std::string coordination_path;
    int fd = -1;  // the lease file, read-write, open while the lease is held
    bool held = false;
    std::uint32_t slot = 0;
    std::string token;           // the lease file's token (empty: it has none)
    std::int64_t touched_s = 0;  // CLOCK_MONOTONIC seconds when this process last refreshed its times
    bool idle = false;           // no line names it (Leases::set_idle)
    FileId file;                 // the lease file `fd` is open on
    std::string locked_file;     // LockedFile::identity() of the coordination file the lease was taken for
};

namespace {

// Never destroyed: the atfork handlers and late callers may use them during exit.
std::mutex& registry_mutex() {
    static std::mutex* m = new std::mutex;
    return *m;
}

std::vector<Record*>& registry() {
    static std::vector<Record*>* r = new std::vector<Record*>;
    return *r;
}

// The child of a fork shares its parent's lease descriptions: it closes them so that the parent's
// death frees the parent's GPUs. The mutex is taken around fork so the records are consistent.
void before_fork() { registry_mutex().lock(); }
void after_fork_in_parent() { registry_mutex().unlock(); }
void after_fork_in_child() {
    for (Record* r : registry()) {
        if (r->fd >= 0) close(r->fd);
        r->fd = -1;
        r->held = false;
        r->token.clear();
    }
    registry_mutex().unlock();
}

void install_fork_handlers() {
    // A function-local static, not std::call_once: that calls pthread_once, a GLIBC_2.34 symbol
    // beyond what a manylinux_2_28 wheel may need; static initialisation is thread-safe as well.
    static const int registered = pthread_atfork(before_fork, after_fork_in_parent, after_fork_in_child);
    (void)registered;
}

// The record of `coordination_path`. There is more than one only once the path came to name another
// lease file (a symlinked directory retargeted, a relative path after chdir; not the stock script's
// `sed -i`, which replaces the coordination file only): then the one whose lease is on the lease file the
// path names now, if any, else one without a lease. The others keep their old files' leases for the lines
// written there, until the process ends.
Record* find_record(const std::string& coordination_path) {
    Record* first = nullptr;
    int matching = 0;
    for (Record* r : registry()) {
        if (r->coordination_path != coordination_path) continue;
        if (first == nullptr) first = r;
        ++matching;
    }
    if (matching <= 1) return first;  // which lease file it is on is checked when that matters
    Record* unused = nullptr;
    for (Record* r : registry()) {
        if (r->coordination_path != coordination_path) continue;
        if (r->fd >= 0 && names_inode(lease_path(coordination_path), r->fd)) return r;
        if (r->fd < 0 && unused == nullptr) unused = r;
    }
    return unused;
}

struct flock one_byte(short type, std::uint32_t slot) {
    struct flock fl{};
    fl.l_type = type;
    fl.l_whence = SEEK_SET;
    fl.l_start = static_cast<off_t>(slot);
    fl.l_len = 1;
    fl.l_pid = 0;  // required by OFD locks
    return fl;
}

// How often a holder refreshes the lease file's times: far inside the ages at which tmpfiles cleaners
// delete files (systemd: 10 days in /tmp, 30 in /var/tmp), and rare enough to cost nothing.
constexpr std::int64_t kTouchIntervalS = 3600;

std::int64_t monotonic_s() {
    struct timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec);
}

// A lease file is at most a token line and the header; more than this is some other file.
constexpr std::size_t kLeaseFileProbe = 256;

// The first bytes of the file open as `fd` (at most kLeaseFileProbe); false when it cannot be read.
bool read_head(int fd, std::string* text) {
    char buf[kLeaseFileProbe];
    ssize_t n;
    do {
        n = pread(fd, buf, sizeof buf, 0);
    } while (n < 0 && errno == EINTR);
    if (n < 0) return false;
    text->assign(buf, static_cast<std::size_t>(n));
    return true;
}

// The token line "<16 hex digits> <inode>" that starts `text`: the token, and the inode it was written for.
bool parse_token_line(const std::string& text, std::string* token, std::string* inode, std::size_t* end) {
    const std::size_t newline = text.find('\n');
    if (newline == std::string::npos || newline <= kLeaseFileTokenSize + 1 || text[kLeaseFileTokenSize] != ' ')
        return false;
    *token = text.substr(0, kLeaseFileTokenSize);
    *inode = text.substr(kLeaseFileTokenSize + 1, newline - kLeaseFileTokenSize - 1);
    if (!valid_lease_file_token(*token) || inode->find_first_not_of("0123456789") != std::string::npos) return false;
    *end = newline + 1;
    return true;
}

// The token of the lease file whose first bytes are `text` and whose inode is `inode`. A token written for
// another inode (a copy of the lease file put in its place: it has none of the locks) is none; so is a
// missing or malformed line.
std::string token_in(const std::string& text, std::uint64_t inode) {
    std::string token, written;
    std::size_t end = 0;
    if (!parse_token_line(text, &token, &written, &end) || written != std::to_string(inode)) return std::string();
    return token;
}

std::string read_token(int fd, std::uint64_t inode) {
    std::string text;
    return read_head(fd, &text) ? token_in(text, inode) : std::string();
}

// Writes a new token for `inode` and the header over the whole file: a torn one is none.
Status write_token(int fd, std::uint64_t inode, const std::string& path, std::string* token) {
    unsigned char random[kLeaseFileTokenSize / 2];
    std::size_t got = 0;
    while (got < sizeof random) {
        const ssize_t n = getrandom(random + got, sizeof random - got, 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            const int err = n < 0 ? errno : EIO;
            return failure(StatusCode::kOsError,
                           "Cannot make a token for the lease file " + path + ": getrandom: " + errno_text(err), err);
        }
        got += static_cast<std::size_t>(n);
    }
    char text[kLeaseFileTokenSize + 2];
    for (std::size_t i = 0; i < sizeof random; ++i) std::snprintf(text + 2 * i, 3, "%02x", random[i]);
    const std::string content =
        std::string(text, kLeaseFileTokenSize) + " " + std::to_string(inode) + "\n" + kLeaseFileHeader + "\n";
    ssize_t n;
    do {
        n = pwrite(fd, content.data(), content.size(), 0);
    } while (n < 0 && errno == EINTR);
    int err = n < 0 ? errno : ENOSPC;  // short: the file system filled up
    if (n == static_cast<ssize_t>(content.size())) {
        if (ftruncate(fd, static_cast<off_t>(content.size())) == 0) err = 0;  // no tail of a longer copy's
        else err = errno;
    }
    if (err != 0) {
        // a torn token is none, and would make the file no lease file: cut it (which needs no space)
        if (n > 0 && ftruncate(fd, 0) != 0) err = errno;
        return failure(StatusCode::kOsError,
                       "Cannot write the token of the lease file " + path + ": " + errno_text(err), err);
    }
    *token = read_token(fd, inode);
    if (token->empty()) {
        return failure(StatusCode::kOsError,
                       "The token written to the lease file " + path + " did not read back (another writer?)", EIO);
    }
    return {};
}

// Checks that the file open as `fd` (inode `inode`) at `path` is a lease file, and gives it its token when
// it has none for its inode (new, created empty by an older version, or a copy put in its place): a line
// records the token with its lease, and a lease file deleted and created again, or replaced, gets another
// one, so that its free bytes never read as the death of the old file's holders. Under flock(2) on the
// lease file itself, so that two claimers never both write one (the coordination file's lock excludes them
// only while its path names one inode); the token is read back. A lease file of the version before the
// header (its token line alone) gets the header, keeping its token (a copy of one, whose token names
// another inode, gets a new token and the header). Not ok: it is some other file, which is
// left as it is; *token_problem: why it has no token (then *token is empty).
Status ensure_token(int fd, std::uint64_t inode, const std::string& path, const std::string& coordination_path,
                    std::string* token, Status* token_problem) {
    token->clear();
    // bounded: only claimers take this lock, for microseconds; one held longer (another user's process
    // holding it for ever) leaves the token as it is rather than stalling the claim under the file's lock
    int tries = 0;
    bool locked = true;
    while (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        if ((errno != EINTR && errno != EWOULDBLOCK) || ++tries > 200) {
            locked = false;
            break;
        }
        if (errno == EWOULDBLOCK) {
            const struct timespec pause{0, 1000000};  // 1 ms: at most 0.2 s in all
            nanosleep(&pause, nullptr);
        }
    }
    std::string text;
    Status refused;
    if (!read_head(fd, &text)) {
        const int err = errno;
        *token_problem =
            failure(StatusCode::kOsError, "Cannot read the lease file " + path + ": " + errno_text(err), err);
    } else {
        const LeaseFileText kind = lease_file_text(text);
        if (kind == LeaseFileText::kOther) {
            refused =
                failure(StatusCode::kOsError,
                        "Refusing to use " + path + " as the lease file of the coordination file " + coordination_path +
                            ": it is not a lease file (neither empty nor a lease file's token and header), "
                            "perhaps a coordination file of its own, and it was left as it is. Give one of "
                            "the two coordination files another name, or remove " +
                            path + " if it is nobody's.",
                        EEXIST);
        } else {
            *token = token_in(text, inode);
            if (!locked && token->empty()) {
                *token_problem = failure(StatusCode::kOsError,
                                         "The lease file " + path +
                                             " has no token, and another process has held its flock(2) for more "
                                             "than 0.2 s, so none could be written",
                                         EWOULDBLOCK);
            } else if (!locked) {
                // its token stands; the header waits for a claimer that gets the lock
            } else if (kind == LeaseFileText::kOldLeaseFile && !token->empty()) {
                const std::string header = std::string(kLeaseFileHeader) + "\n";
                // best effort: without it, the file is still the token line alone, which is taken for a lease file
                ssize_t n;
                do {
                    n = pwrite(fd, header.data(), header.size(), static_cast<off_t>(text.size()));
                } while (n < 0 && errno == EINTR);
                // a torn header would make it no lease file: cut it (the token line alone is one)
                if (n > 0 && n != static_cast<ssize_t>(header.size()))
                    (void)!ftruncate(fd, static_cast<off_t>(text.size()));
            } else if (token->empty()) {
                *token_problem = write_token(fd, inode, path, token);
            }
        }
    }
    if (locked) flock(fd, LOCK_UN);
    return refused;
}

// The token a line records: the lease file's, or that it had none.
std::string recorded_token(const Record* r) { return r->token.empty() ? std::string(kNoLeaseFileToken) : r->token; }

// Keeps the lease file's times fresh, so that age-based cleaners (systemd-tmpfiles) leave it alone.
void touch(Record* r) {
    const std::int64_t now = monotonic_s();
    if (r->touched_s != 0 && now - r->touched_s < kTouchIntervalS) return;
    if (futimens(r->fd, nullptr) == 0) r->touched_s = now;
}

}  // namespace

std::string lease_path(const std::string& coordination_path) { return coordination_path + kLeaseSuffix; }

LeaseFileText lease_file_text(const std::string& text) {
    if (text.empty()) return LeaseFileText::kEmpty;
    std::string token, written;
    std::size_t end = 0;
    if (!parse_token_line(text, &token, &written, &end)) return LeaseFileText::kOther;
    if (text.compare(end, std::string::npos, std::string(kLeaseFileHeader) + "\n") == 0)
        return LeaseFileText::kLeaseFile;
    // its token line alone, for any inode: a copy (an image layer, a restored backup) gets a new token
    if (end == text.size()) return LeaseFileText::kOldLeaseFile;
    return LeaseFileText::kOther;
}

Status refuse_lease_file(const std::string& path, const std::string& text) {
    const LeaseFileText kind = lease_file_text(text);
    if (kind != LeaseFileText::kLeaseFile && kind != LeaseFileText::kOldLeaseFile) return {};
    const std::string suffix = lease_path("");
    const bool named_so =
        path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0;
    const std::string whose =
        named_so ? "the lease file of the coordination file " + path.substr(0, path.size() - suffix.size())
                 : std::string("a lease file");
    return failure(StatusCode::kOsError,
                   "Refusing to use " + path + " as a coordination file: it is " + whose + " (a token and the \"" +
                       kLeaseFileHeader +
                       "\" header, docs/design.md 9.4), and it was left as it is. Choose another coordination file.",
                   EINVAL);
}

Leases::Leases(const std::string& coordination_path)
    : lock_((install_fork_handlers(), registry_mutex())), coordination_path_(coordination_path) {
    record_ = find_record(coordination_path);
}

Leases::~Leases() {
    if (private_fd_ >= 0) close(private_fd_);
}

bool Leases::held(std::uint32_t* slot) const {
    if (record_ == nullptr || !record_->held) return false;
    *slot = record_->slot;
    return true;
}

bool Leases::record_fd_valid() {
    if (record_ == nullptr || record_->fd < 0) return false;
    if (!checked_) {
        checked_ = true;
        record_valid_ = names_file(lease_path(coordination_path_), record_->file);
    }
    return record_valid_;
}

// The record's descriptor, else a private read-only one (none when there is no lease file).
int Leases::test_fd() {
    if (record_fd_valid()) return record_->fd;
    if (private_fd_ < 0 && !test_failed_) {
        Status st = open_checked(lease_path(coordination_path_), Access::kReadExisting, &private_fd_);
        if (!st.ok() || private_fd_ < 0) {
            private_fd_ = -1;
            test_failed_ = true;
        }
    }
    return private_fd_;
}

const std::string& Leases::test_token() {
    if (record_fd_valid()) return record_->token;
    if (!token_read_) {
        token_read_ = true;
        const int fd = test_fd();
        FileId id;
        if (fd >= 0 && file_id(fd, &id)) private_token_ = read_token(fd, id.ino);
    }
    return private_token_;
}

LeaseState Leases::test(std::uint32_t slot, const std::string& lease_file) {
    std::uint32_t mine = 0;
    if (held(&mine) && mine == slot && (!valid_lease_file_token(lease_file) || lease_file == record_->token))
        return LeaseState::kHeld;
    for (int i = 0; i < tested_; ++i) {
        if (tested_slot_[i] == slot && tested_file_[i] == lease_file) return tested_state_[i];
    }
    const int fd = test_fd();
    LeaseState state = LeaseState::kUnknown;
    // a lease proves something only on the lease file it was taken on
    if (fd >= 0 && (!valid_lease_file_token(lease_file) || lease_file == test_token())) {
        struct flock fl = one_byte(F_WRLCK, slot);
        if (fcntl(fd, F_OFD_GETLK, &fl) == 0) state = fl.l_type == F_UNLCK ? LeaseState::kFree : LeaseState::kHeld;
    }
    if (tested_ < kTestedSlots) {
        tested_slot_[tested_] = slot;
        tested_file_[tested_] = lease_file;
        tested_state_[tested_++] = state;
    }
    return state;
}

Status Leases::acquire(std::uint16_t mode, const std::string& locked_file, const std::vector<std::uint32_t>& named,
                       std::uint32_t* slot, std::string* token, Replaced* replaced, Status* token_problem) {
    *token_problem = {};
    const std::string path = lease_path(coordination_path_);
    if (held(slot)) {
        if (record_fd_valid()) {
            touch(record_);
            record_->idle = false;
            if (record_->token.empty() && record_->file.ino != 0) {
                // its lease file had no token when this lease was taken: once it has one, the lines of this
                // lease (the same byte of the same lease file) record it (the caller moves them)
                Status refused = ensure_token(record_->fd, record_->file.ino, path, coordination_path_, &record_->token,
                                              token_problem);
                if (!refused.ok()) *token_problem = refused;
                if (!record_->token.empty()) {
                    replaced->held = true;
                    replaced->slot = record_->slot;
                    replaced->token = kNoLeaseFileToken;
                }
            }
            *token = recorded_token(record_);
            return {};
        }
        if (record_->locked_file == locked_file) {
            // the same coordination file, another lease file (deleted and created again, or replaced): the
            // caller moves this process's lines to the new lease, and the old one goes
            replaced->held = true;
            replaced->slot = record_->slot;
            replaced->token = recorded_token(record_);
            abandoned_ = record_;
        }
        // else the path names another coordination file now: the old lease stays for the old file's lines
        record_ = nullptr;
        checked_ = record_valid_ = false;
    }
    if (record_ == nullptr) {
        registry().push_back(
            new Record{coordination_path_, -1, false, 0, std::string(), 0, false, FileId{}, std::string()});
        record_ = registry().back();
    }
    int fd = -1;
    bool created = false;
    Status st = open_checked(path, Access::kCreate, &fd, &created);
    if (!st.ok()) return st;
    // the coordination file's permission bits for its owner and group, so that every worker who may claim may
    // also lease, and none for other users: whoever can open a lease file can read-lock a dying holder's byte
    // (a lease file of an older version, readable by all, is narrowed by its owner or root)
    struct statx now{};
    if (created || (statx(fd, "", AT_EMPTY_PATH | AT_STATX_SYNC_AS_STAT, STATX_MODE | STATX_UID, &now) == 0 &&
                    (now.stx_mode & 0007) != 0 && (geteuid() == 0 || geteuid() == now.stx_uid))) {
        if (fchmod(fd, (created ? mode : now.stx_mode) & 0660) != 0 && created) {
            const int err = errno;
            close(fd);
            return failure(StatusCode::kOsError,
                           "Cannot set the mode of the lease file " + path + ": " + errno_text(err), err);
        }
    }
    FileId file;
    std::string file_token;
    if (!file_id(fd, &file)) {
        const int err = errno;
        close(fd);
        return failure(StatusCode::kOsError, "Cannot inspect the lease file " + path + ": " + errno_text(err), err);
    }
    Status refused = ensure_token(fd, file.ino, path, coordination_path_, &file_token, token_problem);
    if (!refused.ok()) {
        close(fd);
        return refused;
    }
    for (std::uint32_t s = 0; s <= kMaxLeaseSlot; ++s) {
        if (std::binary_search(named.begin(), named.end(), s)) continue;  // a dead holder's lines name it
        struct flock fl = one_byte(F_WRLCK, s);
        if (fcntl(fd, F_OFD_SETLK, &fl) == 0) {
            record_->fd = fd;
            record_->held = true;
            record_->slot = s;
            record_->file = file;
            record_->token = file_token;
            record_->locked_file = locked_file;
            record_->idle = false;
            touch(record_);
            checked_ = record_valid_ = true;
            *slot = s;
            *token = recorded_token(record_);
            return {};
        }
        if (errno != EAGAIN && errno != EACCES) {
            const int err = errno;
            close(fd);
            return failure(StatusCode::kOsError,
                           "Cannot lock a byte of the lease file " + path + ": " + errno_text(err), err);
        }
    }
    close(fd);
    return failure(StatusCode::kOsError, "Every slot of the lease file " + path + " is taken.", EAGAIN);
}

// The record goes from the registry too: find_record() must find the path's current one, not it.
void Leases::close_replaced() noexcept {
    if (abandoned_ == nullptr) return;
    if (abandoned_->fd >= 0) close(abandoned_->fd);
    std::vector<Record*>& records = registry();
    records.erase(std::remove(records.begin(), records.end(), abandoned_), records.end());
    delete abandoned_;
    abandoned_ = nullptr;
}

// Closing the only descriptor of the open file description drops its lock.
void Leases::set_idle() noexcept {
    if (record_ == nullptr || !record_->held) return;
    record_->idle = true;
    for (Record* r : registry()) {
        if (r == record_ || !r->held || !r->idle) continue;
        close(r->fd);
        r->fd = -1;
        r->held = false;
        r->idle = false;
        r->token.clear();
    }
}

}  // namespace coordination
}  // namespace flinkgpu
