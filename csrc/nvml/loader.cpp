#include "nvml/loader.hpp"

#include "base/file_kind.hpp"
#include "base/glibc_compat.hpp"

#include <dlfcn.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/stat.h>
#include <time.h>

#include <atomic>
#include <cstdlib>
#include <map>
#include <new>

namespace flinkgpu {

namespace {

const char* const kDefaultLibrary = "libnvidia-ml.so.1";

// The registry and the generation. Taken in the fork prepare handler so that a child never inherits
// it locked by a thread that does not exist there, and therefore never held while calling into the
// library: a driver may fork() inside dlopen or nvmlInit (it runs nvidia-modprobe to create missing
// device nodes), and our prepare handler would then wait for a lock its own thread holds.
pthread_mutex_t g_mutex = PTHREAD_MUTEX_INITIALIZER;
unsigned long g_generation = 1;  // per-process generation, bumped in forked children
// Serialises loading and initialisation (dlopen, nvmlInit) and guards initialized_generation_.
// A fork from another thread waits for it, so that no child inherits the library half-initialised
// (its own state lock held by a thread that does not exist there); a fork from inside dlopen or
// nvmlInit on the holding thread itself (t_in_init) must not wait for it, or it waits for ever.
pthread_mutex_t g_init_mutex = PTHREAD_MUTEX_INITIALIZER;
thread_local bool t_in_init = false;  // this thread holds g_init_mutex
bool g_init_locked_for_fork = false;  // atfork_prepare took g_init_mutex
// The holder of g_init_mutex is inside a call that missed its deadline (abandon_init): a fork does not
// wait for it, which might be for ever; the child starts with the mutex free and initialises anew.
std::atomic<bool> g_init_abandoned{false};

void atfork_prepare() {
    g_init_locked_for_fork = false;
    if (!t_in_init) {
        // a normal init is waited for; one abandoned while we wait stops the wait
        while (!(g_init_locked_for_fork = pthread_mutex_trylock(&g_init_mutex) == 0) &&
               !g_init_abandoned.load(std::memory_order_acquire)) {
            const timespec pause{0, 1000000};  // 1 ms
            nanosleep(&pause, nullptr);
        }
    }
    pthread_mutex_lock(&g_mutex);
}
void atfork_parent() {
    pthread_mutex_unlock(&g_mutex);
    if (g_init_locked_for_fork) pthread_mutex_unlock(&g_init_mutex);
}
void atfork_child() {
    ++g_generation;  // NVML must be initialised again in the child
    pthread_mutex_unlock(&g_mutex);
    // Otherwise this very thread holds it, inside acquire(), and releases it there; or a thread that
    // does not exist here does (an abandoned init): then it is made anew, free.
    if (g_init_locked_for_fork) {
        pthread_mutex_unlock(&g_init_mutex);
    } else if (!t_in_init) {
        pthread_mutex_init(&g_init_mutex, nullptr);
        g_init_abandoned.store(false, std::memory_order_relaxed);
    }
}

struct AtforkRegistration {
    AtforkRegistration() { pthread_atfork(atfork_prepare, atfork_parent, atfork_child); }
};
const AtforkRegistration g_atfork;

// Holds g_init_mutex and marks this thread as its holder for the fork handlers.
class InitGuard {
public:
    InitGuard() {
        pthread_mutex_lock(&g_init_mutex);
        t_in_init = true;
    }
    ~InitGuard() {
        t_in_init = false;
        g_init_abandoned.store(false, std::memory_order_release);
        pthread_mutex_unlock(&g_init_mutex);
    }
    InitGuard(const InitGuard&) = delete;
    InitGuard& operator=(const InitGuard&) = delete;
};

class MutexGuard {
public:
    explicit MutexGuard(pthread_mutex_t* m) : m_(m) { pthread_mutex_lock(m_); }
    ~MutexGuard() { pthread_mutex_unlock(m_); }
    MutexGuard(const MutexGuard&) = delete;
    MutexGuard& operator=(const MutexGuard&) = delete;

private:
    pthread_mutex_t* m_;
};

const char* code_name(int code) {
    switch (code) {
        case NVML_SUCCESS: return "NVML_SUCCESS";
        case NVML_ERROR_UNINITIALIZED: return "NVML_ERROR_UNINITIALIZED";
        case NVML_ERROR_INVALID_ARGUMENT: return "NVML_ERROR_INVALID_ARGUMENT";
        case NVML_ERROR_NOT_SUPPORTED: return "NVML_ERROR_NOT_SUPPORTED";
        case NVML_ERROR_NO_PERMISSION: return "NVML_ERROR_NO_PERMISSION";
        case NVML_ERROR_NOT_FOUND: return "NVML_ERROR_NOT_FOUND";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "NVML_ERROR_INSUFFICIENT_SIZE";
        case NVML_ERROR_DRIVER_NOT_LOADED: return "NVML_ERROR_DRIVER_NOT_LOADED";
        case NVML_ERROR_TIMEOUT: return "NVML_ERROR_TIMEOUT";
        case NVML_ERROR_IRQ_ISSUE: return "NVML_ERROR_IRQ_ISSUE";
        case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML_ERROR_LIBRARY_NOT_FOUND";
        case NVML_ERROR_FUNCTION_NOT_FOUND: return "NVML_ERROR_FUNCTION_NOT_FOUND";
        case NVML_ERROR_CORRUPTED_INFOROM: return "NVML_ERROR_CORRUPTED_INFOROM";
        case NVML_ERROR_GPU_IS_LOST: return "NVML_ERROR_GPU_IS_LOST";
        case NVML_ERROR_RESET_REQUIRED: return "NVML_ERROR_RESET_REQUIRED";
        case NVML_ERROR_OPERATING_SYSTEM: return "NVML_ERROR_OPERATING_SYSTEM";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "NVML_ERROR_LIB_RM_VERSION_MISMATCH";
        case NVML_ERROR_MEMORY: return "NVML_ERROR_MEMORY";
        case NVML_ERROR_NO_DATA: return "NVML_ERROR_NO_DATA";
        default: return "NVML_ERROR_UNKNOWN";
    }
}

std::string dl_error_text() {
    const char* e = dlerror();
    return e ? e : "unknown dynamic loader error";
}

const NvmlSymbolInfo kSymbols[kNvmlSymbolCount] = {
    {"nvmlInit_v2", SymbolUse::kRequired},
    {"nvmlInit", SymbolUse::kFallback},
    {"nvmlErrorString", SymbolUse::kRequired},
    {"nvmlDeviceGetCount_v2", SymbolUse::kRequired},
    {"nvmlDeviceGetCount", SymbolUse::kFallback},
    {"nvmlDeviceGetHandleByIndex_v2", SymbolUse::kRequired},
    {"nvmlDeviceGetHandleByIndex", SymbolUse::kFallback},
    {"nvmlDeviceGetUUID", SymbolUse::kOptional},
    {"nvmlDeviceGetName", SymbolUse::kOptional},
    {"nvmlDeviceGetPciInfo_v3", SymbolUse::kOptional},
    {"nvmlDeviceGetPciInfo_v2", SymbolUse::kFallback},
    {"nvmlDeviceGetPciInfo", SymbolUse::kFallback},
    {"nvmlDeviceGetMemoryInfo", SymbolUse::kOptional},
    {"nvmlDeviceGetMinorNumber", SymbolUse::kOptional},
    {"nvmlSystemGetDriverVersion", SymbolUse::kOptional},
    {"nvmlDeviceGetMemoryInfo_v2", SymbolUse::kOptional},
    {"nvmlDeviceGetCpuAffinityWithinScope", SymbolUse::kOptional},
    {"nvmlDeviceGetComputeMode", SymbolUse::kOptional},
    {"nvmlDeviceValidateInforom", SymbolUse::kOptional},
    {"nvmlDeviceGetRemappedRows", SymbolUse::kOptional},
    {"nvmlDeviceGetEccMode", SymbolUse::kOptional},
    {"nvmlDeviceGetTotalEccErrors", SymbolUse::kOptional},
    {"nvmlDeviceGetRetiredPagesPendingStatus", SymbolUse::kOptional},
    {"nvmlDeviceGetFieldValues", SymbolUse::kOptional},
    {"nvmlDeviceGetRunningProcessDetailList", SymbolUse::kOptional},
    {"nvmlDeviceGetConfComputeMemSizeInfo", SymbolUse::kOptional},
    {"nvmlDeviceGetComputeRunningProcesses_v3", SymbolUse::kOptional},
    {"nvmlDeviceGetComputeRunningProcesses_v2", SymbolUse::kFallback},
    {"nvmlDeviceGetComputeRunningProcesses", SymbolUse::kFallback},
    {"nvmlDeviceGetGraphicsRunningProcesses_v3", SymbolUse::kOptional},
    {"nvmlDeviceGetGraphicsRunningProcesses_v2", SymbolUse::kFallback},
    {"nvmlDeviceGetGraphicsRunningProcesses", SymbolUse::kFallback},
    {"nvmlDeviceGetMPSComputeRunningProcesses_v3", SymbolUse::kOptional},
    {"nvmlDeviceGetMPSComputeRunningProcesses_v2", SymbolUse::kFallback},
    {"nvmlDeviceGetMPSComputeRunningProcesses", SymbolUse::kFallback},
    {"nvmlDeviceGetMigMode", SymbolUse::kOptional},
    {"nvmlDeviceGetMaxMigDeviceCount", SymbolUse::kOptional},
    {"nvmlDeviceGetMigDeviceHandleByIndex", SymbolUse::kOptional},
    {"nvmlDeviceGetGpuInstanceId", SymbolUse::kOptional},
    {"nvmlDeviceGetComputeInstanceId", SymbolUse::kOptional},
    {"nvmlDeviceGetUtilizationRates", SymbolUse::kOptional},
    {"nvmlDeviceGetTemperatureV", SymbolUse::kOptional},
    {"nvmlDeviceGetTemperature", SymbolUse::kFallback},
    {"nvmlDeviceGetPowerUsage", SymbolUse::kOptional},
    {"nvmlDeviceGetGpuFabricInfoV", SymbolUse::kOptional},
    {"nvmlDeviceGetGpuFabricInfo", SymbolUse::kFallback},
    {"nvmlDeviceGetPersistenceMode", SymbolUse::kOptional},
    {"nvmlDeviceGetTopologyCommonAncestor", SymbolUse::kOptional},
    {"nvmlDeviceGetNvLinkState", SymbolUse::kOptional},
    {"nvmlDeviceGetNvLinkRemotePciInfo_v2", SymbolUse::kOptional},
    {"nvmlDeviceGetNvLinkRemoteDeviceType", SymbolUse::kOptional},
    {"nvmlDeviceGetP2PStatus", SymbolUse::kOptional},
};

}  // namespace

const NvmlSymbolInfo& nvml_symbol(NvmlSymbol symbol) noexcept { return kSymbols[static_cast<std::size_t>(symbol)]; }

ProcessApi choose_process_api(bool has_detail_list, bool has_v3, bool has_conf_compute_mem_size_info, bool has_v2,
                              bool has_v1) noexcept {
    if (has_detail_list) return ProcessApi::kDetailList;
    if (has_v3) return has_conf_compute_mem_size_info ? ProcessApi::kV3R535 : ProcessApi::kV3;
    if (has_v2) return ProcessApi::kV2;
    if (has_v1) return ProcessApi::kV1;
    return ProcessApi::kNone;
}

const char* process_api_name(ProcessApi api) noexcept {
    switch (api) {
        case ProcessApi::kDetailList: return "detail_list";
        case ProcessApi::kV3: return "v3";
        case ProcessApi::kV3R535: return "v3_r535";
        case ProcessApi::kV2: return "v2";
        case ProcessApi::kV1: return "v1";
        case ProcessApi::kNone: break;
    }
    return "none";
}

struct LibraryRegistry {
    // Libraries stay loaded for the life of the process: NVML handles and the symbol table must
    // outlive every caller, and dlclose of libnvidia-ml is known to be unsafe.
    static std::map<std::string, NvmlLibrary*>& libraries() {
        static auto* map = new std::map<std::string, NvmlLibrary*>();
        return *map;
    }

    template <typename Fn>
    static bool resolve(NvmlLibrary* lib, Fn* out, NvmlSymbol symbol) {
        *out = reinterpret_cast<Fn>(dlsym(lib->handle_, nvml_symbol(symbol).name));
        if (*out != nullptr) lib->resolved_.set(static_cast<std::size_t>(symbol));
        return *out != nullptr;
    }

    static void resolve_processes(NvmlLibrary* lib, ProcessQueryFns* fns, NvmlSymbol v3, NvmlSymbol v2, NvmlSymbol v1) {
        if (resolve(lib, &fns->v3, v3)) return;
        if (resolve(lib, &fns->v2, v2)) return;
        resolve(lib, &fns->v1, v1);
    }

    static NvmlLibrary* load(const std::string& path, Status* status) {
        using S = NvmlSymbol;
        const auto not_found = [&](const std::string& why) {
            status->code = StatusCode::kNvml;
            status->nvml_code = NVML_ERROR_LIBRARY_NOT_FOUND;
            status->function = "dlopen";
            status->message = "Could not load the NVIDIA Management Library '" + path + "': " + why +
                              ". Install the NVIDIA driver on this host, or set FLINK_GPU_NVML_LIBRARY "
                              "(driver option nvml.library-path) to the path of its libnvidia-ml.so.1.";
            return nullptr;
        };
        // dlopen of a FIFO blocks until a writer comes, forever; of a device it may read without
        // end. A path (one with a '/'; a bare name is searched for by the loader) that exists and
        // is not a regular file is refused saying what it is; a missing one is left to dlopen's
        // message. statx, not stat: stat@GLIBC_2.33 is beyond the manylinux_2_28 wheel.
        struct statx file{};
        if (path.find('/') != std::string::npos &&
            statx(AT_FDCWD, path.c_str(), AT_STATX_SYNC_AS_STAT, STATX_TYPE, &file) == 0 && !S_ISREG(file.stx_mode)) {
            return not_found("it is " + std::string(file_kind(file.stx_mode)) + ", not a regular file");
        }
        dlerror();
        void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (handle == nullptr) return not_found(dl_error_text());
        auto* lib = new NvmlLibrary();
        lib->path_ = path;
        lib->handle_ = handle;
        NvmlApi& api = lib->api_;
        const char* missing = nullptr;
        // Newer entry points first, the original ones of old drivers as fallback.
        if (!resolve(lib, &lib->init_, S::kInitV2) && !resolve(lib, &lib->init_, S::kInit)) missing = "nvmlInit_v2";
        if (!resolve(lib, &api.error_string, S::kErrorString)) missing = "nvmlErrorString";
        if (!resolve(lib, &api.device_get_count, S::kDeviceGetCountV2) &&
            !resolve(lib, &api.device_get_count, S::kDeviceGetCount))
            missing = "nvmlDeviceGetCount_v2";
        if (!resolve(lib, &api.device_get_handle_by_index, S::kDeviceGetHandleByIndexV2) &&
            !resolve(lib, &api.device_get_handle_by_index, S::kDeviceGetHandleByIndex))
            missing = "nvmlDeviceGetHandleByIndex_v2";
        if (missing != nullptr) {
            status->code = StatusCode::kNvml;
            status->nvml_code = NVML_ERROR_FUNCTION_NOT_FOUND;
            status->function = "dlsym";
            status->message = "'" + path + "' is not a usable NVML library: it has no " + missing +
                              ". Point FLINK_GPU_NVML_LIBRARY (driver option nvml.library-path) at the "
                              "libnvidia-ml.so.1 of an installed NVIDIA driver.";
            dlclose(handle);
            delete lib;
            return nullptr;
        }
        // Optional queries: absent means "not supported by this driver", never an error.
        resolve(lib, &api.device_get_uuid, S::kDeviceGetUuid);
        resolve(lib, &api.device_get_name, S::kDeviceGetName);
        if (!resolve(lib, &api.device_get_pci_info, S::kDeviceGetPciInfoV3) &&
            !resolve(lib, &api.device_get_pci_info, S::kDeviceGetPciInfoV2)) {
            // v1 fills only a prefix of the struct: the 16-byte bus id there is today's busIdLegacy.
            api.pci_info_v1 = resolve(lib, &api.device_get_pci_info, S::kDeviceGetPciInfo);
        }
        resolve(lib, &api.device_get_memory_info, S::kDeviceGetMemoryInfo);
        resolve(lib, &api.device_get_minor_number, S::kDeviceGetMinorNumber);
        resolve(lib, &api.system_get_driver_version, S::kSystemGetDriverVersion);
        resolve(lib, &api.device_get_memory_info_v2, S::kDeviceGetMemoryInfoV2);
        resolve(lib, &api.device_get_cpu_affinity_within_scope, S::kDeviceGetCpuAffinityWithinScope);
        resolve(lib, &api.device_get_compute_mode, S::kDeviceGetComputeMode);
        resolve(lib, &api.device_validate_inforom, S::kDeviceValidateInforom);
        resolve(lib, &api.device_get_remapped_rows, S::kDeviceGetRemappedRows);
        resolve(lib, &api.device_get_ecc_mode, S::kDeviceGetEccMode);
        resolve(lib, &api.device_get_total_ecc_errors, S::kDeviceGetTotalEccErrors);
        resolve(lib, &api.device_get_retired_pages_pending_status, S::kDeviceGetRetiredPagesPendingStatus);
        resolve(lib, &api.device_get_field_values, S::kDeviceGetFieldValues);
        resolve(lib, &api.device_get_gpu_fabric_info_v, S::kDeviceGetGpuFabricInfoV);
        resolve(lib, &api.device_get_gpu_fabric_info, S::kDeviceGetGpuFabricInfo);  // also for a refused V
        const bool detail =
            resolve(lib, &api.device_get_running_process_detail_list, S::kDeviceGetRunningProcessDetailList);
        void* conf_compute = nullptr;
        const bool r535_era = resolve(lib, &conf_compute, S::kDeviceGetConfComputeMemSizeInfo);
        // Also beside the detail list: a driver that answers it NOT_SUPPORTED has four-field *_v3.
        resolve_processes(lib, &api.compute_processes, S::kDeviceGetComputeRunningProcessesV3,
                          S::kDeviceGetComputeRunningProcessesV2, S::kDeviceGetComputeRunningProcesses);
        resolve_processes(lib, &api.graphics_processes, S::kDeviceGetGraphicsRunningProcessesV3,
                          S::kDeviceGetGraphicsRunningProcessesV2, S::kDeviceGetGraphicsRunningProcesses);
        resolve_processes(lib, &api.mps_processes, S::kDeviceGetMpsComputeRunningProcessesV3,
                          S::kDeviceGetMpsComputeRunningProcessesV2, S::kDeviceGetMpsComputeRunningProcesses);
        // The compute query decides the generation; the others of a driver are of the same one.
        const ProcessQueryFns& c = api.compute_processes;
        api.process_api = choose_process_api(detail, c.v3 != nullptr, r535_era, c.v2 != nullptr, c.v1 != nullptr);
        resolve(lib, &api.device_get_mig_mode, S::kDeviceGetMigMode);
        resolve(lib, &api.device_get_max_mig_device_count, S::kDeviceGetMaxMigDeviceCount);
        resolve(lib, &api.device_get_mig_device_handle_by_index, S::kDeviceGetMigDeviceHandleByIndex);
        resolve(lib, &api.device_get_gpu_instance_id, S::kDeviceGetGpuInstanceId);
        resolve(lib, &api.device_get_compute_instance_id, S::kDeviceGetComputeInstanceId);
        resolve(lib, &api.device_get_utilization_rates, S::kDeviceGetUtilizationRates);
        resolve(lib, &api.device_get_temperature_v, S::kDeviceGetTemperatureV);
        resolve(lib, &api.device_get_temperature, S::kDeviceGetTemperature);  // also for a refused V
        resolve(lib, &api.device_get_power_usage, S::kDeviceGetPowerUsage);
        resolve(lib, &api.device_get_persistence_mode, S::kDeviceGetPersistenceMode);
        resolve(lib, &api.device_get_topology_common_ancestor, S::kDeviceGetTopologyCommonAncestor);
        resolve(lib, &api.device_get_nvlink_state, S::kDeviceGetNvLinkState);
        resolve(lib, &api.device_get_nvlink_remote_pci_info, S::kDeviceGetNvLinkRemotePciInfoV2);
        resolve(lib, &api.device_get_nvlink_remote_device_type, S::kDeviceGetNvLinkRemoteDeviceType);
        resolve(lib, &api.device_get_p2p_status, S::kDeviceGetP2PStatus);
        return lib;
    }

    // The cached library of `path`, loading it on first use; never initialises it.
    static NvmlLibrary* find_or_load(const std::string& path, Status* status, unsigned long* generation) {
        NvmlLibrary* lib = nullptr;
        {
            MutexGuard guard(&g_mutex);
            auto& libs = libraries();
            auto it = libs.find(path);
            if (it != libs.end()) lib = it->second;
            *generation = g_generation;
        }
        if (lib != nullptr) return lib;
        lib = load(path, status);            // outside g_mutex: dlopen runs the library's code
        if (lib == nullptr) return nullptr;  // not cached: the driver may be installed later
        try {
            MutexGuard guard(&g_mutex);
            libraries().emplace(path, lib);
        } catch (...) {
            delete lib;  // the handle stays open (dlclose of libnvidia-ml is unsafe)
            throw;
        }
        return lib;
    }
};

std::string NvmlLibrary::resolve_path(const std::string& requested_path) {
    if (!requested_path.empty()) return requested_path;
    const char* env = std::getenv("FLINK_GPU_NVML_LIBRARY");
    if (env != nullptr && env[0] != '\0') return env;
    return kDefaultLibrary;
}

void NvmlLibrary::abandon_init() noexcept {
    // only while an init holds the mutex: one that has already returned left it free
    if (pthread_mutex_trylock(&g_init_mutex) == 0) {
        pthread_mutex_unlock(&g_init_mutex);
        return;
    }
    g_init_abandoned.store(true, std::memory_order_release);
}

unsigned long NvmlLibrary::process_generation() noexcept {
    MutexGuard guard(&g_mutex);
    return g_generation;
}

const NvmlLibrary* NvmlLibrary::acquire(const std::string& requested_path, Status* status) noexcept {
    try {
        *status = Status();
        const std::string path = resolve_path(requested_path);
        InitGuard init_guard;
        unsigned long generation = 0;
        NvmlLibrary* lib = LibraryRegistry::find_or_load(path, status, &generation);
        if (lib == nullptr) return nullptr;
        if (lib->initialized_generation_ != generation) {
            // Not cached on failure either: a driver that is loaded later is picked up.
            const nvmlReturn_t rc = lib->init_();
            if (rc != NVML_SUCCESS) {
                *status = lib->error(rc, "nvmlInit_v2");
                return nullptr;
            }
            lib->initialized_generation_ = generation;
        }
        return lib;
    } catch (const std::bad_alloc&) {
        *status =
            nvml_failure(NVML_ERROR_MEMORY, "acquire", "Out of memory while loading the NVIDIA Management Library.");
        return nullptr;
    }
}

const NvmlLibrary* NvmlLibrary::probe(const std::string& requested_path, Status* status) noexcept {
    try {
        *status = Status();
        InitGuard init_guard;
        unsigned long generation = 0;
        return LibraryRegistry::find_or_load(resolve_path(requested_path), status, &generation);
    } catch (const std::bad_alloc&) {
        *status =
            nvml_failure(NVML_ERROR_MEMORY, "probe", "Out of memory while loading the NVIDIA Management Library.");
        return nullptr;
    }
}

bool NvmlLibrary::exports(NvmlSymbol symbol) const noexcept {
    return dlsym(handle_, nvml_symbol(symbol).name) != nullptr;
}

const char* nvml_code_name(int code) noexcept { return code_name(code); }

std::string NvmlLibrary::error_text(int code) const noexcept {
    try {
        std::string text = code_name(code);
        const char* described = api_.error_string ? api_.error_string(static_cast<nvmlReturn_t>(code)) : nullptr;
        if (described != nullptr && described[0] != '\0') text += std::string(" (") + described + ")";
        return text;
    } catch (...) {
        return std::string();
    }
}

Status NvmlLibrary::error(int code, const char* function) const noexcept {
    try {
        const std::string what = std::string(function) + " returned " + error_text(code);
        const std::string lib = "'" + path_ + "'";
        switch (code) {
            case NVML_ERROR_DRIVER_NOT_LOADED:
                return nvml_failure(code, function,
                                    "The NVIDIA kernel driver is not loaded (" + what + ", library " + lib +
                                        "). Load it (modprobe nvidia) or, in a container, run with the GPU devices "
                                        "and driver mounted (e.g. the NVIDIA container toolkit).");
            case NVML_ERROR_LIB_RM_VERSION_MISMATCH:
                return nvml_failure(code, function,
                                    "The NVIDIA kernel driver and the NVML library " + lib +
                                        " have different versions (" + what +
                                        "), usually after a driver upgrade without a reboot. Reboot the host or "
                                        "reload the nvidia kernel modules.");
            case NVML_ERROR_NO_PERMISSION:
                return nvml_failure(code, function,
                                    "No permission to use the GPUs through " + lib + " (" + what +
                                        "). Check the permissions of /dev/nvidia* for this user.");
            case NVML_ERROR_GPU_IS_LOST:
                return nvml_failure(code, function,
                                    "A GPU has fallen off the bus or is otherwise inaccessible (" + what +
                                        ", library " + lib + "). The GPU needs a reset or the host a reboot.");
            default: return nvml_failure(code, function, "NVML call failed: " + what + ", library " + lib + ".");
        }
    } catch (...) {
        return nvml_failure(code, function, "");
    }
}

}  // namespace flinkgpu
