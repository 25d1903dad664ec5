// Run-time loading of libnvidia-ml: dlopen, the symbol table, init once per process (and again
// after fork), and NVML return codes turned into messages a person can act on.
// libnvidia-ml is never a link-time dependency, so everything imports on hosts without a driver.
#pragma once

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include "base/status.hpp"

#include <bitset>
#include <cstddef>
#include <string>

namespace flinkgpu {

// Every entry point the loader looks up (nvml_symbols() names them), so that a test can hold the
// table against a real libnvidia-ml.
enum class NvmlSymbol : int {
    kInitV2,
    kInit,
    kErrorString,
    kDeviceGetCountV2,
    kDeviceGetCount,
    kDeviceGetHandleByIndexV2,
    kDeviceGetHandleByIndex,
    kDeviceGetUuid,
    kDeviceGetName,
    kDeviceGetPciInfoV3,
    kDeviceGetPciInfoV2,
    kDeviceGetPciInfo,
    kDeviceGetMemoryInfo,
    kDeviceGetMinorNumber,
    kSystemGetDriverVersion,
    kDeviceGetMemoryInfoV2,
    kDeviceGetCpuAffinityWithinScope,
    kDeviceGetComputeMode,
    kDeviceValidateInforom,
    kDeviceGetRemappedRows,
    kDeviceGetEccMode,
    kDeviceGetTotalEccErrors,
    kDeviceGetRetiredPagesPendingStatus,
    kDeviceGetFieldValues,
    kDeviceGetRunningProcessDetailList,
    kDeviceGetConfComputeMemSizeInfo,
    kDeviceGetComputeRunningProcessesV3,
    kDeviceGetComputeRunningProcessesV2,
    kDeviceGetComputeRunningProcesses,
    kDeviceGetGraphicsRunningProcessesV3,
    kDeviceGetGraphicsRunningProcessesV2,
    kDeviceGetGraphicsRunningProcesses,
    kDeviceGetMpsComputeRunningProcessesV3,
    kDeviceGetMpsComputeRunningProcessesV2,
    kDeviceGetMpsComputeRunningProcesses,
    kDeviceGetMigMode,
    kDeviceGetMaxMigDeviceCount,
    kDeviceGetMigDeviceHandleByIndex,
    kDeviceGetGpuInstanceId,
    kDeviceGetComputeInstanceId,
    kDeviceGetUtilizationRates,
    kDeviceGetTemperatureV,
    kDeviceGetTemperature,
    kDeviceGetPowerUsage,
    kDeviceGetGpuFabricInfoV,
    kDeviceGetGpuFabricInfo,
    kDeviceGetPersistenceMode,
    kDeviceGetTopologyCommonAncestor,
    kDeviceGetNvLinkState,
    kDeviceGetNvLinkRemotePciInfoV2,
    kDeviceGetNvLinkRemoteDeviceType,
    kDeviceGetP2PStatus,
    kCount
};
inline constexpr std::size_t kNvmlSymbolCount = static_cast<std::size_t>(NvmlSymbol::kCount);

enum class SymbolUse {
    kRequired,  // the library is refused without it
    kFallback,  // an older name, looked up only where the newer one is absent
    kOptional,  // absent: that query is "not supported by this driver"
};

struct NvmlSymbolInfo {
    const char* name;
    SymbolUse use;
};

// The table, indexed by NvmlSymbol.
const NvmlSymbolInfo& nvml_symbol(NvmlSymbol symbol) noexcept;

// How running processes are listed, from what the driver exports (choose_process_api).
enum class ProcessApi {
    kNone,        // no process query at all
    kDetailList,  // nvmlDeviceGetRunningProcessDetailList, versioned (R550 and later)
    kV3,          // *_v3 filling nvmlProcessInfo_v2_t (four fields)
    kV3R535,      // *_v3 filling the five-field nvmlProcessDetail_v1_t layout (R535 era)
    kV2,          // *_v2, nvmlProcessInfo_v2_t
    kV1,          // the original calls, nvmlProcessInfo_v1_t
};

// The R535 trap: drivers of that era made *_v3 fill a five-field struct (usedGpuCcProtectedMemory
// appended) without a version change; later drivers moved that struct to the versioned
// nvmlDeviceGetRunningProcessDetailList and put *_v3 back on four fields. Such a driver is told
// apart by its exports: it has the confidential-computing query nvmlDeviceGetConfComputeMemSizeInfo
// (new in R535) but not nvmlDeviceGetRunningProcessDetailList (the rule nvitop uses since its
// pull request #79).
ProcessApi choose_process_api(bool has_detail_list, bool has_v3, bool has_conf_compute_mem_size_info, bool has_v2,
                              bool has_v1) noexcept;
const char* process_api_name(ProcessApi api) noexcept;

// One process query (compute, graphics or MPS), by generation.
struct ProcessQueryFns {
    decltype(&nvmlDeviceGetComputeRunningProcesses_v3) v3 = nullptr;  // also the R535 layout
    decltype(&nvmlDeviceGetComputeRunningProcesses_v2) v2 = nullptr;
    decltype(&nvmlDeviceGetComputeRunningProcesses) v1 = nullptr;
};

// Resolved entry points of one loaded libnvidia-ml. Optional ones are null when the driver is too
// old to have them; callers treat that as "not supported".
struct NvmlApi {
    decltype(&nvmlErrorString) error_string = nullptr;
    decltype(&nvmlDeviceGetCount_v2) device_get_count = nullptr;
    decltype(&nvmlDeviceGetHandleByIndex_v2) device_get_handle_by_index = nullptr;
    decltype(&nvmlDeviceGetUUID) device_get_uuid = nullptr;
    decltype(&nvmlDeviceGetName) device_get_name = nullptr;
    decltype(&nvmlDeviceGetPciInfo_v3) device_get_pci_info = nullptr;
    // True when device_get_pci_info is the original nvmlDeviceGetPciInfo: it fills only the old,
    // shorter struct, whose bus id is the first member (busIdLegacy today), not busId.
    bool pci_info_v1 = false;
    decltype(&nvmlDeviceGetMemoryInfo) device_get_memory_info = nullptr;
    decltype(&nvmlDeviceGetMinorNumber) device_get_minor_number = nullptr;
    decltype(&nvmlSystemGetDriverVersion) system_get_driver_version = nullptr;
    // Device state (nvml/read.hpp); each one optional.
    decltype(&nvmlDeviceGetMemoryInfo_v2) device_get_memory_info_v2 = nullptr;
    decltype(&nvmlDeviceGetCpuAffinityWithinScope) device_get_cpu_affinity_within_scope = nullptr;
    decltype(&nvmlDeviceGetComputeMode) device_get_compute_mode = nullptr;
    decltype(&nvmlDeviceValidateInforom) device_validate_inforom = nullptr;
    decltype(&nvmlDeviceGetRemappedRows) device_get_remapped_rows = nullptr;
    decltype(&nvmlDeviceGetEccMode) device_get_ecc_mode = nullptr;
    decltype(&nvmlDeviceGetTotalEccErrors) device_get_total_ecc_errors = nullptr;
    decltype(&nvmlDeviceGetRetiredPagesPendingStatus) device_get_retired_pages_pending_status = nullptr;
    decltype(&nvmlDeviceGetFieldValues) device_get_field_values = nullptr;
    decltype(&nvmlDeviceGetRunningProcessDetailList) device_get_running_process_detail_list = nullptr;
    // NVLink fabric registration: the versioned query (R550 and later), else the original one (R535),
    // which nvml.h now marks deprecated (hence its type spelled out).
    decltype(&nvmlDeviceGetGpuFabricInfoV) device_get_gpu_fabric_info_v = nullptr;
    nvmlReturn_t (*device_get_gpu_fabric_info)(nvmlDevice_t, nvmlGpuFabricInfo_t*) = nullptr;
    ProcessQueryFns compute_processes, graphics_processes, mps_processes;
    ProcessApi process_api = ProcessApi::kNone;
    // MIG (nvml/devices.hpp), through MIG device handles only: none of them needs root.
    decltype(&nvmlDeviceGetMigMode) device_get_mig_mode = nullptr;
    decltype(&nvmlDeviceGetMaxMigDeviceCount) device_get_max_mig_device_count = nullptr;
    decltype(&nvmlDeviceGetMigDeviceHandleByIndex) device_get_mig_device_handle_by_index = nullptr;
    decltype(&nvmlDeviceGetGpuInstanceId) device_get_gpu_instance_id = nullptr;
    decltype(&nvmlDeviceGetComputeInstanceId) device_get_compute_instance_id = nullptr;
    // Live readings (nvml/metrics.hpp); each one optional. nvmlDeviceGetTemperatureV (R565 and
    // later) where the driver exports and answers it, else the original query, which nvml.h now marks
    // deprecated (hence its type spelled out here).
    decltype(&nvmlDeviceGetUtilizationRates) device_get_utilization_rates = nullptr;
    decltype(&nvmlDeviceGetTemperatureV) device_get_temperature_v = nullptr;
    nvmlReturn_t (*device_get_temperature)(nvmlDevice_t, nvmlTemperatureSensors_t, unsigned int*) = nullptr;
    decltype(&nvmlDeviceGetPowerUsage) device_get_power_usage = nullptr;
    // A static property (nvml/devices.hpp): without persistence mode the driver initialises the GPU on
    // the first handle a process asks for, which may take seconds.
    decltype(&nvmlDeviceGetPersistenceMode) device_get_persistence_mode = nullptr;
    // Topology (nvml/topology.hpp), static: the PCIe common ancestor of a pair, each NVLink's state and far
    // end, and a pair's peer-to-peer status where a driver answers only that.
    decltype(&nvmlDeviceGetTopologyCommonAncestor) device_get_topology_common_ancestor = nullptr;
    decltype(&nvmlDeviceGetNvLinkState) device_get_nvlink_state = nullptr;
    decltype(&nvmlDeviceGetNvLinkRemotePciInfo_v2) device_get_nvlink_remote_pci_info = nullptr;
    decltype(&nvmlDeviceGetNvLinkRemoteDeviceType) device_get_nvlink_remote_device_type = nullptr;
    decltype(&nvmlDeviceGetP2PStatus) device_get_p2p_status = nullptr;
};

// NVML's name of a return code ("NVML_ERROR_GPU_IS_LOST"; "NVML_ERROR_UNKNOWN" for one it lacks).
const char* nvml_code_name(int code) noexcept;

class NvmlLibrary {
public:
    // The library at `requested_path` (empty: $FLINK_GPU_NVML_LIBRARY, else "libnvidia-ml.so.1"),
    // loaded and initialised. The same object is returned for the same path for the life of the
    // process; NVML is initialised once, and once more in a forked child. Never throws.
    static const NvmlLibrary* acquire(const std::string& requested_path, Status* status) noexcept;

    // The acquire() in progress on another thread missed its deadline (nvml/deadline.hpp): a fork
    // no longer waits for it (it may never return), and the child starts with NVML to initialise.
    static void abandon_init() noexcept;

    // The path acquire() would use for `requested_path`.
    static std::string resolve_path(const std::string& requested_path);

    // This process's generation: another one in a forked child, where acquire() initialises NVML
    // again, so that what was obtained from NVML before the fork (device handles) is not relied on.
    static unsigned long process_generation() noexcept;

    // The library at `requested_path` loaded (as acquire() loads it) but not initialised, for
    // looking at its symbols on a host without the kernel driver. Never throws.
    static const NvmlLibrary* probe(const std::string& requested_path, Status* status) noexcept;

    const NvmlApi& api() const noexcept { return api_; }
    // Which entries of the symbol table this library resolved (a fallback is looked up only where
    // the newer name is absent).
    const std::bitset<kNvmlSymbolCount>& resolved() const noexcept { return resolved_; }
    // Whether the library exports `symbol`, looked up or not.
    bool exports(NvmlSymbol symbol) const noexcept;

    // The path it was loaded from, as resolve_path() gave it.
    const std::string& path() const noexcept { return path_; }

    // A kNvml status for an NVML return code from `function`, its message naming this library's path.
    Status error(int code, const char* function) const noexcept;
    std::string error_text(int code) const noexcept;

private:
    NvmlLibrary() = default;
    std::string path_;
    void* handle_ = nullptr;
    NvmlApi api_;
    std::bitset<kNvmlSymbolCount> resolved_;
    decltype(&nvmlInit_v2) init_ = nullptr;
    unsigned long initialized_generation_ = 0;  // 0: never initialised in this process
    friend struct LibraryRegistry;
};

}  // namespace flinkgpu
