// Run-time loading of libnvidia-ml: dlopen, the symbol table, init once per process (and again
// after fork), and NVML return codes turned into messages a person can act on.
// libnvidia-ml is never a link-time dependency, so everything imports on hosts without a driver.
#pragma once

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include "status.hpp"

#include <string>

namespace flinkgpu {

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
};

class NvmlLibrary {
public:
    // The library at `requested_path` (empty: $FLINK_GPU_NVML_LIBRARY, else "libnvidia-ml.so.1"),
    // loaded and initialised. The same object is returned for the same path for the life of the
    // process; NVML is initialised once, and once more in a forked child. Never throws.
    static const NvmlLibrary* acquire(const std::string& requested_path, Status* status) noexcept;

    // The path acquire() would use for `requested_path`.
    static std::string resolve_path(const std::string& requested_path);

    const NvmlApi& api() const noexcept { return api_; }

    // A kNvml status for an NVML return code from `function`, its message naming this library's path.
    Status error(int code, const char* function) const noexcept;
    std::string error_text(int code) const noexcept;

private:
    NvmlLibrary() = default;
    std::string path_;
    void* handle_ = nullptr;
    NvmlApi api_;
    decltype(&nvmlInit_v2) init_ = nullptr;
    unsigned long initialized_generation_ = 0;  // 0: never initialised in this process
    friend struct LibraryRegistry;
};

}  // namespace flinkgpu
