// Binding GPUs to the holders inside one TaskManager (docs/design.md §9.3): Flink gives every slot of a
// TaskManager the same GPUs; a binding gives each slot (holder) its own, or shares one among at most k.
//
// Bindings live in their own file, `<coordination file>.bindings`, with the coordination file's rules (locked
// file, line format, liveness judge, lease: coordination_*.hpp); Flink's stock script never reads it. Its
// lines are the coordination file's with the fields `tm`, `share` and `slot` (docs/design.md §5.2, File
// format). A line binds its GPU to its holder:
//   * a process holder (no `slot`): the process <pid> itself (a PyFlink worker, a service's worker process),
//     which holds the lease while it holds bindings, so its death frees them in every pid namespace;
//   * a slot holder (`slot=<id>`: a Flink slot whose subtasks run as threads of the TaskManager JVM): every
//     thread that binds for the slot writes its own lines, <pid> being that thread's id and <start time> its
//     start time: the slot keeps its GPUs while any thread that bound them lives, and loses them when the
//     last one ends (a failed task). A thread of the calling process writes its process's lease too, which
//     proves the process, not the thread: another pid namespace, which cannot probe the thread, sees the
//     lines die with the process (a TaskManager container that ends), and as lines of unknown liveness
//     while it lives.
//
// Bindings are host-wide: a GPU bound by n live holders takes another only if n + 1 <= k of the new binder
// and of every holder already on it; a whole GPU and a MIG unit of it exclude each other. CUDA uses one MIG
// instance per process, so the holders of one process bind at most one MIG unit between them: a process
// holder one of its own, the slots of one TaskManager (threads of one process) one they share.
//
// Every function is noexcept and reports failures in its result's Status, like coordination/claims.hpp.
#pragma once

#include "base/status.hpp"
#include "coordination/claims.hpp"
#include "coordination/lines.hpp"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace flinkgpu {
namespace binding {

struct Holder {
    pid_t pid = 0;          // the process holder, or the binding thread's id for a slot holder
    std::string slot;       // empty: a process holder
    pid_t taskmanager = 0;  // the process whose GPUs are bound (recorded as `tm`); 0: not recorded
    // unbind(): only lines written for the process (thread) started then (BindResult::start_time), so
    // that a thread id reused by another thread of the slot keeps what that thread bound. 0: any.
    std::uint64_t start_time = 0;
};

// A GPU's memory as NVML reads it now (bytes); absent: not known.
struct GpuMemory {
    std::optional<std::uint64_t> total, free;
    // what the binding process itself uses of it: memory a request may reuse (a restarted slot's thread in
    // a TaskManager whose allocator still caches its blocks), beyond what its other live holders there
    // (the TaskManager's other slots) requested
    std::uint64_t own_used = 0;
};

// A memory request per bound GPU (docs/design.md §9.3, Memory): a GPU takes it only where the requests of
// its live holders plus this one fit its total, and its free memory now (with what the binding process
// itself uses of it beyond its other holders' requests there, up to the request) covers it.
struct MemoryRequest {
    // on each GPU bound; 0: the holder's request, if it binds with one already, else none
    std::uint64_t bytes = 0;
    std::vector<GpuMemory> of;  // parallel to the given GPUs; a GPU whose memory is not known takes no request
};

// A live process whose binding line is stale because the TaskManager it recorded is gone (Verdict::
// kTaskManagerGone): an orphaned worker, which may still use the GPU's memory.
struct Orphan {
    pid_t pid = 0;
    pid_t taskmanager = 0;
    std::string index;  // the GPU its line binds
};

// How an orphan is named wherever it is told (a shortage, `flink-gpu list`, doctor): "pid P, a worker of
// TaskManager T which is gone, still runs on GPU <gpus>" (`gpus`: one index, or several joined).
std::string orphan_text(pid_t pid, pid_t taskmanager, const std::string& gpus);

struct BindResult {
    Status status;
    std::vector<std::string> indices;  // the holder's binding for this request, in index order
    std::vector<std::string> added;    // indices newly bound to the holder by this call
    std::vector<coordination::BadLine> unparsable;
    // not ok: a holder of this process bound without a lease, or with one of `lf=none` (coordination/claims.hpp's
    // ClaimResult); the binding itself succeeded
    Status lease_problem;
    std::uint64_t start_time = 0;  // the holder's (thread's) start time, as its lines record it; 0: unknown
    std::string file_identity;     // LockedFile::identity() of the bindings file
    std::uint64_t memory = 0;      // the request the holder's lines record (bytes per GPU); 0: none
    std::vector<Orphan> orphans;   // kNotEnough: the orphans its message names, on GPUs short of memory
};

// How a bind places new GPUs among those of one rank: spread (least-bound first, the default) or pack (the
// most-bound that still has room first, so that whole GPUs stay free for others); with `links`, for a bind of
// two or more, the best joined set of the last rank needed (topology/sets.hpp) before either, what the holder
// binds already counted among its members. MIG units are taken in order (CUDA uses one per process).
struct Placement {
    bool pack = false;
    const topology::Links* links = nullptr;
};

// kInvalidArgument, naming it, unless `slot` is a valid slot id (coordination/lines.hpp's valid_slot).
Status check_slot(const std::string& slot);

// Binds `count` of `gpus` (the holder's TaskManager's GPUs; valid indices) to `holder`, letting at most
// `holders_per_gpu` holders (1..kMaxShare) share each. A holder asking again gets what it has: topped up
// when it asks for more, the lowest `count` of its GPUs when it asks for fewer (a slot holder's thread then
// writes its own lines for them). New GPUs: least-bound first, lowest index among equals; dead holders'
// lines are removed. All or nothing: kNotEnough says, per GPU, who binds it. count == 0 binds nothing.
// `ranks`, when not empty, is parallel to `gpus` (nvml/choice.hpp's ranks: healthy and idle 0, then busy,
// degraded): new GPUs come by rank first, then as `placement` says, then lowest index. With a `memory` request, a
// new GPU must also fit it (MemoryRequest), and the lines record it: a holder keeps the request it bound
// with, whichever of its GPUs are given (asking again with another is kInvalidArgument, without one gets
// it), and a dead holder's request goes with its lines. An orphan's lines (its TaskManager gone, it still
// runs) count for nothing but stay while it runs: a shortage of memory on its GPU names it and how to end it.
BindResult bind(const coordination::Options& opts, const Holder& holder, const std::vector<std::string>& gpus,
                std::size_t count, std::uint32_t holders_per_gpu, const std::vector<int>& ranks = {},
                const MemoryRequest& memory = {}, const Placement& placement = {}) noexcept;

// Removes the lines `holder` wrote: a process holder's, or the lines of one thread of a slot holder (the
// slot keeps what its other threads bound). A missing file holds nothing. This process's lease goes once
// no line names it, whichever holder's lines went (a slot's thread may have ended before its release).
coordination::ReleaseResult unbind(const coordination::Options& opts, const Holder& holder) noexcept;

}  // namespace binding
}  // namespace flinkgpu
