// Whose is a process that NVML lists on a GPU (docs/design.md §4): the claiming worker's own (the
// owner, its TaskManager, or a descendant of either, by the parent chain in /proc) or foreign.
// NVML reports pids of the host's pid namespace; a pid without a /proc entry in ours is "not
// visible" (typically: we run in a container) and counts as foreign, the safe side.
#pragma once

#include <sys/types.h>

#include <unordered_map>

namespace flinkgpu {

// The Java class whose command line marks a TaskManager process.
inline constexpr const char* kTaskManagerMainClass = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner";

struct ProcessVerdict {
    bool own = false;
    bool visible = false;
};

// One call's view of the process tree; each pid's parent is read once.
class ProcessTree {
public:
    // `taskmanager`: 0 when there is none.
    ProcessTree(pid_t owner, pid_t taskmanager) : owner_(owner), taskmanager_(taskmanager) {}
    ProcessVerdict classify(pid_t pid);

private:
    pid_t parent(pid_t pid);  // -1: no /proc entry for `pid`
    pid_t owner_, taskmanager_;
    std::unordered_map<pid_t, pid_t> parents_;
};

// The parent pid from /proc/<pid>/stat; -1 when there is no such entry or it cannot be read.
pid_t parent_pid(pid_t pid) noexcept;

// The nearest ancestor of `pid` (its parent first) whose command line holds kTaskManagerMainClass;
// 0 when there is none. Never throws.
pid_t find_taskmanager(pid_t pid) noexcept;

}  // namespace flinkgpu
