// Which GPUs to hand out, best first (docs/design.md §4): the ranking of candidates, judged by
// nvml/health.hpp, under a busy-gpus policy. Used by the Python API and by
// flink-gpu-discovery alike.
#pragma once

#include "nvml/deadline.hpp"
#include "nvml/state.hpp"
#include "nvml/topology.hpp"

#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace flinkgpu {

// busy-gpus: avoid (busy GPUs only when short), exclude (never a busy GPU), ignore (Flink's order).
enum class BusyPolicy { kAvoid, kExclude, kIgnore };
inline constexpr const char* kBusyPolicyValues = "avoid, exclude, ignore";
// One of kBusyPolicyValues, ASCII case and surrounding blanks (chars <= U+0020, Java's trim) ignored:
// the driver parameter and --busy-gpus in the args read alike (docs/design.md §9.1).
bool parse_busy_policy(std::string_view text, BusyPolicy* out) noexcept;

// topology: prefer (a choice of two or more takes the best joined set of its class: topology/sets.hpp), ignore
// (Flink's index order within a class; no topology is read).
enum class TopologyPolicy { kPrefer, kIgnore };
inline constexpr const char* kTopologyPolicyValues = "prefer, ignore";
// As parse_busy_policy.
bool parse_topology_policy(std::string_view text, TopologyPolicy* out) noexcept;

// Why a GPU is busy: its foreign processes, e.g. "busy: foreign processes 123 (compute), 456
// (graphics, not visible in this pid namespace)".
std::string busy_reason(const DeviceState& state);

struct Ranking {
    std::vector<std::string> indices;                           // the candidates, best first
    std::vector<int> ranks;                                     // parallel to indices: 0 best; lower ranks go first
    std::vector<std::pair<std::string, std::string>> left_out;  // (index, why), in index order
};

// Unhealthy and unknown GPUs are never offered. Classes, in order: healthy & not busy, healthy & busy (avoid
// only; exclude leaves busy GPUs out; ignore treats every GPU as not busy), degraded & not busy,
// degraded & busy; within a class the lowest index first.
Ranking rank_gpus(const std::vector<DeviceState>& states, BusyPolicy policy);

struct Choice {
    std::vector<DeviceState> states;  // one per enumerated device, in its order
    Ranking ranking;
    std::vector<Stall> stalls;  // the NVML calls that did not return in time (their GPUs are unknown)
    // Enumerated devices a scoped read did not read (held elsewhere, or after enough were found): they
    // have no state and are neither ranked nor left out.
    std::vector<std::string> unread;
};

// The one choice of GPUs, for flink-gpu-discovery and the Python API alike: the state now of each of
// `enumerated` (the indices of enumerate_devices' devices), judged with `enforced`, ranked under
// `policy`. A device enumerated earlier that NVML no longer answers for is an unhealthy state naming
// the refusing call, never dropped. `owner`, `taskmanager`: as query_states. The states are read
// within `timeout_seconds` (nvml/deadline.hpp): a device not read in time is unknown, left out. The
// process lists are read only where `policy` looks at them (not for ignore). InfoROM validity comes from
// the process's cache (kInforomRecheckSeconds) unless `fresh_inforom`, and is read again when a cached
// finding leaves nothing usable. `scope` limits what is read (nvml/state.hpp); a device of a GPU it did not
// read is in Choice::unread. With scope.every_read, `enumerated` is not looked at: the states are the
// devices the read finds. With `topology`, the nvlink check is judged (judge_nvlinks) before the ranking. A GPU
// found lost or needing a reset is forgotten by the topology (forget_topology). Never throws.
Status choose_gpus(const NvmlLibrary& lib, const std::vector<std::string>& enumerated, pid_t owner, pid_t taskmanager,
                   BusyPolicy policy, const CheckSet& enforced, double timeout_seconds, Choice* out,
                   double spent_seconds = 0, bool fresh_inforom = false, const ReadScope& scope = ReadScope(),
                   const Topology* topology = nullptr) noexcept;

// The nvlink check on `states` from `topology` (each whole GPU it read: its links; a MIG unit has none of its
// own), judged again with `enforced`. choose_gpus does it when given a topology.
void judge_nvlinks(const Topology& topology, const CheckSet& enforced, std::vector<DeviceState>* states);

// What a choice under `policy` reads (docs/design.md §9.1, "Query plan").
ReadPlan read_plan(BusyPolicy policy) noexcept;

}  // namespace flinkgpu
