// Whose is a process that NVML lists on a GPU (docs/design.md §4): the claiming worker's own (the
// owner, its TaskManager, or a descendant of either, by the parent chain in /proc) or foreign.
// NVML reports pids of the initial (host) pid namespace, which name our processes only where we run
// in that namespace too (docs/design.md §9.1): in any other (a container) every listed pid is "not
// visible" and foreign, the safe side, even one that a process of ours happens to have. And whether
// our parent is the process that started us or a reaper that adopted us (docs/design.md §6.1).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace flinkgpu {

// The Java class whose command line marks a TaskManager process.
inline constexpr const char* kTaskManagerMainClass = "org.apache.flink.runtime.taskexecutor.TaskManagerRunner";

struct ProcessVerdict {
    bool own = false;
    bool visible = false;
};

// One call's view of the process tree; each pid's parent is read once, the caller's pid namespace at
// the first classify.
class ProcessTree {
public:
    // `taskmanager`: 0 when there is none.
    ProcessTree(pid_t owner, pid_t taskmanager) : owner_(owner), taskmanager_(taskmanager) {}
    // As if the caller's pid namespace had the inode `pid_namespace` (nullopt: unreadable).
    ProcessTree(pid_t owner, pid_t taskmanager, std::optional<std::uint64_t> pid_namespace)
        : owner_(owner), taskmanager_(taskmanager), namespace_read_(true), pid_namespace_(pid_namespace) {}
    // `pid`: as NVML lists it, a pid of the initial pid namespace.
    ProcessVerdict classify(pid_t pid);

private:
    pid_t parent(pid_t pid);  // -1: no /proc entry for `pid`
    pid_t owner_, taskmanager_;
    bool namespace_read_ = false;
    std::optional<std::uint64_t> pid_namespace_;
    std::unordered_map<pid_t, pid_t> parents_;
};

// The parent pid from /proc/<pid>/stat; -1 when there is no such entry or it cannot be read.
pid_t parent_pid(pid_t pid) noexcept;

// `pid` and its ancestors, nearest first, at most `limit` of them, each with its command name as
// /proc/<pid>/stat gives it; the chain ends at a process without an entry in our /proc (outside our pid
// namespace, or gone) or at pid 0. May throw std::bad_alloc.
struct ProcessAncestor {
    pid_t pid = 0;
    std::string command;
};
std::vector<ProcessAncestor> process_ancestry(pid_t pid, std::size_t limit);

// The nearest ancestor of `pid` (its parent first) whose command line holds kTaskManagerMainClass;
// 0 when there is none. Never throws.
pid_t find_taskmanager(pid_t pid) noexcept;

// What shows that `parent`, the calling process's parent, started it rather than adopted it: a reaper
// (pid 1 of our pid namespace, or a subreaper: nothing in /proc says which process is one) becomes the
// parent of a process whose parent died. A launcher shares its process group with the child (Java's
// ProcessBuilder, Python's subprocess, a shell without job control, a wrapper that execs); a shell
// with job control makes the child lead a group of its own, in the shell's session; a launcher that
// gives the child a session of its own (setsid, start_new_session) still reads its output. A reaper
// does none of these, unless the dead launcher was in its process group (a shell that is pid 1 of a
// container and ran the launcher without job control).
enum class ParentEvidence {
    kNone,          // none of these: taken for a reaper
    kProcessGroup,  // `parent` is in our process group
    kSession,       // we lead our own process group, and `parent` is in our session
    kReadsOutput,   // `parent` holds the read end of the pipe that is our stdout
};

// The first evidence that holds, in the order above; kNone for `parent` <= 0 (outside our pid
// namespace). `parent` may have died meanwhile: the caller checks getppid() afterwards.
ParentEvidence parent_evidence(pid_t parent) noexcept;

}  // namespace flinkgpu
