// The dynamic state of every GPU at the moment a choice is made (docs/design.md §4): health
// readings, the processes NVML lists on it, memory used and free, compute mode. Point-in-time
// queries, no event loop. Every query is optional: an absent entry point, NOT_SUPPORTED,
// FUNCTION_NOT_FOUND or NO_PERMISSION is no finding (NO_PERMISSION on a process query makes the
// processes unknown).
#pragma once

#include "nvml_loader.hpp"

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

namespace flinkgpu {

enum class Health { kOk, kDegraded, kUnhealthy };

// What the health queries found; gpu_choice.hpp turns it into a verdict.
struct HealthReadings {
    int lost_code = NVML_SUCCESS;  // GPU_IS_LOST or RESET_REQUIRED from a state query
    const char* lost_function = nullptr;
    bool inforom_corrupted = false;                   // nvmlDeviceValidateInforom
    bool remap_failed = false, remap_pending = false;  // nvmlDeviceGetRemappedRows
    unsigned long long ecc_uncorrected_volatile = 0;  // only read while ECC is on
    unsigned recovery_action = NVML_GPU_RECOVERY_ACTION_NONE;  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    bool pages_pending = false;                       // nvmlDeviceGetRetiredPagesPendingStatus
};

enum class ProcessKind { kCompute, kGraphics, kMps };
const char* process_kind_name(ProcessKind kind) noexcept;

struct GpuProcess {
    unsigned pid = 0;
    std::optional<unsigned long long> used_memory;  // bytes; absent where NVML cannot say
    ProcessKind kind = ProcessKind::kCompute;
    bool own = false;      // the owner, its TaskManager or a descendant of either
    bool visible = false;  // has a /proc entry in our pid namespace
};

struct DeviceState {
    std::string index;  // as DeviceInfo::index: "<i>" for a GPU, "<parent>:<slot>" for a MIG unit
    unsigned nvml_index = 0;  // the GPU's; a unit's parent's
    std::optional<unsigned> mig_slot;
    HealthReadings readings;
    Health health = Health::kOk;
    std::string health_text = "ok";     // "ok", "degraded: <reason>" or "unhealthy: <reason>"
    std::vector<std::string> findings;  // every finding, unhealthy ones first
    std::optional<unsigned long long> memory_used, memory_free;
    std::vector<GpuProcess> processes;
    bool processes_known = true;  // false: a process query answered NO_PERMISSION
    bool busy = false;            // a process that is not own
    std::optional<std::string> compute_mode;  // "default", "exclusive_process", "prohibited", ...
};

// A device's memory in use and free (bytes): nvmlDeviceGetMemoryInfo_v2, else (absent, or an answer
// that is no finding, as a stub of the symbol gives) the original query. Returns the NVML code of
// the query that answered, *function naming it (nullptr and NVML_ERROR_FUNCTION_NOT_FOUND when the
// driver has neither). Never throws.
struct MemoryReading {
    unsigned long long used = 0, free = 0;
};
int read_memory(const NvmlApi& api, nvmlDevice_t dev, MemoryReading* out, const char** function) noexcept;

// The state of every device whose handle NVML gives (a MIG GPU's units in its place), in index order (the others are the skipped
// ones of enumerate_devices). `owner`: the claiming process; `taskmanager`: its TaskManager, 0 for
// none. Errors that concern the whole library fail the call. Never throws.
Status query_states(const NvmlLibrary& lib, pid_t owner, pid_t taskmanager, std::vector<DeviceState>* out) noexcept;

}  // namespace flinkgpu
