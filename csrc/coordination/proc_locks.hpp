// The stock script's side of the coordination file, read from /proc (docs/design.md §5.2). Best effort
// and read-only: nothing here changes a file or a lock.
//
//   * who holds a flock on an inode, for a timeout's message: /proc/locks, then the holders' fdinfo;
//   * whether a stock script that reclaimed with `sed -i` still writes the copy it renamed over the
//     path, holding the lock of the inode it replaced: /proc/locks, read only while the locked inode is
//     young and not yet settled (the proof and the costs are in the .cpp and the design).
#pragma once

#include <fcntl.h>
#include <sys/stat.h>

#include <cstdint>
#include <string>

namespace flinkgpu {
namespace coordination {

// The pids holding a flock on the inode `st` describes, "1234" or "1234, 1240"; "" when unknown.
std::string lock_holders(const struct statx& st);

// The pid of a stock script still writing the copy of the file that the inode open as the locked `fd`
// (`locked`: its statx, with the birth time) replaced; 0 when there is none or there cannot be one.
long replaced_copy_writer(int fd, const struct statx& locked);

// How many times this process has read /proc/locks for replaced_copy_writer: for tests of how rarely.
std::uint64_t proc_locks_reads() noexcept;

}  // namespace coordination
}  // namespace flinkgpu
