// Who holds a line of the coordination or bindings file (docs/design.md §9.4): the one identity every
// consumer asks about — the claim and bind policies, the liveness judge, and through the binding every
// Python tool (the PyFlink lookup, inherited bindings, `flink-gpu list`, doctor). Pure: no I/O.
//
// A holder is a pid of the namespace the line records (`ns`; none recorded, as in the stock script's and
// older lines: ours), its start time (which tells a recycled pid from it), its lease (a byte of the lease
// file, and the token of the lease file it was taken on, `lf`: `none` when it had none), and for bindings
// the TaskManager whose GPUs it binds (`tm`) and the slot (`slot`: then the pid is one of the slot's
// threads, and the slot is the holder). Every "whose line is this" question is a member here, so that no consumer
// forgets the namespace: two containers' pid 1 are two holders.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>

namespace flinkgpu {
namespace coordination {

// The pid namespace of a process: the inode of /proc/<pid>/ns/pid (coordination/liveness.hpp reads ours).
struct PidNamespace {
    bool known = false;
    std::uint64_t inode = 0;
};

// How the holder of a line was judged (coordination/liveness.hpp's judge()).
enum class Verdict {
    kAlive,            // its pid exists in our namespace and is the process the line was written for
    kGone,             // its pid does not exist (or is a zombie)
    kPidReused,        // its pid exists with another start time
    kTaskManagerGone,  // a binding line of our namespace whose TaskManager (`tm`) is gone: an orphan's, stale
    kLeaseHeld,        // of another namespace, its lease byte locked on the lease file it was taken on: taken,
                       // liveness unknown (the holder holds it, or another process that opened the lease file)
    kLeaseReleased,    // of another namespace, its lease byte not locked on that lease file: dead
    kOtherNamespace,   // written in another pid namespace with no lease that proves anything (none, one on
                       // a lease file since replaced, a free one without a token, or a slot thread's whose
                       // process's lease is held): taken, liveness unknown
};

// What a consumer may conclude from a verdict.
enum class Liveness { kAlive, kDead, kUnknown };

Liveness liveness_of(Verdict v) noexcept;

// Whether the holder counts as alive: anything not proven dead.
inline bool verdict_alive(Verdict v) { return liveness_of(v) != Liveness::kDead; }

// The token a lease file carries (coordination/lease.hpp): 16 lowercase hex digits.
inline constexpr std::size_t kLeaseFileTokenSize = 16;
bool valid_lease_file_token(const std::string& s) noexcept;

// The `lf` of a line whose lease file had no token when the line was written (it could not be written: a
// full file system, its flock held too long): the lease proves nothing on a lease file created since.
inline constexpr const char* kNoLeaseFileToken = "none";

struct HolderIdentity {
    pid_t pid = 0;  // the process, or the binding thread's id for a slot holder
    bool has_start_time = false;
    std::uint64_t start_time = 0;  // clock ticks since boot, as in /proc/<pid>/stat
    bool has_ns = false;
    std::uint64_t ns = 0;  // inode of /proc/<pid>/ns/pid of the writer
    bool has_lease = false;
    std::uint32_t lease = 0;  // byte offset in the lease file
    std::string lease_file;   // the token of the lease file the lease was taken on; kNoLeaseFileToken: it had
                              // none; empty: not recorded (a version before the token)
    pid_t tm = 0;             // the TaskManager whose GPUs a binding line binds; 0: not recorded
    std::string slot;         // a slot holder's id; empty: the pid is the holder

    // Whether its lease names the lease file it was taken on (a token): only then can a free byte prove
    // its holder dead, since a lease file deleted and created again has every byte free.
    bool lease_file_known() const noexcept { return valid_lease_file_token(lease_file); }

    // Whether its pid (and its TaskManager's) is a number of the namespace `ours`: the namespace it
    // records is ours, or it records none (the stock script's lines, and lines of versions before `ns`).
    bool pid_is_in(const PidNamespace& ours) const noexcept;

    // The namespace its pid belongs to: the one recorded, else ours (0 when ours is not known either).
    std::uint64_t namespace_in(const PidNamespace& ours) const noexcept;

    // One key per holder, for counting holders and telling them apart: a slot's threads are one holder,
    // so are a process's lines; always with the namespace, so that equal pids of two containers differ.
    std::string key(const PidNamespace& ours) const;

    // The key of the TaskManager process whose GPUs a binding line binds, as key() names a process
    // holder; empty when no TaskManager is recorded.
    std::string taskmanager_key(const PidNamespace& ours) const;

    bool same_holder(const HolderIdentity& other, const PidNamespace& ours) const {
        return key(ours) == other.key(ours);
    }

    // Whether it was written for the very holder `other` is: the same holder (same_holder), and where both
    // record a start time, the same one (else its pid was reused since).
    bool written_for(const HolderIdentity& other, const PidNamespace& ours) const {
        return same_holder(other, ours) && (!has_start_time || !other.has_start_time || start_time == other.start_time);
    }

    // Whether it records the process `pid` of our namespace: same pid, and the line's namespace is ours.
    // A bare `<index> <pid>` line never records the calling process itself (`pid_is_self`): in a
    // container, a stock line `0 1` belongs to whichever pid 1 wrote it. Start times are not compared.
    bool records(pid_t pid, bool pid_is_self, const PidNamespace& ours) const noexcept;
};

}  // namespace coordination
}  // namespace flinkgpu
