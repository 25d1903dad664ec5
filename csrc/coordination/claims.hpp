// The coordination file shared by the GPU workers of one host (docs/design.md §5).
//
// Interoperates with Flink's stock `nvidia-gpu-discovery.sh --enable-coordination-mode`: same file
// (default /var/tmp/flink-gpu-coordination), same lines (docs/design.md §5.2, File format; coordination/lines.hpp),
// same BSD flock(2) on the file itself (coordination/file.hpp).
//
// Rules (each one fixes a bug of the stock script, docs/design.md §5.1):
//   * liveness by kill(pid, 0) and /proc, never by spawning `ps`; a zombie holds nothing; a recorded
//     start time tells a recycled pid from its owner (coordination/liveness.hpp);
//   * exact index match, never a pattern;
//   * the file is rewritten in place under the lock, never replaced, and the locked inode is checked
//     to be the one the path names;
//   * symlinks, non-regular files and files with more than one hard link are refused;
//   * lock waits are bounded (Options::timeout_ms);
//   * a line we cannot parse is kept byte for byte, its index is never reclaimed, and it is reported.
//
// Permissions: the file is created with mode 0644 (further reduced by the umask), owned by the creating
// user. Any user may read it (tools, `flink-gpu`), only that user may claim. On a host where the
// TaskManagers run under different users, the administrator pre-creates the file with group write
// permission (e.g. `install -m 0660 -g flink /dev/null /var/tmp/flink-gpu-coordination`) or points all
// workers at a file in a shared directory. We deliberately do not create it world-writable: any local
// user could then take all GPUs or plant lines.
//
// Pid namespaces (docs/design.md §9.4): each line records the namespace its pid belongs to, and the lines
// of a process claiming for itself name its lease (coordination/lease.hpp), which proves its liveness
// to every namespace sharing the file. A line of another namespace without a lease is never judged by
// its pid: it stays taken (liveness unknown) until its owner releases it or clean_stale(..., true)
// removes it. A bare stock line `<index> <pid>` is judged as the stock script judges it, but never counts
// as the calling process's own.
//
// Limits we cannot remove alone: a stock script that reclaims replaces the file (`sed -i`) while holding
// the lock on the old inode, then appends to the new one; a process that opens the path after the
// replacement is not excluded from that short remainder (stock bug B2 — we detect the replacement when we
// waited on the old inode, and never replace the file ourselves). A stock-script TaskManager of another
// pid namespace writes a bare pid of that namespace: where that pid is dead in ours, its line looks
// exactly like a dead owner's and is reclaimed.
//
// Every function is noexcept and reports failures in its result's Status (kInvalidArgument, kNotEnough,
// kTimeout, kOsError, kOutOfMemory, kInternal): nothing is thrown across the API, std::bad_alloc
// included. They may be called from any thread: each call opens its own file description, and flock(2)
// excludes between open file descriptions even inside one process. The only process-wide state is the
// lease registry (one lease per coordination path, behind a mutex) and the cached own probe and namespace.
#pragma once

#include "base/notice.hpp"
#include "base/status.hpp"
#include "coordination/lines.hpp"
#include "flink/script_args.hpp"
#include "topology/links.hpp"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace flinkgpu {
namespace coordination {

struct Options {
    std::string path = kDefaultCoordinationFile;
    // How long to wait for the lock (and for a path that keeps being replaced). 0: try once.
    std::int64_t timeout_ms = 5000;
};

struct ClaimResult {
    Status status;
    std::vector<std::string> indices;    // what the owner now has for this request, in index order
    std::vector<std::string> added;      // indices newly written for the owner by this call
    std::vector<std::string> reclaimed;  // subset of `added` taken back from dead owners
    std::vector<BadLine> unparsable;
    // Not ok: the calling process claimed for itself but could not take its lease (the lines have none), or
    // took one on a lease file without a token (the lines say `lf=none`): other namespaces cannot tell when
    // it dies. The claim itself succeeded.
    Status lease_problem;
    // Of claim()'s `not_takeable`: those no other live holder has any more (the caller may read them and ask
    // again).
    std::vector<std::string> untaken;
    // What to log: each unparsable line, a lease problem (warnings), the GPUs reclaimed (info).
    Notices notices;
};

struct ReleaseResult {
    Status status;
    std::vector<std::string> released;  // indices whose lines of this owner were removed
};

struct Snapshot {
    Status status;
    bool exists = false;  // false: there is no file (nothing is created by a snapshot)
    std::vector<Entry> entries;
    std::vector<BadLine> unparsable;
};

struct CleanResult {
    Status status;
    std::vector<Entry> removed;  // the stale entries that were deleted
    std::vector<BadLine> unparsable;
};

// The host's GPUs that are not among a claim's candidates, each with why: (index, why), in index order
// (nvml/choice.hpp's Ranking::left_out). A not-enough message counts them among the host's GPUs and names
// each one ("GPU 1 is unknown (<why>)" for a why "unknown: <why>", else "GPU 1 is left out (<why>)").
using LeftOut = std::vector<std::pair<std::string, std::string>>;

// Claims `amount` GPUs for the live process `owner` among `existing_indices` (NVML order; strings as
// NVML/nvidia-smi report them, no whitespace). An owner asking again gets what it holds: topped up when it
// asks for more; when it asks for fewer, the lowest `amount` of its indices are returned and it keeps
// holding all of them until it releases them. Otherwise free indices first, then dead owners' indices,
// lowest first. All or nothing: on kNotEnough the file is unchanged and the message says how many were
// requested, how many exist and who holds the rest. amount == 0 returns nothing without touching the file.
// `ranks`, when not empty, is parallel to `existing_indices` (nvml/choice.hpp's ranks): after what the
// owner holds, lower ranks are taken first, and within a rank free indices before reclaimable ones.
// `left_out`: the host's GPUs that are not candidates (never claimed), for the not-enough message only.
// `not_takeable`: among `existing_indices`, those never taken (their state was not read because another
// live holder had them): counted and named with their holders, and in ClaimResult::untaken when free.
// `links`, when given: of the last rank the claim needs, the best joined set is taken (topology/sets.hpp), what
// the owner holds counted among its members; without, the lowest indices.
ClaimResult claim(const Options& opts, pid_t owner, const std::vector<std::string>& existing_indices,
                  std::size_t amount, const std::vector<int>& ranks = {}, const LeftOut& left_out = {},
                  const std::vector<std::string>& not_takeable = {}, const topology::Links* links = nullptr) noexcept;

// The kNotEnough failure of a claim for more GPUs than claim() can count (`amount` as text, e.g. one of
// Python's unbounded ints): claim()'s message without holders, the file not read (kInvalidArgument for a
// bad index).
Status not_enough(const Options& opts, const std::string& amount, const std::vector<std::string>& existing_indices,
                  const LeftOut& left_out = {}) noexcept;

// Removes every line of `owner`. A missing file is not an error (nothing is held).
ReleaseResult release(const Options& opts, pid_t owner) noexcept;

// Removes the lines of `owner` for the given indices only.
ReleaseResult release_indices(const Options& opts, pid_t owner, const std::vector<std::string>& indices) noexcept;

// Reads the file under a shared lock. Never creates it.
Snapshot snapshot(const Options& opts) noexcept;

// Removes the lines of dead owners (unparsable lines stay), and with `other_namespaces` also those of
// other pid namespaces whose liveness is unknown. Never creates the file.
CleanResult clean_stale(const Options& opts, bool other_namespaces = false) noexcept;

// Why each file beside the coordination file (its lease file, its bindings file, that one's lease file) that
// exists would be refused for its owner or mode (coordination/file.hpp's check_companion_owner): none when
// every one is trusted or absent.
std::vector<Status> check_companions(const Options& opts) noexcept;

// The one sentence of each event a claim or a bind reports: line `line` of the `role` ("coordination file",
// "bindings file") `path` kept as it is, so that its GPU is `never` ("reclaimed", "bound"); `gpus` taken for pid
// `pid` in `path` without a lease other pid namespaces can rely on, and `why`.
std::string unparsable_text(const char* role, const std::string& path, const BadLine& line, const char* never);
std::string lease_problem_text(const std::vector<std::string>& gpus, const std::string& path, const std::string& why,
                               pid_t pid);

// The start time of a process (field 22 of /proc/<pid>/stat); false when it cannot be read.
bool process_start_time(pid_t pid, std::uint64_t* start_time) noexcept;

}  // namespace coordination
}  // namespace flinkgpu
