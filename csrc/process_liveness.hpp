// Whether the owner of a coordination line is alive (docs/design.md §5.1): by /proc/<pid>/stat and
// kill(pid, 0), never by spawning `ps`; a zombie holds nothing; where the line records the owner's
// start time, a pid reused by another process does not count as the owner.
#pragma once

#include "coordination_lines.hpp"

#include <sys/types.h>

#include <cstdint>
#include <map>

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

// The probes of one call, each pid probed once; the calling process's own probe is cached per process.
class Liveness {
public:
    const ProcInfo& get(pid_t pid);
    // Alive: the pid exists and is still the process the entry was written for.
    bool alive(const Entry& e);

private:
    std::map<pid_t, ProcInfo> cache_;
};

}  // namespace coordination
}  // namespace flinkgpu
