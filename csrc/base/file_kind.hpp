// What a path that is not a regular file is, in the words of flink_gpu.base.regular_files ("is a FIFO
// (named pipe), not a regular file"), for the C++ readers of user-named paths: the NVML loader and
// the simulator's spec reader (header-only: the simulator links nothing of the core).
#pragma once

#include <sys/stat.h>

namespace flinkgpu {

inline const char* file_kind(unsigned mode) noexcept {
    if (S_ISDIR(mode)) return "a directory";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISSOCK(mode)) return "a socket";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    return "not a regular file";
}

}  // namespace flinkgpu
