// The calling process's pid namespace, named by the inode of /proc/self/ns/pid (unique while it lives),
// for the two rules that need it: in which namespace a coordination line's pid means something
// (coordination/liveness.hpp) and whether NVML's pids name our processes (host/process_tree.hpp).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>

namespace flinkgpu {

// PROC_PID_INIT_INO: the initial pid namespace's inode, fixed since Linux 3.8. NVML lists the pids of
// this namespace (host pids) wherever it is called from.
inline constexpr std::uint64_t kInitialPidNamespace = 0xEFFFFFFCu;

// The inode of the calling process's pid namespace into *inode; false when /proc/self/ns/pid cannot be
// read (no /proc). Never throws.
inline bool read_own_pid_namespace_inode(std::uint64_t* inode) noexcept {
    struct statx st{};
    if (statx(AT_FDCWD, "/proc/self/ns/pid", AT_STATX_SYNC_AS_STAT, STATX_INO, &st) != 0 ||
        (st.stx_mask & STATX_INO) == 0)
        return false;
    *inode = st.stx_ino;
    return true;
}

}  // namespace flinkgpu
