// One sampler of GPU metrics per process (docs/design.md §9.3): every gauge of the process reads
// one shared snapshot, which the sampler refreshes at most once per interval, whatever the gauges'
// callers (Flink's reporters, PyFlink's bundles) ask. A gauge never calls NVML and never waits for a
// read: the snapshot's mutex is never held across an NVML call. Each watched GPU (with its MIG units)
// has a reader thread of its own, so a GPU whose queries hang blanks only its own gauges: one whose
// read has not returned within kSampleMargin (or whose health read is stuck) shows -1 and health
// kUnknown, gets no other read (and no other thread) until that one returns, and the others are read
// on; a lost one -1 and kUnhealthy.
#pragma once

#include "nvml/metrics.hpp"

#include <chrono>
#include <string>
#include <string_view>

namespace flinkgpu {

// The `health` gauge: what monitoring is told about the GPU behind the value gauges.
enum class GaugeHealth : int {
    kOk = 0,
    kDegraded = 1,   // a degraded finding (docs/design.md §9.1): the values are read
    kUnhealthy = 2,  // an unhealthy finding, or the GPU is lost (a reading answered GPU_IS_LOST,
                     // RESET_REQUIRED, or its handle is refused): values -1
    kUnknown = 3,    // not read in time (or not yet, or NVML cannot be loaded): values -1
};

using SteadyTime = std::chrono::steady_clock::time_point;

// The pace of the sampler: `metrics.interval` (docs/design.md §9.3), never below the minimum.
inline constexpr std::chrono::milliseconds kMinMetricsInterval{1000};
inline constexpr std::chrono::milliseconds kDefaultMetricsInterval{5000};
// A sample older than its interval plus this margin is not in time: its GPU is kUnknown. Also how
// long a sample waits for a GPU's read: one not back by then is late (kUnknown until it returns).
inline constexpr std::chrono::milliseconds kSampleMargin{1000};
// Health findings (InfoROM, ECC, remapped rows, ... through the choice's state path) change slowly
// and cost more than the readings: they are read on the first sample and then at most this often.
// A GPU lost in between is seen by its readings at once.
inline constexpr std::chrono::milliseconds kHealthReadInterval{60000};

// What a GPU's gauges show: utilization, memory used, temperature, power (Metric order) and health.
struct SampledGpu {
    long long values[kMetricCount] = {-1, -1, -1, -1};
    GaugeHealth health = GaugeHealth::kUnknown;
};

// Adds the GPU `index` (as GPUInfo carries it, "<i>" or "<i>:<slot>") of the library at
// `library_path` (as NvmlLibrary::acquire takes it) to what this process's sampler samples, and
// sets its interval (the last call's, at least kMinMetricsInterval). Starts the sampler
// when it is not running in this process (the first call; a fork()ed child's first call, or its
// first sampled_gpu). Calls no NVML. False when the sampler could not be started (a thread or memory
// refused): the gauges then show kUnknown. Never throws.
bool watch_gpu_metrics(const std::string& library_path, std::string_view index,
                       std::chrono::milliseconds interval) noexcept;

// What the gauges of `index` show at `now`: the last completed sample, or -1 and kUnknown when that
// sample completed more than interval + kSampleMargin before `now` (or there is none yet, or the
// GPU is not watched). Takes the snapshot's mutex only; never calls NVML. Never throws.
SampledGpu sampled_gpu(const std::string& library_path, std::string_view index, SteadyTime now) noexcept;

// Makes the sampler take a sample now (ahead of its pace) and waits at most `timeout` until that
// sample and every GPU's read have completed; true when they did (false while a read is stuck). For tests and
// benchmarks: gauges never call it. Never throws.
bool sample_gpu_metrics_now(std::chrono::milliseconds timeout) noexcept;

// How many samples this process's sampler has completed (since its start in this process) by the
// time each watched GPU had shown its first reading. A sample completes without the GPUs whose reads
// are late, but one whose first read is late holds the count back until it answers: a caller waiting
// for its GPUs' first values (binding's update_metrics) waits for it.
unsigned long long completed_samples() noexcept;

}  // namespace flinkgpu
