// NVML reads with a deadline (docs/design.md §9.5). Any NVML call may take seconds or never return
// (a wedged driver, a GPU under ECC storms), and a thread stuck in one cannot be cancelled. So a state
// read runs on a worker thread and the caller waits for it at most a deadline; what was not read in
// time is `unknown` and never handed out. The worker names each NVML call before it makes it, so that
// the caller can say which query stalled. A worker that misses its deadline is abandoned: it keeps
// its own shared block (so it writes nowhere the caller owns), goes back to idle when its call
// returns, and until then the GPU it is stuck on is unknown at once to every later read, which starts
// no other thread on it (no pile-up; a call about the whole library, nvmlDeviceGetCount, starts none
// at all). The workers are nvml/workers.hpp's. A forked child has no stuck reads and starts afresh.
#pragma once

#include "nvml/devices.hpp"
#include "nvml/read.hpp"
#include "nvml/state.hpp"

#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace flinkgpu {

// nvml-timeout's default, and --nvml-timeout's for flink-gpu-discovery: well inside Flink's 10 s
// discovery-script.timeout.
inline constexpr double kDefaultNvmlTimeoutSeconds = 5.0;

// One NVML call past its deadline.
struct Stall {
    int gpu = ReadMonitor::kLibrary;  // the GPU's NVML index; kLibrary: a call about the whole library
    std::string function;             // the NVML call in flight
    double seconds = 0;               // how long it has been in flight
    bool earlier = false;             // still stuck from an earlier read: nothing was started for it now
};

// "GPU 3's nvmlDeviceGetRemappedRows did not return within 5 s", "nvmlInit_v2 has not returned for 12 s".
std::string stall_text(const Stall& stall, double timeout_seconds);

// query_states with a deadline of `timeout_seconds` (> 0) for all GPUs together, read one after the
// other on one worker thread (a real driver serialises them on its own lock anyway). A worker that
// has been inside one call on one GPU for a sixteenth of the time left (the caller wakes then: 312 ms
// of the default 5 s) keeps that GPU, and another worker reads the GPUs after it within the same
// deadline; that one hands on in turn when its own call lasts a sixteenth (at most one stuck thread
// per GPU, plus one for a library-wide call). So behind a driver lock that hangs every call, the k-th
// GPU's worker starts a little after k sixteenths: at most 16 GPUs (every GPU of a host of 8) get
// their own call and are named stuck; any after those are "not read" behind the last. A GPU not read
// in time, or one an earlier read is still stuck on, is a state of
// health unknown saying why; `stalls` names the calls. `*count_known` false: not even the GPU count
// was read (then `out` is empty). An NVML failure of the whole library within the deadline is the
// status, as query_states's.
// `spent_seconds`: the part of the timeout already used by earlier NVML work of the same deadline
// (flink-gpu-discovery's init); the texts name the whole timeout. `*count`: the GPU count read, when
// known. Never throws.
Status query_states_within(const NvmlLibrary& lib, pid_t owner, pid_t taskmanager, const CheckSet& enforced,
                           const ReadPlan& plan, double timeout_seconds, std::vector<DeviceState>* out,
                           std::vector<Stall>* stalls, bool* count_known, double spent_seconds = 0,
                           unsigned* count = nullptr) noexcept;

// Runs `job`, an NVML step named `function` (a string literal: nvmlInit_v2, the enumeration), on a worker
// thread and waits for it at most `timeout_seconds`. True when it returned; false with `*stall` when it
// did not (or, with stall->function empty and *status set, when no thread could be started). The job
// may outlive the call: everything it touches must outlive it (static storage, or its own). `gpu`: the
// one GPU the step is about, whose later reads alone it keeps unknown while it is stuck (and which no
// later step starts on then); kLibrary, a step about the whole library, which keeps every later step
// from starting while it is stuck. Never throws.
bool run_within(double timeout_seconds, const char* function, std::function<void()> job, Stall* stall, Status* status,
                int gpu = ReadMonitor::kLibrary) noexcept;
// The same for a job that names each NVML call before it makes it (`monitor.calling(gpu, "nvml...")`), so
// that a stall names the call that did not return rather than `function`.
bool run_within(double timeout_seconds, const char* function, std::function<void(ReadMonitor& monitor)> job,
                Stall* stall, Status* status, int gpu = ReadMonitor::kLibrary) noexcept;

// Whether a thread of this process is still inside an NVML call that missed its deadline: then the
// process must leave with _exit (exit() would run destructors under that thread).
bool nvml_call_outstanding() noexcept;

// The status of an NVML step that missed its deadline: kNvml with NVML_ERROR_TIMEOUT and the stalled
// call as its function, the message naming the call, the library `library_path` (as acquire() resolved
// it), the timeout and what to check. Never throws.
Status stall_failure(const Stall& stall, double timeout_seconds, const std::string& library_path) noexcept;

// NvmlLibrary::acquire(library_path) (dlopen and nvmlInit_v2) through run_within: `*lib` once it
// returned in `timeout_seconds`; its own failure as it returned; else stall_failure with `*stall` (then
// the call goes on alone, and until it returns every later open, enumeration and state read of this
// process answers at once with the same stall instead of waiting again). Never throws.
Status open_within(const std::string& library_path, double timeout_seconds, const NvmlLibrary** lib,
                   Stall* stall) noexcept;

// enumerate_devices(lib, ..., only) likewise, its result in `*found`; an enumeration of one GPU only is
// a step about that GPU (run_within's `gpu`): stuck, it keeps that GPU unknown, not the library. Never
// throws.
Status enumerate_within(const NvmlLibrary& lib, double timeout_seconds, Enumeration* found, Stall* stall,
                        const std::optional<std::vector<unsigned>>& only = std::nullopt) noexcept;

}  // namespace flinkgpu
