// The dynamic state of a GPU at the moment a choice is made (docs/design.md §4), as a record: health
// readings, the processes NVML lists on it, memory used and free, compute mode; and what a state read
// reads. The read itself is nvml/read.hpp, the verdict on the readings nvml/health.hpp.
#pragma once

#include "nvml/loader.hpp"

#include <sys/types.h>

#include <array>
#include <bitset>
#include <cstddef>
#include <optional>
#include <string>
#include <vector>

namespace flinkgpu {

// kUnknown: the state could not be read in time (an NVML call past its deadline, nvml/deadline.hpp);
// such a GPU is never handed out.
enum class Health { kOk, kDegraded, kUnhealthy, kUnknown };

// The health checks, each one NVML reading (docs/design.md §9.1 has the table). `health-checks`
// names them; a GPU that is lost or needs a reset is unhealthy whatever is enforced.
enum class Check { kInforom, kRemappedRows, kEcc, kRecoveryAction, kFabric, kRetiredPages, kNvlink, kCount };
inline constexpr std::size_t kCheckCount = static_cast<std::size_t>(Check::kCount);
const char* check_name(Check check) noexcept;  // "inforom", "remapped-rows", ...
using CheckSet = std::bitset<kCheckCount>;     // the checks whose findings decide health
inline CheckSet all_checks() noexcept { return CheckSet().set(); }

// What one check said about a device: not looked at is not healthy.
enum class Outcome {
    kOk,             // read, nothing found
    kFinding,        // read, something found (CheckResult::finding)
    kNotSupported,   // the driver lacks the query or the GPU answers NOT_SUPPORTED
    kNoPermission,   // NVML refused it (NO_PERMISSION)
    kNotApplicable,  // nothing to read in this configuration (ECC counters while ECC is off)
};
const char* outcome_name(Outcome outcome) noexcept;  // "ok", "finding", "not supported", ...

// NVML_GPU_FABRIC_STATE_* with the probe status (valid once COMPLETED) and, from a v3 struct, the
// health summary (NVML_GPU_FABRIC_HEALTH_SUMMARY_*; NOT_SUPPORTED where the struct has none).
struct FabricReading {
    unsigned state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
    int status = NVML_SUCCESS;
    unsigned health_summary = NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED;
};

// What the health queries found; nvml/health.hpp turns it into a verdict.
struct HealthReadings {
    int lost_code = NVML_SUCCESS;  // GPU_IS_LOST or RESET_REQUIRED from a state query; any code from the handle query
    const char* lost_function = nullptr;
    bool inforom_corrupted = false;  // nvmlDeviceValidateInforom
    bool inforom_cached = false;     // that answer is the process's cached one (kInforomRecheckSeconds)
    bool remap_failed = false, remap_pending = false;          // nvmlDeviceGetRemappedRows
    unsigned long long ecc_uncorrected_volatile = 0;           // only read while ECC is on
    unsigned recovery_action = NVML_GPU_RECOVERY_ACTION_NONE;  // NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
    FabricReading fabric;        // nvmlDeviceGetGpuFabricInfoV, else nvmlDeviceGetGpuFabricInfo
    bool pages_pending = false;  // nvmlDeviceGetRetiredPagesPendingStatus
    // From the topology read (nvml/topology.hpp), where a choice made one: the GPU's NVLinks, how many are not
    // active, and whether they lead to an NVSwitch (then a GPU with none active is cut off its fabric).
    unsigned nvlinks = 0, nvlinks_inactive = 0;
    bool nvlink_fabric = false;
    // Why nothing is known: "<query> did not return within 5 s" and the like (nvml/deadline.hpp);
    // empty when the GPU was read.
    std::string unknown;
    // per Check: how its query answered (kFinding is set by judge_health)
    std::array<Outcome, kCheckCount> answered{Outcome::kNotSupported, Outcome::kNotSupported, Outcome::kNotSupported,
                                              Outcome::kNotSupported, Outcome::kNotSupported, Outcome::kNotSupported,
                                              Outcome::kNotSupported};
};

// One check's result on one device.
struct CheckResult {
    Outcome outcome = Outcome::kNotSupported;
    Health verdict = Health::kOk;  // of the finding; counts for the device only when enforced
    std::string finding;           // kFinding: what was found; kNotApplicable: why, where it says ("" else)
    bool enforced = true;
};

enum class ProcessKind { kCompute, kGraphics, kMps };
const char* process_kind_name(ProcessKind kind) noexcept;

struct GpuProcess {
    unsigned pid = 0;                               // of the initial (host) pid namespace, as NVML reports it
    std::optional<unsigned long long> used_memory;  // bytes; absent where NVML cannot say
    ProcessKind kind = ProcessKind::kCompute;
    bool own = false;      // the owner, its TaskManager or a descendant of either
    bool visible = false;  // has a /proc entry here, and we are in the initial pid namespace (host/process_tree.hpp)
};

struct DeviceState {
    std::string index;        // as DeviceInfo::index: "<i>" for a GPU, "<parent>:<slot>" for a MIG unit
    unsigned nvml_index = 0;  // the GPU's; a unit's parent's
    std::optional<unsigned> mig_slot;
    HealthReadings readings;
    Health health = Health::kOk;        // from the lost state and the enforced checks' findings
    std::string health_text = "ok";     // "ok", "degraded: <reason>", "unhealthy: <reason>" or "unknown: <why>"
    std::vector<std::string> findings;  // every enforced finding, unhealthy ones first
    std::vector<std::string> warnings;  // enforced findings that leave health ok (RECOVER_IMEX_DOMAIN)
    std::array<CheckResult, kCheckCount> checks;  // per Check, enforced or not
    std::optional<unsigned long long> memory_used, memory_free;
    std::optional<unsigned long long> memory_total;  // its own reading only: a MIG unit never takes its GPU's
    std::vector<GpuProcess> processes;
    bool processes_known = true;              // false: a process query answered NO_PERMISSION
    bool processes_read = true;               // false: the plan read no process list (ReadPlan::processes)
    bool busy = false;                        // a process that is not own
    std::optional<std::string> compute_mode;  // "default", "exclusive_process", "prohibited", ...
};

// Which GPUs a state read reads (docs/design.md §9.1, "Read in preference order and stop"). GPUs are read
// in index order, the order a choice prefers within a class; the default reads every one.
struct ReadScope {
    std::vector<unsigned> held_elsewhere;  // whole GPUs another live holder has: not read, no handle taken
    std::size_t enough = 0;                // stop once this many states of the best class are read (0: never)
    unsigned read_through = 0;             // ...but not before every GPU below this one was read
    std::vector<unsigned> uncounted;       // read, not counted toward `enough` (a dead holder's, a unit another has)
    bool every_read = false;               // no enumeration was made: the devices are what the read finds
    std::optional<std::vector<unsigned>> only;  // set: no GPU but these is read (a bind's given GPUs)
    bool scoped() const noexcept { return enough > 0 || !held_elsewhere.empty() || only.has_value(); }
    // Whether GPU `gpu` is left unread (no handle taken, no state made).
    bool skips(unsigned gpu) const noexcept;
    // The same devices, read whole.
    ReadScope whole() const {
        ReadScope w;
        w.every_read = every_read;
        return w;
    }
    // Whether a read state is of the best class: healthy, and idle where the plan reads processes.
    static bool best(const DeviceState& state, bool processes_read) noexcept;
};

// What a state read asks NVML (docs/design.md §9.1, "Query plan").
struct ReadPlan {
    bool processes = true;  // false (busy-gpus: ignore): no process list is read, processes stay unknown
    // true (flink-gpu list, doctor): every process list is read, also those that cannot hold anything, so
    // that one NVML refuses (NO_PERMISSION) shows on an idle GPU too
    bool every_process_list = false;
    bool fresh_inforom = false;  // true: InfoROM validity read now, not taken from the process's cache
    ReadScope scope;
};

}  // namespace flinkgpu
