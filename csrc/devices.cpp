#include "devices.hpp"

#include "locality.hpp"

#include <new>

namespace flinkgpu {

namespace {

// "Not there" answers: the property is simply absent for this device or driver.
bool is_absent(int code) {
    return code == NVML_ERROR_NOT_SUPPORTED || code == NVML_ERROR_FUNCTION_NOT_FOUND ||
           code == NVML_ERROR_NOT_FOUND;
}

enum class Query { kOk, kAbsent, kSkip, kFail };

Query classify(int code) {
    if (code == NVML_SUCCESS) return Query::kOk;
    if (is_absent(code)) return Query::kAbsent;
    if (is_library_wide_error(code)) return Query::kFail;
    return Query::kSkip;
}

// For the optional properties of a device whose handle we have: NO_PERMISSION there means this one
// property is withheld (nvml.h: memory info of a MIG-enabled GPU needs privileges), not that the
// device is unusable, so the property is left absent. A device that refuses its handle is skipped.
Query classify_property(int code) {
    if (code == NVML_ERROR_NO_PERMISSION) return Query::kAbsent;
    return classify(code);
}

// Room for 4096 CPUs in the affinity mask.
constexpr unsigned kAffinityWords = 4096 / (sizeof(unsigned long) * 8);

struct Failure {
    int code;
    const char* function;
};

// One optional property's answer `rc` from `function`: `store` it when read, leave it absent when
// the device or driver does not have it, else the failure that skips the device (or fails all).
template <typename Store>
std::optional<Failure> property(int rc, const char* function, Store store) {
    switch (classify_property(rc)) {
        case Query::kOk: store(); return std::nullopt;
        case Query::kAbsent: return std::nullopt;
        default: return Failure{rc, function};
    }
}

// Fills one device; returns the failing call when the device must be skipped or the whole
// enumeration fail, nullopt when every property was read or is absent.
std::optional<Failure> query_device(const NvmlApi& api, nvmlDevice_t dev, DeviceInfo* info) {
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE > NVML_DEVICE_NAME_V2_BUFFER_SIZE
                 ? NVML_DEVICE_UUID_V2_BUFFER_SIZE
                 : NVML_DEVICE_NAME_V2_BUFFER_SIZE];
    auto read_string = [&](auto fn, const char* name, std::optional<std::string>* out) -> std::optional<Failure> {
        if (fn == nullptr) return std::nullopt;
        buf[0] = '\0';
        return property(fn(dev, buf, sizeof buf), name, [&] {
            buf[sizeof buf - 1] = '\0';
            *out = std::string(buf);
        });
    };
    if (auto f = read_string(api.device_get_uuid, "nvmlDeviceGetUUID", &info->uuid)) return f;
    if (auto f = read_string(api.device_get_name, "nvmlDeviceGetName", &info->name)) return f;
    if (api.device_get_pci_info != nullptr) {
        nvmlPciInfo_t pci{};
        auto f = property(api.device_get_pci_info(dev, &pci), "nvmlDeviceGetPciInfo_v3", [&] {
            pci.busId[sizeof pci.busId - 1] = '\0';
            pci.busIdLegacy[sizeof pci.busIdLegacy - 1] = '\0';
            const char* bus_id = api.pci_info_v1 ? pci.busIdLegacy : pci.busId;
            if (bus_id[0] != '\0') info->pci_bus_id = std::string(bus_id);
        });
        if (f) return f;
    }
    if (api.device_get_memory_info != nullptr) {
        nvmlMemory_t mem{};
        auto f = property(api.device_get_memory_info(dev, &mem), "nvmlDeviceGetMemoryInfo",
                          [&] { info->memory_total = mem.total; });
        if (f) return f;
    }
    if (api.device_get_minor_number != nullptr) {
        unsigned minor = 0;
        auto f = property(api.device_get_minor_number(dev, &minor), "nvmlDeviceGetMinorNumber",
                          [&] { info->minor_number = minor; });
        if (f) return f;
    }
    if (api.device_get_cpu_affinity_within_scope != nullptr) {
        unsigned long mask[kAffinityWords] = {};
        auto f = property(api.device_get_cpu_affinity_within_scope(dev, kAffinityWords, mask, NVML_AFFINITY_SCOPE_NODE),
                          "nvmlDeviceGetCpuAffinityWithinScope", [&] {
                              std::string cpus = cpulist(mask, kAffinityWords);
                              if (!cpus.empty()) info->cpu_affinity = std::move(cpus);
                          });
        if (f) return f;
    }
    if (info->pci_bus_id) info->numa_node = pci_numa_node("/sys", *info->pci_bus_id);
    return std::nullopt;
}

}  // namespace

bool is_library_wide_error(int code) noexcept {
    return code == NVML_ERROR_UNINITIALIZED || code == NVML_ERROR_DRIVER_NOT_LOADED ||
           code == NVML_ERROR_LIB_RM_VERSION_MISMATCH || code == NVML_ERROR_LIBRARY_NOT_FOUND ||
           code == NVML_ERROR_MEMORY;
}

Status enumerate_devices(const NvmlLibrary& lib, Enumeration* out) noexcept {
    try {
        out->devices.clear();
        out->skipped.clear();
        const NvmlApi& api = lib.api();
        unsigned count = 0;
        const int rc = api.device_get_count(&count);
        if (rc != NVML_SUCCESS) return lib.error(rc, "nvmlDeviceGetCount_v2");
        out->devices.reserve(count);
        for (unsigned i = 0; i < count; ++i) {
            nvmlDevice_t dev = nullptr;
            std::optional<Failure> failure;
            const int hrc = api.device_get_handle_by_index(i, &dev);
            DeviceInfo info;
            info.index = i;
            if (hrc != NVML_SUCCESS) failure = Failure{hrc, "nvmlDeviceGetHandleByIndex_v2"};
            else failure = query_device(api, dev, &info);
            if (!failure) {
                out->devices.push_back(std::move(info));
                continue;
            }
            if (classify(failure->code) == Query::kFail) return lib.error(failure->code, failure->function);
            SkippedDevice skipped;
            skipped.index = i;
            skipped.code = failure->code;
            skipped.reason = "GPU " + std::to_string(i) + " skipped: " + failure->function + " returned " +
                             lib.error_text(failure->code) + ".";
            out->skipped.push_back(std::move(skipped));
        }
        return Status();
    } catch (const std::bad_alloc&) {
        return nvml_failure_noexcept(NVML_ERROR_MEMORY, "enumerate_devices", "Out of memory while enumerating GPUs.");
    }
}

Status query_driver_version(const NvmlLibrary& lib, std::optional<std::string>* out) noexcept {
    try {
        out->reset();
        const auto fn = lib.api().system_get_driver_version;
        if (fn == nullptr) return Status();
        char buf[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
        const int rc = fn(buf, sizeof buf);
        if (rc == NVML_SUCCESS) {
            buf[sizeof buf - 1] = '\0';
            *out = std::string(buf);
        } else if (!is_absent(rc)) {
            return lib.error(rc, "nvmlSystemGetDriverVersion");
        }
        return Status();
    } catch (const std::bad_alloc&) {
        return nvml_failure_noexcept(NVML_ERROR_MEMORY, "query_driver_version",
                                     "Out of memory while reading the driver version.");
    }
}

}  // namespace flinkgpu
