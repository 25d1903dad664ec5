// The lease file beside the coordination file (docs/design.md §9.4): proof, across pid namespaces, that
// the owner of a line is alive.
//
// `<coordination file>.lease` is created, opened and checked like the coordination file (O_NOFOLLOW |
// O_CLOEXEC, a regular file with one link; created with the coordination file's permission bits). A
// process that claims GPUs for itself holds, for as long as it holds any GPU of that coordination file, an
// open-file-description lock (F_OFD_SETLK, F_WRLCK) on one byte of it, its slot, and writes
// `lease=<slot>` in its lines. The kernel drops the lock when the process dies, whatever its pid
// namespace; any claimer sharing the file tests a slot with F_OFD_GETLK. The slot is taken under the
// coordination file's flock as the lowest byte that nobody holds and no line names (a line naming a byte
// nobody holds is a dead holder's and must stay dead).
//
// One lease per process and coordination path, in a registry guarded by a mutex that each call holds
// for its whole critical section (held under the flock, never while waiting for it). A lease that no line
// names any more (its holder released everything) is kept, idle: a byte no line names proves nothing to
// anyone, and keeping it spares the next claim the lease file's open, lock and token read, and the release
// its close. One idle lease per process at most (the one it released last): so a worker that claims and
// releases in a loop pays for its lease once, and a process that touches many files keeps no descriptor
// per file. The kernel drops every lease when the process dies. Fork: a child shares its parent's open file
// descriptions, so a pthread_atfork child handler closes the inherited lease descriptors: the parent's GPUs are freed
// when the parent dies even while a child lives, and a child's own claims take their own lease. Exec never inherits
// them (O_CLOEXEC). Only the calling process leases: claims for another pid (flink-gpu-discovery for its parent,
// `flink-gpu claim`) write no lease field.
//
// The lease file carries a token (its first line: 16 random hex digits and the lease file's inode, written
// by the claimer that finds none for that inode, under flock(2) on the lease file) and a header (its second
// line, kLeaseFileHeader), and each line records the token with its lease (`lf=`): a copy put in the lease
// file's place has another inode, so its token is none. A lease proves something only on the lease file it
// was taken on: when the lease file is deleted (an age-based cleaner such as systemd-tmpfiles) or replaced
// while its holders live, the next claimer creates one with another token, and the old lines' free bytes
// there prove nothing — they are judged by pid and start time in our namespace, and are of unknown liveness
// in another. A lease file that cannot get its token (a full file system, its flock held) still leases;
// its lines record `lf=none` and the claim warns. A file at the lease file's path that is neither empty nor
// a lease file (another coordination file named `<file>.lease`) is never written; a lease file is never
// used as a coordination file (refuse_lease_file). Holders refresh the file's times (at most once an
// hour) so that cleaners spare it; docs/SECURITY.md says how to exclude the files from cleaning.
#pragma once

#include "base/status.hpp"
#include "coordination/identity.hpp"

#include <sys/types.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace flinkgpu {
namespace coordination {

enum class LeaseState { kHeld, kFree, kUnknown };

struct Record;  // this process's lease on one coordination path

std::string lease_path(const std::string& coordination_path);

// The second line of a lease file, after its token line: what tells it from a coordination file, which
// never has a token line followed by it.
inline constexpr const char* kLeaseFileHeader = "flink-gpu lease file";

// What the first bytes of a file (at most 256) at a lease file's path are: empty; a lease file (a token
// line "<16 hex digits> <inode>", for any inode, a copy's too, then the header); one of the version before
// the header (the token line alone, for any inode: a copy of one gets a new token); or another file, which
// is never used as a lease file. A coordination file is never one of the first three unless empty
// (docs/design.md §9.4).
enum class LeaseFileText { kEmpty, kLeaseFile, kOldLeaseFile, kOther };
LeaseFileText lease_file_text(const std::string& text);

// Not ok when `text`, the content of the coordination file `path`, is a lease file's: a lease file is never
// used as a coordination file; the message names the coordination file whose lease file it is.
Status refuse_lease_file(const std::string& path, const std::string& text);

// The leases of one coordination file for one call; locks the process's lease registry while it lives.
class Leases {
public:
    explicit Leases(const std::string& coordination_path);
    Leases(const Leases&) = delete;
    Leases& operator=(const Leases&) = delete;
    ~Leases();

    // This process's slot in this file, when it holds one.
    bool held(std::uint32_t* slot) const;

    // Whether someone holds `slot` on the lease file whose token is `lease_file` (empty: not recorded, the
    // lease file the path names): kHeld for our own slot without a syscall; kUnknown when the lease file
    // cannot be opened or tested, or is not that one (deleted and created again, or replaced). Each slot
    // is tested once per call.
    LeaseState test(std::uint32_t slot, const std::string& lease_file);

    // Takes this process's lease on this file (keeps the one it holds while it is on the lease file the
    // path names), creating the lease file with the permission bits `mode`; never a slot in `named`
    // (sorted: the slots the file's lines name). Refuses (not ok, nothing written) a file at the lease
    // file's path that is no lease file (lease_file_text: kOther), a coordination file named so, say.
    // *token: the lease file's token, for the lines' `lf`; kNoLeaseFileToken when it has none and none
    // could be written, and then *token_problem says why (the lease is taken all the same: its byte held
    // proves its holder alive, a free one proves nothing). Refreshes the lease file's times at most once an
    // hour, so that age-based cleaners spare it.
    // *replaced: lines to move to this lease: the lease this process held for the same coordination file
    // (`locked_file`, its LockedFile::identity()) on a lease file the path no longer names, or the lines of
    // this very lease that record `lf=none` once its lease file has a token; the caller moves this
    // process's lines that name it to the new lease (never by slot and token alone: another holder's
    // `lf=none` line may name the same slot of another lease file), then calls close_replaced().
    struct Replaced {
        bool held = false;
        std::uint32_t slot = 0;
        std::string token;
    };
    Status acquire(std::uint16_t mode, const std::string& locked_file, const std::vector<std::uint32_t>& named,
                   std::uint32_t* slot, std::string* token, Replaced* replaced, Status* token_problem);

    // Drops the lease acquire() reported as replaced, once no line names it.
    void close_replaced() noexcept;

    // This process's lease here is named by no line any more: it becomes the one idle lease, and the
    // idle lease of another file, if any, is dropped.
    void set_idle() noexcept;

private:
    int test_fd();
    const std::string& test_token();  // the token of the lease file test_fd() tests
    // The record's descriptor, when it still is the file the path names (checked once per call).
    bool record_fd_valid();

    std::unique_lock<std::mutex> lock_;
    Record* record_ = nullptr;     // this path's registry record, created on first acquire
    Record* abandoned_ = nullptr;  // the record acquire() replaced (Replaced)
    std::string coordination_path_;
    int private_fd_ = -1;  // a read-only descriptor for tests when this process has no valid one
    bool checked_ = false;
    bool record_valid_ = false;
    bool test_failed_ = false;
    bool token_read_ = false;
    std::string private_token_;
    static constexpr int kTestedSlots = 8;
    std::uint32_t tested_slot_[kTestedSlots] = {};
    std::string tested_file_[kTestedSlots];
    LeaseState tested_state_[kTestedSlots] = {};
    int tested_ = 0;
};

}  // namespace coordination
}  // namespace flinkgpu
