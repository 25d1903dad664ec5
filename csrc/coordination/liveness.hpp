// Whether the owner of a coordination line is alive (docs/design.md §5.2, §9.4): in our pid namespace by
// /proc/<pid>/stat and kill(pid, 0), never by spawning `ps`; a zombie holds nothing; where the line records
// the owner's start time, a pid reused by another process does not count as the owner. A pid of another pid
// namespace is never judged: only its lease speaks for it.
#pragma once

#include "coordination/lease.hpp"
#include "coordination/lines.hpp"

#include <sys/types.h>

#include <cstdint>
#include <map>
#include <string>

namespace flinkgpu {
namespace coordination {

struct ProcInfo {
    bool exists = false;  // a process that is not a zombie
    bool has_start_time = false;
    std::uint64_t start_time = 0;  // field 22 of /proc/<pid>/stat
};

// Reads /proc/<pid>/stat; falls back to kill(pid, 0) when /proc does not show the process (not
// mounted, or hidepid for another user's process). Never throws.
ProcInfo probe_process(pid_t pid) noexcept;

// Whether `e` was written for the process `p` describes: where both start times are known they
// agree (else the pid was reused).
bool same_process(const Entry& e, const ProcInfo& p) noexcept;

// The pid namespace of the calling process: the inode of /proc/self/ns/pid, read once per process.
// The pids we write and probe are numbers of this namespace.
PidNamespace own_pid_namespace() noexcept;
// The calling process's pid: getpid() once per process (a fork()ed child asks again; its pthread_atfork
// handler forgets the parent's). Every claim needs it several times, and it only changes across fork.
pid_t own_pid() noexcept;
PidNamespace own_pid_namespace(pid_t self) noexcept;  // `self`: own_pid(), already at hand

// Whether `tid` is a thread of the calling process `self` (own_pid()) now.
bool own_thread(pid_t self, pid_t tid) noexcept;

// What the judge may ask about a line, each asked only when the rule needs it.
class Evidence {
public:
    // The state of lease byte `slot` on the lease file whose token is `lease_file` (empty: a line of a version
    // that did not record it); kUnknown when the lease file the path names now is another one.
    virtual LeaseState lease(std::uint32_t slot, const std::string& lease_file) = 0;
    virtual const ProcInfo& process(pid_t pid) = 0;

protected:
    ~Evidence() = default;
};

// The one rule for a line's holder (docs/design.md §9.4):
//   * a line of our namespace (or with no ns field: the stock script's, older versions') is judged by its pid
//     and start time alone: gone, reused, or alive, whatever its lease byte says (a lease file put in place
//     of the old one with its token has every byte free; anyone who can open the lease file can read-lock a
//     dying holder's byte); and a binding line whose TaskManager (`tm`) is gone is stale (an orphan's);
//   * a line of another namespace has only its lease to speak for it, on the lease file it was taken on: a
//     free byte proves it dead, a held one that some process holds it (taken, liveness unknown);
//   * a lease on a lease file since deleted or replaced (its token differs, or the file is gone) proves
//     nothing, nor does a free lease of a line without a token (an older version's, or `lf=none`: its lease
//     file had none, and may have been recreated under it): taken, of unknown liveness;
//   * a slot thread's line (`slot` set, its pid a thread id) of another namespace: the lease is its
//     process's, so a free one proves the thread dead, a held one nothing of the thread (kOtherNamespace: it
//     may have ended while its process lives, and `clean --foreign-namespaces` must be able to remove it).
// Our namespace unknown (no /proc): every line with an ns field counts as another namespace's.
Verdict judge(const Entry& e, const PidNamespace& ours, Evidence& evidence);

// The probes and lease tests of one call, each pid probed and each slot tested once; the calling
// process's own probe is cached per process.
class LineJudge final : public Evidence {
public:
    // `leases` null: lines with a lease field are judged as if they had none.
    explicit LineJudge(Leases* leases);
    void use(Leases* leases) { leases_ = leases; }

    const ProcInfo& process(pid_t pid) override;
    LeaseState lease(std::uint32_t slot, const std::string& lease_file) override;
    const PidNamespace& ns() const { return ns_; }
    pid_t self() const { return self_; }

    // Fills e->verdict and e->alive.
    void judge(Entry* e);

    // Whether the live entry `e` is `owner`'s (`owner_info` its probe): it records the owner, and names our
    // own lease or was written for that very process.
    bool owns(const Entry& e, pid_t owner, const ProcInfo& owner_info);

private:
    Leases* leases_;
    PidNamespace ns_;
    pid_t self_;
    std::map<pid_t, ProcInfo> cache_;
};

}  // namespace coordination
}  // namespace flinkgpu
