// Enumeration of the GPUs NVML sees into plain structs.
#pragma once

#include "nvml/loader.hpp"

#include <optional>
#include <string>
#include <vector>

namespace flinkgpu {

// A GPU, or one MIG instance of a GPU in MIG mode (docs/design.md §9.2), which stands in its place.
struct DeviceInfo {
    std::string index;        // NVML's index (nvidia-smi's) for a GPU; "<parent index>:<slot>" for a MIG unit
    unsigned nvml_index = 0;  // the GPU's NVML index; a unit's parent's
    // A MIG unit only: its slot (nvmlDeviceGetMigDeviceHandleByIndex), its parent's UUID, its GPU and
    // compute instance ids. name, pci_bus_id, minor_number and locality are the parent's.
    std::optional<unsigned> mig_slot;
    std::optional<std::string> parent_uuid;
    std::optional<unsigned> mig_gi, mig_ci;
    std::optional<std::string> uuid;
    std::optional<std::string> name;
    std::optional<std::string> pci_bus_id;
    std::optional<unsigned long long> memory_total;  // bytes
    std::optional<unsigned> minor_number;            // /dev/nvidia<minor>
    std::optional<std::string> cpu_affinity;         // the GPU's NUMA-local CPUs as a cpulist
    std::optional<int> numa_node;                    // from sysfs; absent when unknown
    // nvmlDeviceGetPersistenceMode (a unit's: its GPU's); absent when the driver cannot say. Off, the
    // driver initialises the GPU when a process first asks for its handle: seconds on some GPUs.
    std::optional<bool> persistence_mode;
};

// A device that exists but cannot be handed out (no permission, lost, ...).
struct SkippedDevice {
    std::string index;  // as DeviceInfo::index
    unsigned nvml_index = 0;
    std::optional<unsigned> mig_slot;
    int code = NVML_SUCCESS;
    std::string reason;
};

struct Enumeration {
    std::vector<DeviceInfo> devices;     // in index order, a MIG GPU's units in its place
    std::vector<SkippedDevice> skipped;  // also a GPU in MIG mode without instances (code NOT_FOUND)
    std::vector<std::string> notices;    // what an operator should know: a MIG mode pending a reset
};

// A GPU's MIG instances as NVML gives them to an unprivileged caller: the current mode, and while it
// is enabled the occupied slots (empty ones answer NOT_FOUND: slots are sparse).
struct MigSlot {
    unsigned slot = 0;
    nvmlDevice_t handle = nullptr;
};
struct MigLayout {
    bool enabled = false;          // current mode
    bool pending_differs = false;  // the pending mode (after a reset) is not the current one
    std::vector<MigSlot> slots;
};

// `dev`'s MIG layout; a driver or GPU without MIG (absent symbol, NOT_SUPPORTED) is a disabled
// layout. Returns NVML_SUCCESS or the failing code, with *function the call that failed.
int read_mig_layout(const NvmlApi& api, nvmlDevice_t dev, MigLayout* out, const char** function);

// Lists every device of `lib`. A device whose handle is refused (NO_PERMISSION, ...) or that answers
// GPU_IS_LOST or another per-device error is put in `skipped`; a single property withheld with
// NO_PERMISSION (memory info of a MIG-enabled GPU for an unprivileged caller) is only left absent.
// Errors that concern the whole library (uninitialised, driver gone, version mismatch) fail the
// call. `only`, when given: the GPUs of these NVML numbers and no other (no other GPU's handle is
// taken: without persistence mode a GPU's first handle in a process costs seconds). Never throws.
Status enumerate_devices(const NvmlLibrary& lib, Enumeration* out,
                         const std::optional<std::vector<unsigned>>& only = std::nullopt) noexcept;

// Errors that say nothing about one device but about the library or driver as a whole.
bool is_library_wide_error(int code) noexcept;

// The driver's version string; left empty when the driver does not support the query.
Status query_driver_version(const NvmlLibrary& lib, std::optional<std::string>* out) noexcept;

}  // namespace flinkgpu
