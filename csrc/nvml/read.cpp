#include "nvml/read.hpp"

#include "host/process_tree.hpp"
#include "nvml/devices.hpp"
#include "nvml/health.hpp"

#include <pthread.h>
#include <time.h>

#include <algorithm>
#include <map>
#include <new>
#include <tuple>

namespace flinkgpu {
namespace {

// Grows a process buffer at most this far (entries), so a misbehaving driver cannot make us
// allocate without bound.
constexpr unsigned kMaxProcesses = 1u << 16;
constexpr unsigned kInitialProcesses = 32;
// Below this much allocated memory (v2: the driver's reservation apart) no process holds a context on
// a GPU: a CUDA context alone takes hundreds of MiB, the smallest graphics client (Xorg) a few MiB, and
// idle GPUs read 0 MiB (nvidia-smi -q captures of A100, B200, GB200, GB300, H100, L40S and T4). The
// simulator models it (csrc/simulator/spec.cpp, account_processes).
constexpr unsigned long long kNoContextBelowBytes = 1ull << 20;

bool is_lost(int rc) { return rc == NVML_ERROR_GPU_IS_LOST || rc == NVML_ERROR_RESET_REQUIRED; }

// A code that says only that this one reading is not to be had (NOT_SUPPORTED, FUNCTION_NOT_FOUND,
// NO_PERMISSION, ...), not that the GPU is lost or the library as a whole failed.
bool is_no_finding(int rc) { return rc != NVML_SUCCESS && !is_lost(rc) && !is_library_wide_error(rc); }

// What one state query's return code means for the device.
enum class Answer { kOk, kNoFinding, kLost, kFail };

// The buffers of one query_states call, reused for every device and process kind.
struct Workspace {
    std::vector<nvmlProcessDetail_v1_t> detail;  // detail list and the R535 *_v3 layout
    std::vector<nvmlProcessInfo_v2_t> v2;        // *_v3 and *_v2
    std::vector<nvmlProcessInfo_v1_t> v1;
};

// InfoROM validity per GPU (and MIG unit) of a library, for this process generation: nvmlDeviceValidateInforom
// reads the flash (DCGM polls it at most hourly), and a corrupted InfoROM stays so until the GPU is reset. The
// mutex is never held across an NVML call.
struct InforomKey {
    const NvmlLibrary* lib;
    unsigned long generation;
    unsigned gpu;
    int slot;
    bool operator<(const InforomKey& o) const {
        return std::tie(lib, generation, gpu, slot) < std::tie(o.lib, o.generation, o.gpu, o.slot);
    }
};
struct InforomReading {
    int rc;
    long long read_ns;
};
pthread_mutex_t g_inforom_mutex = PTHREAD_MUTEX_INITIALIZER;
std::map<InforomKey, InforomReading>* g_inforom = new std::map<InforomKey, InforomReading>();

long long monotonic_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

bool inforom_cached(const InforomKey& key, int* rc) {
    pthread_mutex_lock(&g_inforom_mutex);
    const auto it = g_inforom->find(key);
    const bool fresh = it != g_inforom->end() && monotonic_ns() - it->second.read_ns <
                                                     static_cast<long long>(kInforomRecheckSeconds) * 1000000000LL;
    if (fresh) *rc = it->second.rc;
    pthread_mutex_unlock(&g_inforom_mutex);
    return fresh;
}

void inforom_store(const InforomKey& key, int rc) {
    pthread_mutex_lock(&g_inforom_mutex);
    try {
        (*g_inforom)[key] = InforomReading{rc, monotonic_ns()};
    } catch (...) {
        // not cached: read again next time
    }
    pthread_mutex_unlock(&g_inforom_mutex);
}

class DeviceQuery {
public:
    DeviceQuery(const NvmlLibrary& lib, nvmlDevice_t dev, DeviceState* state, Workspace* ws, const ReadPlan& plan,
                ReadMonitor* monitor)
        : lib_(lib), api_(lib.api()), dev_(dev), s_(state), ws_(ws), plan_(plan), monitor_(monitor) {}

    // Fills the state; a kNvml failure when the library as a whole fails. `with_processes` false: no
    // process list (the plan's, or a MIG GPU's, whose processes are its units').
    Status run(ProcessTree* tree, bool with_processes) {
        health();
        if (!failure_.ok() || lost()) return failure_;
        memory();
        if (!failure_.ok() || lost()) return failure_;
        compute_mode();
        if (!failure_.ok() || lost()) return failure_;
        if (with_processes) processes(tree);
        else s_->processes_read = false;
        return failure_;
    }

private:
    // Names the NVML call about to be made, for a deadline's WARN (nvml/deadline.hpp).
    void calling(const char* function) {
        if (monitor_ != nullptr) monitor_->calling(static_cast<int>(s_->nvml_index), function);
    }

    bool lost() const { return s_->readings.lost_code != NVML_SUCCESS; }

    Answer answer(int rc, const char* function) {
        if (rc == NVML_SUCCESS) return Answer::kOk;
        if (is_no_finding(rc)) return Answer::kNoFinding;
        if (is_lost(rc)) {
            s_->readings.lost_code = rc;
            s_->readings.lost_function = function;
            return Answer::kLost;
        }
        failure_ = lib_.error(rc, function);
        return Answer::kFail;
    }

    // How a check's query answered: ok, or why nothing was read.
    static Outcome outcome_of(int rc) {
        if (rc == NVML_SUCCESS) return Outcome::kOk;
        return rc == NVML_ERROR_NO_PERMISSION ? Outcome::kNoPermission : Outcome::kNotSupported;
    }
    void answered(Check check, int rc) { s_->readings.answered[static_cast<std::size_t>(check)] = outcome_of(rc); }

    // The health fields of one nvmlDeviceGetFieldValues call (docs/design.md §9.1, query plan), in
    // this order; a field that does not answer falls back to its own query.
    enum Field {
        kRecoveryField,
        kEccCurrentField,
        kEccDbeField,
        kRemapPendingField,
        kRemapFailureField,
        kRetiredPendingField,
        kFieldCount
    };

    static unsigned long long field_value(const nvmlFieldValue_t& f) {
        switch (f.valueType) {
            case NVML_VALUE_TYPE_UNSIGNED_INT: return f.value.uiVal;
            case NVML_VALUE_TYPE_UNSIGNED_LONG: return f.value.ulVal;
            case NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: return f.value.ullVal;
            case NVML_VALUE_TYPE_SIGNED_INT: return static_cast<unsigned long long>(f.value.siVal);
            case NVML_VALUE_TYPE_SIGNED_LONG_LONG: return static_cast<unsigned long long>(f.value.sllVal);
            default: return 0;
        }
    }

    // Reads the health fields; false when the device is lost or the library fails. fields[i].nvmlReturn
    // is NOT_SUPPORTED for each field not answered (no nvmlDeviceGetFieldValues: every one).
    bool read_fields(nvmlFieldValue_t (&fields)[kFieldCount]) {
        static constexpr unsigned kIds[kFieldCount] = {
            NVML_FI_DEV_GET_GPU_RECOVERY_ACTION, NVML_FI_DEV_ECC_CURRENT,      NVML_FI_DEV_ECC_DBE_VOL_TOTAL,
            NVML_FI_DEV_REMAPPED_PENDING,        NVML_FI_DEV_REMAPPED_FAILURE, NVML_FI_DEV_RETIRED_PENDING};
        for (int i = 0; i < kFieldCount; ++i) {
            fields[i] = nvmlFieldValue_t{};
            fields[i].fieldId = kIds[i];
            fields[i].nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
        if (api_.device_get_field_values == nullptr) return true;
        calling("nvmlDeviceGetFieldValues");
        const Answer a = answer(api_.device_get_field_values(dev_, kFieldCount, fields), "nvmlDeviceGetFieldValues");
        if (a >= Answer::kLost) return false;
        for (nvmlFieldValue_t& f : fields) {
            if (a != Answer::kOk) {
                f.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            } else if (is_lost(f.nvmlReturn)) {
                answer(f.nvmlReturn, "nvmlDeviceGetFieldValues");
                return false;
            }
        }
        return true;
    }

    // InfoROM validity, which reads the flash: once per GPU and kInforomRecheckSeconds (inforom_cache).
    void inforom(bool fresh) {
        HealthReadings& r = s_->readings;
        if (api_.device_validate_inforom == nullptr) return;
        const InforomKey key{&lib_, NvmlLibrary::process_generation(), s_->nvml_index,
                             s_->mig_slot ? static_cast<int>(*s_->mig_slot) : -1};
        int rc = NVML_SUCCESS;
        if (fresh || !inforom_cached(key, &rc)) {
            calling("nvmlDeviceValidateInforom");
            rc = api_.device_validate_inforom(dev_);
            if (rc != NVML_ERROR_CORRUPTED_INFOROM && answer(rc, "nvmlDeviceValidateInforom") >= Answer::kLost) return;
            inforom_store(key, rc);
        } else {
            r.inforom_cached = true;
        }
        if (rc == NVML_ERROR_CORRUPTED_INFOROM) {
            r.inforom_corrupted = true;
            answered(Check::kInforom, NVML_SUCCESS);
        } else {
            answered(Check::kInforom, rc);
        }
    }

    void health() {
        HealthReadings& r = s_->readings;
        inforom(plan_.fresh_inforom);
        if (lost() || !failure_.ok()) return;
        nvmlFieldValue_t fields[kFieldCount];
        if (!read_fields(fields)) return;
        const auto got = [&](Field f) { return fields[f].nvmlReturn == NVML_SUCCESS; };
        if (got(kRemapPendingField) && got(kRemapFailureField)) {
            r.remap_pending = field_value(fields[kRemapPendingField]) != 0;
            r.remap_failed = field_value(fields[kRemapFailureField]) != 0;
            answered(Check::kRemappedRows, NVML_SUCCESS);
        } else if (api_.device_get_remapped_rows != nullptr) {
            unsigned corrected = 0, uncorrected = 0, pending = 0, failed = 0;
            calling("nvmlDeviceGetRemappedRows");
            const int rc = api_.device_get_remapped_rows(dev_, &corrected, &uncorrected, &pending, &failed);
            const Answer a = answer(rc, "nvmlDeviceGetRemappedRows");
            if (a >= Answer::kLost) return;
            answered(Check::kRemappedRows, rc);
            if (a == Answer::kOk) {
                r.remap_failed = failed != 0;
                r.remap_pending = pending != 0;
            }
        }
        if (got(kEccCurrentField) && (field_value(fields[kEccCurrentField]) == 0 || got(kEccDbeField))) {
            if (field_value(fields[kEccCurrentField]) == 0) {
                r.answered[static_cast<std::size_t>(Check::kEcc)] = Outcome::kNotApplicable;  // counters need ECC on
            } else {
                r.ecc_uncorrected_volatile = field_value(fields[kEccDbeField]);
                answered(Check::kEcc, NVML_SUCCESS);
            }
        } else if (api_.device_get_ecc_mode != nullptr && api_.device_get_total_ecc_errors != nullptr) {
            nvmlEnableState_t current = NVML_FEATURE_DISABLED, pending = NVML_FEATURE_DISABLED;
            calling("nvmlDeviceGetEccMode");
            const int mrc = api_.device_get_ecc_mode(dev_, &current, &pending);
            Answer a = answer(mrc, "nvmlDeviceGetEccMode");
            if (a >= Answer::kLost) return;
            answered(Check::kEcc, mrc);
            if (a == Answer::kOk && current != NVML_FEATURE_ENABLED) {
                r.answered[static_cast<std::size_t>(Check::kEcc)] = Outcome::kNotApplicable;  // counters need ECC on
            } else if (a == Answer::kOk) {
                unsigned long long count = 0;
                calling("nvmlDeviceGetTotalEccErrors");
                const int crc = api_.device_get_total_ecc_errors(dev_, NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                                                                 NVML_VOLATILE_ECC, &count);
                a = answer(crc, "nvmlDeviceGetTotalEccErrors");
                if (a >= Answer::kLost) return;
                answered(Check::kEcc, crc);
                if (a == Answer::kOk) r.ecc_uncorrected_volatile = count;
            }
        }
        // A driver without the field (before R565) answers per value (NOT_SUPPORTED, INVALID_ARGUMENT).
        if (got(kRecoveryField)) {
            r.recovery_action = static_cast<unsigned>(field_value(fields[kRecoveryField]));
            answered(Check::kRecoveryAction, NVML_SUCCESS);
        } else if (api_.device_get_field_values != nullptr) {
            answered(Check::kRecoveryAction, fields[kRecoveryField].nvmlReturn == NVML_ERROR_NO_PERMISSION
                                                 ? NVML_ERROR_NO_PERMISSION
                                                 : NVML_ERROR_NOT_SUPPORTED);
        }
        if (!fabric()) return;
        if (got(kRetiredPendingField)) {
            r.pages_pending = field_value(fields[kRetiredPendingField]) != 0;
            answered(Check::kRetiredPages, NVML_SUCCESS);
        } else if (api_.device_get_retired_pages_pending_status != nullptr) {
            nvmlEnableState_t pending = NVML_FEATURE_DISABLED;
            calling("nvmlDeviceGetRetiredPagesPendingStatus");
            const int rc = api_.device_get_retired_pages_pending_status(dev_, &pending);
            const Answer a = answer(rc, "nvmlDeviceGetRetiredPagesPendingStatus");
            if (a >= Answer::kLost) return;
            answered(Check::kRetiredPages, rc);
            if (a == Answer::kOk) r.pages_pending = pending == NVML_FEATURE_ENABLED;
        }
    }

    // The NVLink fabric registration: the v3 struct, v2 for a driver that refuses v3 (R550), the
    // original query where the versioned one is absent (R535). False when the device is lost or
    // the library fails.
    bool fabric() {
        FabricReading& f = s_->readings.fabric;
        int rc = NVML_ERROR_FUNCTION_NOT_FOUND;
        const char* function = "nvmlDeviceGetGpuFabricInfoV";
        if (api_.device_get_gpu_fabric_info_v != nullptr) {
            nvmlGpuFabricInfo_v3_t v3{};
            v3.version = nvmlGpuFabricInfo_v3;
            calling(function);
            rc = api_.device_get_gpu_fabric_info_v(dev_, &v3);
            if (rc == NVML_SUCCESS) {
                f.state = v3.state;
                f.status = v3.status;
                f.health_summary = v3.healthSummary;
            } else if (rc == NVML_ERROR_ARGUMENT_VERSION_MISMATCH) {
                nvmlGpuFabricInfo_v2_t v2{};
                v2.version = nvmlGpuFabricInfo_v2;
                // the driver reads the version first and fills only the v2 layout
                rc = api_.device_get_gpu_fabric_info_v(dev_, reinterpret_cast<nvmlGpuFabricInfoV_t*>(&v2));
                if (rc == NVML_SUCCESS) {
                    f.state = v2.state;
                    f.status = v2.status;
                }
            }
        }
        if ((rc == NVML_ERROR_FUNCTION_NOT_FOUND) && api_.device_get_gpu_fabric_info != nullptr) {
            nvmlGpuFabricInfo_t v1{};
            function = "nvmlDeviceGetGpuFabricInfo";
            calling(function);
            rc = api_.device_get_gpu_fabric_info(dev_, &v1);
            if (rc == NVML_SUCCESS) {
                f.state = v1.state;
                f.status = v1.status;
            }
        }
        if (rc == NVML_ERROR_FUNCTION_NOT_FOUND) return true;  // a driver before R535
        if (answer(rc, function) >= Answer::kLost) return false;
        // state NOT_SUPPORTED: a GPU without NVSwitch fabric (PCIe parts)
        answered(Check::kFabric,
                 rc == NVML_SUCCESS && f.state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED ? NVML_ERROR_NOT_SUPPORTED : rc);
        return true;
    }

    void memory() {
        MemoryReading m;
        const char* function = nullptr;
        calling(api_.device_get_memory_info_v2 != nullptr ? "nvmlDeviceGetMemoryInfo_v2" : "nvmlDeviceGetMemoryInfo");
        const int rc = read_memory(api_, dev_, &m, &function);
        if (function != nullptr && answer(rc, function) == Answer::kOk) {
            s_->memory_used = m.used;
            s_->memory_free = m.free;
            s_->memory_total = m.total;
            no_context_ = m.reservation_apart && m.used < kNoContextBelowBytes;
        }
    }

    void compute_mode() {
        if (api_.device_get_compute_mode == nullptr) return;
        nvmlComputeMode_t mode = NVML_COMPUTEMODE_DEFAULT;
        calling("nvmlDeviceGetComputeMode");
        if (answer(api_.device_get_compute_mode(dev_, &mode), "nvmlDeviceGetComputeMode") != Answer::kOk) return;
        switch (mode) {
            case NVML_COMPUTEMODE_DEFAULT: s_->compute_mode = "default"; break;
            case NVML_COMPUTEMODE_EXCLUSIVE_THREAD: s_->compute_mode = "exclusive_thread"; break;
            case NVML_COMPUTEMODE_PROHIBITED: s_->compute_mode = "prohibited"; break;
            case NVML_COMPUTEMODE_EXCLUSIVE_PROCESS: s_->compute_mode = "exclusive_process"; break;
            default: s_->compute_mode = "unknown (" + std::to_string(static_cast<int>(mode)) + ")"; break;
        }
    }

    // Calls `call(capacity, buffer, &count)` with a buffer grown until it fits; the entries listed, none
    // when NVML did not list them.
    template <typename Entry, typename Call>
    std::optional<std::size_t> fetch(std::vector<Entry>* buffer, Call call, const char* function) {
        if (buffer->size() < kInitialProcesses) buffer->resize(kInitialProcesses);
        for (int attempt = 0; attempt < 4; ++attempt) {
            unsigned count = static_cast<unsigned>(buffer->size());
            calling(function);
            const int rc = call(&count, buffer->data());
            if (rc == NVML_ERROR_INSUFFICIENT_SIZE && count > buffer->size() && count <= kMaxProcesses) {
                buffer->resize(std::min<std::size_t>(count * 2u + 8u, kMaxProcesses));
                continue;
            }
            if (rc == NVML_ERROR_NO_PERMISSION) {
                s_->processes_known = false;
                return std::nullopt;
            }
            if (answer(rc, function) != Answer::kOk) return std::nullopt;
            return std::min<std::size_t>(count, buffer->size());
        }
        return std::nullopt;
    }

    template <typename Entry>
    void add(const std::vector<Entry>& entries, std::optional<std::size_t> count, ProcessKind kind) {
        for (std::size_t i = 0; i < count.value_or(0); ++i) {
            GpuProcess p;
            p.pid = entries[i].pid;
            // NVML_VALUE_NOT_AVAILABLE (all bits set) where the driver cannot account memory
            if (entries[i].usedGpuMemory != static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE))
                p.used_memory = entries[i].usedGpuMemory;
            p.kind = kind;
            s_->processes.push_back(p);
        }
    }

    // The entry points of one process kind, newest first (what a WARN names).
    struct ProcessNames {
        const char* v3;
        const char* v2;
        const char* v1;
    };
    static ProcessNames process_names(ProcessKind kind) {
        switch (kind) {
            case ProcessKind::kGraphics:
                return {"nvmlDeviceGetGraphicsRunningProcesses_v3", "nvmlDeviceGetGraphicsRunningProcesses_v2",
                        "nvmlDeviceGetGraphicsRunningProcesses"};
            case ProcessKind::kMps:
                return {"nvmlDeviceGetMPSComputeRunningProcesses_v3", "nvmlDeviceGetMPSComputeRunningProcesses_v2",
                        "nvmlDeviceGetMPSComputeRunningProcesses"};
            case ProcessKind::kCompute: break;
        }
        return {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2",
                "nvmlDeviceGetComputeRunningProcesses"};
    }

    // True when NVML listed the processes (none or some), false when it did not answer.
    bool list_kind(const ProcessQueryFns& fns, ProcessKind kind, unsigned mode) {
        const ProcessNames names = process_names(kind);
        std::optional<std::size_t> n;
        ProcessApi how = api_.process_api;
        if (how == ProcessApi::kDetailList) {
            int last = NVML_SUCCESS;
            n = fetch(&ws_->detail, [&](unsigned* count, nvmlProcessDetail_v1_t* data) {
                nvmlProcessDetailList_v1_t list{};
                list.version = nvmlProcessDetailList_v1;
                list.mode = mode;
                list.numProcArrayEntries = *count;
                list.procArray = data;
                last = api_.device_get_running_process_detail_list(dev_, &list);
                *count = list.numProcArrayEntries;
                return last;
            }, "nvmlDeviceGetRunningProcessDetailList");
            if (last != NVML_ERROR_NOT_SUPPORTED && last != NVML_ERROR_FUNCTION_NOT_FOUND) {
                add(ws_->detail, n, kind);
                return n.has_value();
            }
            how = ProcessApi::kV3;  // a driver with the detail list has four-field *_v3
        }
        if (how == ProcessApi::kV3R535 && fns.v3 != nullptr) {
            // The driver writes five-field entries through its four-field prototype.
            n = fetch(&ws_->detail, [&](unsigned* count, nvmlProcessDetail_v1_t* data) {
                return fns.v3(dev_, count, reinterpret_cast<nvmlProcessInfo_t*>(data));
            }, names.v3);
            add(ws_->detail, n, kind);
        } else if ((how == ProcessApi::kV3 || how == ProcessApi::kV2) && (fns.v3 != nullptr || fns.v2 != nullptr)) {
            const auto fn = fns.v3 != nullptr ? fns.v3 : fns.v2;
            n = fetch(&ws_->v2, [&](unsigned* count, nvmlProcessInfo_v2_t* data) { return fn(dev_, count, data); },
                      fns.v3 != nullptr ? names.v3 : names.v2);
            add(ws_->v2, n, kind);
        } else if (how == ProcessApi::kV1 && fns.v1 != nullptr) {
            n = fetch(&ws_->v1, [&](unsigned* count, nvmlProcessInfo_v1_t* data) { return fns.v1(dev_, count, data); },
                      names.v1);
            add(ws_->v1, n, kind);
        }
        return n.has_value();
    }

    // The process lists cost milliseconds each on a real driver (docs/design.md §9.1, query plan): a GPU
    // whose memory shows no allocation has no process to list, and an MPS client runs in its server's
    // context, which NVML lists as a compute process (NVIDIA's MPS documentation): without one, no
    // MPS list.
    void processes(ProcessTree* tree) {
        if (no_context_ && !plan_.every_process_list) return;
        const bool no_compute = list_kind(api_.compute_processes, ProcessKind::kCompute, NVML_PROCESS_MODE_COMPUTE) &&
                                s_->processes.empty() && !plan_.every_process_list;
        if (!failure_.ok() || lost()) return;
        list_kind(api_.graphics_processes, ProcessKind::kGraphics, NVML_PROCESS_MODE_GRAPHICS);
        if (!failure_.ok() || lost()) return;
        if (!no_compute) list_kind(api_.mps_processes, ProcessKind::kMps, NVML_PROCESS_MODE_MPS);
        if (!failure_.ok() || lost()) return;
        for (GpuProcess& p : s_->processes) {
            const ProcessVerdict v = tree->classify(static_cast<pid_t>(p.pid));
            p.own = v.own;
            p.visible = v.visible;
            if (!p.own) s_->busy = true;
        }
    }

    const NvmlLibrary& lib_;
    const NvmlApi& api_;
    nvmlDevice_t dev_;
    DeviceState* s_;
    Workspace* ws_;
    const ReadPlan& plan_;
    ReadMonitor* monitor_;
    Status failure_;
    bool no_context_ = false;  // the memory reading shows no process's allocation (kNoContextBelowBytes)
};

// What NVML did not answer on a MIG handle comes from its parent GPU: health (a unit is as sick as its
// GPU: the parent's findings apply to every unit, a unit's own only to it), memory and compute mode
// where the unit has none. Processes are the unit's own.
void inherit(const DeviceState& parent, DeviceState* unit) {
    HealthReadings& r = unit->readings;
    const HealthReadings& p = parent.readings;
    if (r.lost_code == NVML_SUCCESS && p.lost_code != NVML_SUCCESS) {
        r.lost_code = p.lost_code;
        r.lost_function = p.lost_function;
    }
    r.inforom_corrupted = r.inforom_corrupted || p.inforom_corrupted;
    r.remap_failed = r.remap_failed || p.remap_failed;
    r.remap_pending = r.remap_pending || p.remap_pending;
    r.ecc_uncorrected_volatile = std::max(r.ecc_uncorrected_volatile, p.ecc_uncorrected_volatile);
    if (r.recovery_action == NVML_GPU_RECOVERY_ACTION_NONE) r.recovery_action = p.recovery_action;
    if (r.fabric.state == NVML_GPU_FABRIC_STATE_NOT_SUPPORTED) r.fabric = p.fabric;
    r.pages_pending = r.pages_pending || p.pages_pending;
    // a check the unit's handle did not answer is as its GPU answered it
    for (std::size_t c = 0; c < kCheckCount; ++c)
        if (r.answered[c] != Outcome::kOk) r.answered[c] = p.answered[c];
    if (!unit->memory_used) unit->memory_used = parent.memory_used;
    if (!unit->memory_free) unit->memory_free = parent.memory_free;
    if (!unit->compute_mode) unit->compute_mode = parent.compute_mode;
}

// The one state of a GPU NVML no longer gives a handle or MIG layout for.
DeviceState refused(unsigned i, int code, const char* function) {
    DeviceState gpu;
    gpu.index = std::to_string(i);
    gpu.nvml_index = i;
    gpu.readings.lost_code = code;
    gpu.readings.lost_function = function;
    return gpu;
}

}  // namespace

int read_memory(const NvmlApi& api, nvmlDevice_t dev, MemoryReading* out, const char** function) noexcept {
    *function = nullptr;
    int rc = NVML_ERROR_FUNCTION_NOT_FOUND;
    if (api.device_get_memory_info_v2 != nullptr) {
        nvmlMemory_v2_t m{};
        m.version = nvmlMemory_v2;
        rc = api.device_get_memory_info_v2(dev, &m);
        *function = "nvmlDeviceGetMemoryInfo_v2";
        if (rc == NVML_SUCCESS) {
            out->total = m.total;
            out->used = m.used;
            out->free = m.free;
            out->reservation_apart = true;
        }
        if (!is_no_finding(rc)) return rc;  // else a stub of the symbol: try v1
    }
    if (api.device_get_memory_info != nullptr) {
        nvmlMemory_t m{};
        rc = api.device_get_memory_info(dev, &m);
        *function = "nvmlDeviceGetMemoryInfo";
        if (rc == NVML_SUCCESS) {
            out->total = m.total;
            out->used = m.used;
            out->free = m.free;
        }
    }
    return rc;
}

Status query_states(const NvmlLibrary& lib, pid_t owner, pid_t taskmanager, const CheckSet& enforced,
                    std::vector<DeviceState>* out, const ReadPlan& plan, ReadMonitor* monitor) noexcept {
    try {
        out->clear();
        const NvmlApi& api = lib.api();
        unsigned count = 0;
        if (monitor == nullptr || !monitor->known_count(&count)) {
            if (monitor != nullptr) monitor->calling(ReadMonitor::kLibrary, "nvmlDeviceGetCount_v2");
            const int rc = api.device_get_count(&count);
            if (rc != NVML_SUCCESS) return lib.error(rc, "nvmlDeviceGetCount_v2");
            if (monitor != nullptr) monitor->counted(count);
        }
        out->reserve(monitor != nullptr ? 0 : count);
        Workspace ws;
        ProcessTree tree(owner, taskmanager);
        std::vector<DeviceState> one;  // one GPU's states (its units for a MIG GPU)
        const ReadScope& scope = plan.scope;
        std::size_t best = 0;  // states of the best class read so far
        for (unsigned i = 0; i < count; ++i) {
            if (scope.enough > 0 && best >= scope.enough && i >= scope.read_through) break;
            if (scope.skips(i)) continue;
            if (monitor != nullptr && monitor->skip(i)) continue;
            const std::size_t first_state = monitor != nullptr ? 0 : out->size();  // this GPU's states from here
            std::vector<DeviceState>* to = monitor != nullptr ? &one : out;
            one.clear();
            if (monitor != nullptr) monitor->calling(static_cast<int>(i), "nvmlDeviceGetHandleByIndex_v2");
            nvmlDevice_t dev = nullptr;
            const int hrc = api.device_get_handle_by_index(i, &dev);
            MigLayout mig;
            const char* function = nullptr;
            int mrc = NVML_SUCCESS;
            if (hrc == NVML_SUCCESS) {
                if (monitor != nullptr) monitor->calling(static_cast<int>(i), "nvmlDeviceGetMigMode");
                mrc = read_mig_layout(api, dev, &mig, &function);
            }
            if (hrc != NVML_SUCCESS || mrc != NVML_SUCCESS) {
                const int code = hrc != NVML_SUCCESS ? hrc : mrc;
                if (hrc != NVML_SUCCESS) function = "nvmlDeviceGetHandleByIndex_v2";
                if (is_library_wide_error(code)) return lib.error(code, function);
                to->push_back(refused(i, code, function));
                judge_health(enforced, &to->back());
            } else {
                DeviceState gpu;
                gpu.index = std::to_string(i);
                gpu.nvml_index = i;
                DeviceQuery query(lib, dev, &gpu, &ws, plan, monitor);
                // a MIG GPU's processes are its units', each unit's read with it below
                const bool units = mig.enabled && !mig.slots.empty();
                if (const Status st = query.run(&tree, plan.processes && !units); !st.ok()) return st;
                if (!mig.enabled) {
                    judge_health(enforced, &gpu);
                    to->push_back(std::move(gpu));
                } else if (mig.slots.empty() && plan.scope.every_read) {
                    // No enumeration skipped it (enumerate_devices' own words): the read says it is unusable.
                    judge_health(enforced, &gpu);
                    if (gpu.health == Health::kOk || gpu.health == Health::kDegraded) {
                        const std::string why =
                            "MIG mode is enabled but it has no MIG instances (create them with nvidia-smi mig, "
                            "or disable MIG mode)";
                        gpu.health = Health::kUnhealthy;
                        gpu.health_text = "unhealthy: " + why;
                        gpu.findings.insert(gpu.findings.begin(), gpu.health_text);  // as judge_health writes them
                    }
                    to->push_back(std::move(gpu));
                } else {
                    for (const MigSlot& slot : mig.slots) {
                        to->emplace_back();
                        DeviceState& unit = to->back();
                        unit.index = gpu.index + ":" + std::to_string(slot.slot);
                        unit.nvml_index = i;
                        unit.mig_slot = slot.slot;
                        DeviceQuery unit_query(lib, slot.handle, &unit, &ws, plan, monitor);
                        if (const Status st = unit_query.run(&tree, plan.processes); !st.ok()) return st;
                        inherit(gpu, &unit);
                        judge_health(enforced, &unit);
                    }
                }
            }
            if (std::find(scope.uncounted.begin(), scope.uncounted.end(), i) == scope.uncounted.end())
                for (std::size_t k = first_state; k < to->size(); ++k)
                    if (ReadScope::best((*to)[k], plan.processes)) ++best;
            if (monitor != nullptr && !monitor->gpu_read(&one)) break;
        }
        return Status();
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "query_states", "Out of memory while reading the GPUs' state.");
    }
}

}  // namespace flinkgpu
