#include "nvml/devices.hpp"

#include "host/locality.hpp"

#include <algorithm>
#include <new>

namespace flinkgpu {

namespace {

// "Not there" answers: the property is simply absent for this device or driver.
bool is_absent(int code) {
    return code == NVML_ERROR_NOT_SUPPORTED || code == NVML_ERROR_FUNCTION_NOT_FOUND || code == NVML_ERROR_NOT_FOUND;
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
    char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE > NVML_DEVICE_NAME_V2_BUFFER_SIZE ? NVML_DEVICE_UUID_V2_BUFFER_SIZE
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
    if (api.device_get_persistence_mode != nullptr) {
        // Informational: whatever it answers other than a mode (absent, NOT_SUPPORTED, an error)
        // leaves it unknown and never skips the GPU.
        nvmlEnableState_t mode = NVML_FEATURE_DISABLED;
        if (api.device_get_persistence_mode(dev, &mode) == NVML_SUCCESS)
            info->persistence_mode = mode == NVML_FEATURE_ENABLED;
    }
    if (info->pci_bus_id) info->numa_node = pci_numa_node("/sys", *info->pci_bus_id);
    return std::nullopt;
}

// A MIG unit of `parent` in `slot`: the parent's name, bus id and locality, and from the MIG handle
// its UUID, memory and instance ids.
std::optional<Failure> query_unit(const NvmlApi& api, const DeviceInfo& parent, const MigSlot& slot, DeviceInfo* unit) {
    *unit = parent;
    unit->index = parent.index + ":" + std::to_string(slot.slot);
    unit->mig_slot = slot.slot;
    unit->parent_uuid = parent.uuid;
    unit->uuid.reset();
    unit->memory_total.reset();
    unit->minor_number.reset();
    if (api.device_get_uuid != nullptr) {
        char buf[NVML_DEVICE_UUID_V2_BUFFER_SIZE] = {};
        auto f = property(api.device_get_uuid(slot.handle, buf, sizeof buf), "nvmlDeviceGetUUID", [&] {
            buf[sizeof buf - 1] = '\0';
            unit->uuid = std::string(buf);
        });
        if (f) return f;
    }
    if (api.device_get_memory_info != nullptr) {
        nvmlMemory_t mem{};
        auto f = property(api.device_get_memory_info(slot.handle, &mem), "nvmlDeviceGetMemoryInfo",
                          [&] { unit->memory_total = mem.total; });
        if (f) return f;
    }
    unsigned id = 0;
    if (api.device_get_gpu_instance_id != nullptr) {
        auto f = property(api.device_get_gpu_instance_id(slot.handle, &id), "nvmlDeviceGetGpuInstanceId",
                          [&] { unit->mig_gi = id; });
        if (f) return f;
    }
    if (api.device_get_compute_instance_id != nullptr) {
        auto f = property(api.device_get_compute_instance_id(slot.handle, &id), "nvmlDeviceGetComputeInstanceId",
                          [&] { unit->mig_ci = id; });
        if (f) return f;
    }
    return std::nullopt;
}

}  // namespace

int read_mig_layout(const NvmlApi& api, nvmlDevice_t dev, MigLayout* out, const char** function) {
    *out = MigLayout();
    if (api.device_get_mig_mode == nullptr) return NVML_SUCCESS;
    unsigned current = NVML_DEVICE_MIG_DISABLE, pending = NVML_DEVICE_MIG_DISABLE;
    int rc = api.device_get_mig_mode(dev, &current, &pending);
    if (classify_property(rc) == Query::kAbsent) return NVML_SUCCESS;
    if (rc != NVML_SUCCESS) {
        *function = "nvmlDeviceGetMigMode";
        return rc;
    }
    out->enabled = current == NVML_DEVICE_MIG_ENABLE;
    out->pending_differs = pending != current;
    if (!out->enabled || api.device_get_max_mig_device_count == nullptr ||
        api.device_get_mig_device_handle_by_index == nullptr)
        return NVML_SUCCESS;
    unsigned max = 0;
    rc = api.device_get_max_mig_device_count(dev, &max);
    if (classify_property(rc) == Query::kAbsent) return NVML_SUCCESS;
    if (rc != NVML_SUCCESS) {
        *function = "nvmlDeviceGetMaxMigDeviceCount";
        return rc;
    }
    for (unsigned slot = 0; slot < max; ++slot) {
        nvmlDevice_t mig = nullptr;
        rc = api.device_get_mig_device_handle_by_index(dev, slot, &mig);
        if (rc == NVML_ERROR_NOT_FOUND) continue;  // an empty slot
        if (rc != NVML_SUCCESS) {
            *function = "nvmlDeviceGetMigDeviceHandleByIndex";
            return rc;
        }
        out->slots.push_back(MigSlot{slot, mig});
    }
    return NVML_SUCCESS;
}

bool is_library_wide_error(int code) noexcept {
    return code == NVML_ERROR_UNINITIALIZED || code == NVML_ERROR_DRIVER_NOT_LOADED ||
           code == NVML_ERROR_LIB_RM_VERSION_MISMATCH || code == NVML_ERROR_LIBRARY_NOT_FOUND ||
           code == NVML_ERROR_MEMORY;
}

Status enumerate_devices(const NvmlLibrary& lib, Enumeration* out,
                         const std::optional<std::vector<unsigned>>& only) noexcept {
    try {
        out->devices.clear();
        out->skipped.clear();
        out->notices.clear();
        const NvmlApi& api = lib.api();
        unsigned count = 0;
        const int rc = api.device_get_count(&count);
        if (rc != NVML_SUCCESS) return lib.error(rc, "nvmlDeviceGetCount_v2");
        out->devices.reserve(count);
        auto skip = [&](unsigned gpu, std::optional<unsigned> slot, const Failure& failure) {
            SkippedDevice skipped;
            skipped.index = std::to_string(gpu) + (slot ? ":" + std::to_string(*slot) : std::string());
            skipped.nvml_index = gpu;
            skipped.mig_slot = slot;
            const std::string& index = skipped.index;
            skipped.code = failure.code;
            skipped.reason =
                "GPU " + index + " skipped: " + failure.function + " returned " + lib.error_text(failure.code) + ".";
            out->skipped.push_back(std::move(skipped));
        };
        for (unsigned i = 0; i < count; ++i) {
            if (only && std::find(only->begin(), only->end(), i) == only->end()) continue;
            nvmlDevice_t dev = nullptr;
            std::optional<Failure> failure;
            const int hrc = api.device_get_handle_by_index(i, &dev);
            DeviceInfo info;
            info.index = std::to_string(i);
            info.nvml_index = i;
            if (hrc != NVML_SUCCESS) failure = Failure{hrc, "nvmlDeviceGetHandleByIndex_v2"};
            else failure = query_device(api, dev, &info);
            MigLayout mig;
            if (!failure) {
                const char* function = nullptr;
                const int mrc = read_mig_layout(api, dev, &mig, &function);
                if (mrc != NVML_SUCCESS) failure = Failure{mrc, function};
            }
            if (failure) {
                if (classify(failure->code) == Query::kFail) return lib.error(failure->code, failure->function);
                skip(i, std::nullopt, *failure);
                continue;
            }
            if (mig.pending_differs)
                out->notices.push_back("GPU " + info.index + ": MIG mode pending a reset (now " +
                                       (mig.enabled ? "enabled" : "disabled") + ", " +
                                       (mig.enabled ? "disabled" : "enabled") + " after the GPU is reset).");
            if (!mig.enabled) {
                out->devices.push_back(std::move(info));
                continue;
            }
            if (mig.slots.empty()) {
                SkippedDevice skipped;
                skipped.index = info.index;
                skipped.nvml_index = i;
                skipped.code = NVML_ERROR_NOT_FOUND;
                skipped.reason = "GPU " + info.index +
                                 " skipped: MIG mode is enabled but it has no MIG instances "
                                 "(create them with nvidia-smi mig, or disable MIG mode).";
                out->skipped.push_back(std::move(skipped));
                continue;
            }
            for (const MigSlot& slot : mig.slots) {
                DeviceInfo unit;
                if (auto f = query_unit(api, info, slot, &unit)) {
                    if (classify(f->code) == Query::kFail) return lib.error(f->code, f->function);
                    skip(i, slot.slot, *f);
                    continue;
                }
                out->devices.push_back(std::move(unit));
            }
        }
        return Status();
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "enumerate_devices", "Out of memory while enumerating GPUs.");
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
        return nvml_failure(NVML_ERROR_MEMORY, "query_driver_version",
                            "Out of memory while reading the driver version.");
    }
}

}  // namespace flinkgpu
