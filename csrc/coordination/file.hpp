// The coordination file on disk (docs/design.md §5.1, §5.2): opened safely, locked with a bounded
// wait, read whole and rewritten in place. Knows nothing of the line format.
//
//   * open with O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK; symlinks, non-regular files and files
//     with more than one hard link are refused without reading or writing them (checked before and
//     after opening; a locked file once locked, instead);
//   * an existing file is opened without O_CREAT first, so that fs.protected_regular (which forbids
//     O_CREAT on another user's file in a sticky directory such as /var/tmp) does not lock out a user
//     the file's permissions allow; a new file gets mode 0644 (less the umask);
//   * BSD flock(2) on the file itself, as the stock script takes it, polled with LOCK_NB and backoff up
//     to the timeout; a timeout names the processes holding the lock where /proc tells;
//   * after taking the lock, the path must still name the locked inode (a stock `sed -i` may have
//     replaced it), else it starts again; a writing open of a young inode waits for a stock script
//     still writing the copy it replaced (read from /proc/locks until a look settles the inode);
//   * the file is rewritten in place under the lock (pwrite + ftruncate), never replaced.
//
// Every failure is a Status whose message names the file and says what to do.
#pragma once

#include "base/status.hpp"

#include <sys/stat.h>

#include <cstdint>
#include <string>
#include <vector>

namespace flinkgpu {
namespace coordination {

enum class Access {
    kCreate,         // read and write, creating the file when missing (exclusive lock)
    kWriteExisting,  // read and write an existing file (exclusive lock)
    kReadExisting,   // read an existing file (shared lock)
};

// An open, flock()ed coordination file. Unlocks explicitly before closing: a child forked meanwhile
// shares the open file description, and a plain close would leave the lock held by that child.
class LockedFile {
public:
    LockedFile() = default;
    LockedFile(const LockedFile&) = delete;
    LockedFile& operator=(const LockedFile&) = delete;
    ~LockedFile();

    // Opens and locks `path`, waiting up to `timeout_ms` (0: try once) for the lock and for a path that
    // keeps being replaced. `*exists` false with an ok status: there is no file and `access` did not
    // ask to create one.
    Status open(const std::string& path, std::int64_t timeout_ms, Access access, bool* exists);

    // The whole content; a file over 16 MiB is refused (it is not a coordination file).
    Status read(std::string* text) const;

    // Replaces `old_text` (what read() gave) by `new_text` in the same inode. Not fsync()ed: the data
    // concerns processes of this boot only. On failure what it changed is put back, and the message says
    // which is true: nothing was written, the old content was restored, or what the file holds instead.
    Status rewrite(const std::string& old_text, const std::string& new_text) const;

    void unlock() noexcept;

    // The file's permission bits, as found when it was locked.
    std::uint16_t mode() const { return mode_; }

    // Which file this is, "<major>:<minor>:<inode>" of the locked inode: the same for every spelling
    // of its path, different once the path names another file.
    const std::string& identity() const { return identity_; }

private:
    int fd_ = -1;
    std::string path_;
    std::uint16_t mode_ = 0644;
    std::uint64_t size_ = 0;  // as found when it was locked
    std::string identity_;
};

// Opens `path` with the checks above (no lock; the descriptor is left O_NONBLOCK): *fd = -1 with an ok
// status when it does not exist and `access` does not create it; `*created` (when given) tells whether
// this call created it.
Status open_checked(const std::string& path, Access access, int* fd, bool* created = nullptr);

// The suffixes that name the files beside a coordination file `<file>`: its lease file `<file>.lease`, the
// bindings file `<file>.bindings`, the bindings file's lease file `<file>.bindings.lease`, and the host's GPU
// topology as a claim read it `<file>.topology` (policy/discover.cpp). Their one home.
inline constexpr const char* kLeaseSuffix = ".lease";
inline constexpr const char* kBindingsSuffix = ".bindings";
inline constexpr const char* kTopologySuffix = ".topology";
// Those four paths of the coordination file `path`, in that order.
std::vector<std::string> companion_paths(const std::string& path);

// The files beside a coordination file (its lease file `<file>.lease`, the bindings file `<file>.bindings`, its
// lease file, the topology file) speak for the GPUs' holders: a free byte of a lease file put in the old one's
// place, a line of a bindings file, a topology that steers every claim to the GPUs its writer leaves free. So one is
// used only when owned by root or by the owner of the file it serves (this process's user where that does not exist)
// and writable by no other user; else not ok, naming the file, its owner and mode, and the fix. A coordination file
// itself is ok (docs/SECURITY.md: the workers trust it).
Status check_companion_owner(const struct statx& st, const std::string& path);
// The same for the file at `path` as it is now (ok when there is none).
Status check_companion_owner(const std::string& path);

// Whether `path` names the inode open as `fd` (false when either cannot be inspected).
bool names_inode(const std::string& path, int fd) noexcept;

// Which inode a descriptor is open on, kept to ask names_file() later with one statx instead of two.
struct FileId {
    std::uint32_t dev_major = 0, dev_minor = 0;
    std::uint64_t ino = 0;
};
bool file_id(int fd, FileId* id) noexcept;
bool names_file(const std::string& path, const FileId& id) noexcept;

}  // namespace coordination
}  // namespace flinkgpu
