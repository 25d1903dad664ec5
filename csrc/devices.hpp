// Enumeration of the GPUs NVML sees into plain structs.
#pragma once

#include "nvml_loader.hpp"

#include <optional>
#include <string>
#include <vector>

namespace flinkgpu {

struct DeviceInfo {
    unsigned index = 0;  // NVML's index, the same as nvidia-smi's
    std::optional<std::string> uuid;
    std::optional<std::string> name;
    std::optional<std::string> pci_bus_id;
    std::optional<unsigned long long> memory_total;  // bytes
    std::optional<unsigned> minor_number;            // /dev/nvidia<minor>
    std::optional<std::string> cpu_affinity;         // the GPU's NUMA-local CPUs as a cpulist
    std::optional<int> numa_node;                    // from sysfs; absent when unknown
};

// A device that exists but cannot be handed out (no permission, lost, ...).
struct SkippedDevice {
    unsigned index = 0;
    int code = NVML_SUCCESS;
    std::string reason;
};

struct Enumeration {
    std::vector<DeviceInfo> devices;  // in index order
    std::vector<SkippedDevice> skipped;
};

// Lists every device of `lib`. A device whose handle is refused (NO_PERMISSION, ...) or that answers
// GPU_IS_LOST or another per-device error is put in `skipped`; a single property withheld with
// NO_PERMISSION (memory info of a MIG-enabled GPU for an unprivileged caller) is only left absent.
// Errors that concern the whole library (uninitialised, driver gone, version mismatch) fail the
// call. Never throws.
Status enumerate_devices(const NvmlLibrary& lib, Enumeration* out) noexcept;

// Errors that say nothing about one device but about the library or driver as a whole.
bool is_library_wide_error(int code) noexcept;

// The driver's version string; left empty when the driver does not support the query.
Status query_driver_version(const NvmlLibrary& lib, std::optional<std::string>* out) noexcept;

}  // namespace flinkgpu
