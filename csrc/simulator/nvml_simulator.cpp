// A simulated libnvidia-ml.so.1: the real NVML ABI (built against NVIDIA's nvml.h) over devices
// described by the environment, so that the native path, the CLI and users' CI run without a GPU.
//
//   FLINK_GPU_SIM_DEVICES=N       N identical simulated GPUs (default 4)
//   FLINK_GPU_SIM_SPEC=FILE       a JSON spec of the host: its keys are documented in one place, the
//                                 docstring of flink_gpu.simulator (src/flink_gpu/simulator.py); spec.cpp
//                                 checks them, also for Python (flinkgpuSimCheckSpec)
//   FLINK_GPU_SIM_PROFILE=NAME    the spec of a machine profile: profiles/NAME.json next to this library
//                                 (csrc/simulator/profiles; not together with FLINK_GPU_SIM_SPEC)
//   FLINK_GPU_SIM_INIT_ERROR=CODE nvmlInit returns this NVML error code
//   FLINK_GPU_SIM_COUNTERS_FILE=FILE  the counters (flinkgpuSimCounters) are written there at
//                                 nvmlShutdown and at process exit
// The configuration is read when NVML is initialised (reference count going from 0 to 1).
//
// The driver model: like a real driver, every export holds one process-wide lock for its whole call
// ("driver_lock"), and spends the latency of its query family in it (nanosleep): init (nvmlInit*,
// nvmlShutdown), static (count, uuid, name, pci, minor number, index, versions), handle
// (nvmlDeviceGetHandleByIndex*; a GPU's first one in a process costs first_handle, default handle, or
// with persistence mode disabled first_handle_without_persistence, default first_handle), processes
// (every process list), power, memory, utilization, temperature, inforom, remapped_rows, ecc,
// field_values, fabric, retired_pages, compute_mode, cpu_affinity, mig, persistence_mode. A "hang"
// call blocks after its work, polling its file every 1 ms, still holding the lock, as a call stuck in
// the driver does. flinkgpuSimCounters / flinkgpuSimResetCounters (not NVML) give tests and
// benchmarks the calls per function per device and the time the lock was held.
//
// A GPU's utilization, temperature and power follow its load, a triangle wave (period 60 s, GPU i
// 7 s * i ahead) on CLOCK_MONOTONIC, the same in every process: utilization 0..100 %, temperature
// 30..80 °C, power 50..700 W. A MIG device's handle answers NOT_SUPPORTED for all three, and a GPU in
// MIG mode for utilization, as NVML does.
//
// Two builds of these files exist. The default one is a current driver: it has the versioned
// nvmlDeviceGetRunningProcessDetailList and *_v3 process queries that fill the four-field
// nvmlProcessInfo_v2_t. Built with FLINK_GPU_SIM_R535 it is a driver of the R535 era: no
// nvmlDeviceGetRunningProcessDetailList, nvmlDeviceGetConfComputeMemSizeInfo present, and *_v3
// filling five-field entries (usedGpuCcProtectedMemory appended) through the same prototype.
//
// The files: nvml_simulator.cpp (these entry points: init, shutdown, the host and the GPUs'
// identity), spec.cpp (the configuration), device_model.cpp (the simulated host), driver_model.cpp
// (latency, the driver lock, hangs, counters: guarded()), state_queries.cpp, processes.cpp,
// readings.cpp and mig.cpp (the queries of each kind), json.hpp (the spec's reader).
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "driver_model.hpp"
#include "spec.hpp"

using namespace flinkgpu_sim;

namespace {

nvmlReturn_t init() {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.refcount == 0) {
        const nvmlReturn_t rc = configure(s);
        if (rc != NVML_SUCCESS) return rc;
        start_counting();
    }
    ++s.refcount;
    return NVML_SUCCESS;
}

nvmlReturn_t fill_pci(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    const SimDevice* d = nullptr;
    if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
    std::memset(pci, 0, sizeof *pci);
    std::snprintf(pci->busId, sizeof pci->busId, "%s", d->pci_bus_id.c_str());
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", d->pci_bus_id.c_str());
    unsigned domain = 0, bus = 0, dev = 0;
    if (std::sscanf(d->pci_bus_id.c_str(), "%x:%x:%x", &domain, &bus, &dev) == 3) {
        pci->domain = domain;
        pci->bus = bus;
        pci->device = dev;
    }
    pci->pciDeviceId = 0x233010DE;
    return NVML_SUCCESS;
}

}  // namespace

SIM_EXPORT nvmlReturn_t nvmlInit_v2(void) {
    return guarded({__func__, kFamilyInit}, [&]() -> nvmlReturn_t { return init(); });
}
SIM_EXPORT nvmlReturn_t nvmlInit(void) {
    return guarded({__func__, kFamilyInit}, [&]() -> nvmlReturn_t { return init(); });
}
SIM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int) {
    return guarded({__func__, kFamilyInit}, [&]() -> nvmlReturn_t { return init(); });
}

SIM_EXPORT nvmlReturn_t nvmlShutdown(void) {
    return guarded({__func__, kFamilyInit}, [&]() -> nvmlReturn_t {
        SimState& s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
        --s.refcount;
        write_counters_file();
        return NVML_SUCCESS;
    });
}

SIM_EXPORT const char* nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
        case NVML_SUCCESS: return "Success";
        case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
        case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
        case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
        case NVML_ERROR_NO_PERMISSION: return "Insufficient Permissions";
        case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
        case NVML_ERROR_DRIVER_NOT_LOADED: return "Driver Not Loaded";
        case NVML_ERROR_LIBRARY_NOT_FOUND: return "NVML Shared Library Not Found";
        case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
        case NVML_ERROR_LIB_RM_VERSION_MISMATCH: return "RM has detected an NVML/RM version mismatch.";
        default: return "Unknown Error";
    }
}

SIM_EXPORT nvmlReturn_t nvmlSystemGetDriverVersion(char* version, unsigned int length) {
    return guarded({__func__, kFamilyStatic}, [&]() -> nvmlReturn_t {
        SimState& s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
        return copy_string(s.driver_version, version, length);
    });
}

SIM_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
    return guarded({__func__, kFamilyStatic},
                   [&]() -> nvmlReturn_t { return copy_string("13.0.0-simulated", version, length); });
}

namespace {

nvmlReturn_t device_count(unsigned* count) {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    *count = static_cast<unsigned>(s.devices.size());
    return NVML_SUCCESS;
}

nvmlReturn_t handle_by_index(unsigned index, nvmlDevice_t* device) {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    if (device == nullptr || index >= s.devices.size()) return NVML_ERROR_INVALID_ARGUMENT;
    if (s.devices[index].fault == Fault::kNoPermission) return NVML_ERROR_NO_PERMISSION;
    const SimDevice& d = s.devices[index];
    if (!d.lost_handle_when_exists.empty() && access(d.lost_handle_when_exists.c_str(), F_OK) == 0)
        return NVML_ERROR_GPU_IS_LOST;
    *device = reinterpret_cast<nvmlDevice_t>(&s.devices[index]);
    return NVML_SUCCESS;
}

}  // namespace

SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
    return guarded({__func__, kFamilyStatic}, [&]() -> nvmlReturn_t { return device_count(count); });
}
SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) {
    return guarded({__func__, kFamilyStatic}, [&]() -> nvmlReturn_t { return device_count(count); });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
    return guarded({__func__, kFamilyHandle, nullptr, index},
                   [&]() -> nvmlReturn_t { return handle_by_index(index, device); });
}
SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
    return guarded({__func__, kFamilyHandle, nullptr, index},
                   [&]() -> nvmlReturn_t { return handle_by_index(index, device); });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
    return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        *index = d->index;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
    return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        return copy_string(d->uuid, uuid, length);
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
    return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        return copy_string(d->name, name, length);
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t { return fill_pci(device, pci); });
}
SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) {
    return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t { return fill_pci(device, pci); });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
    return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        *minor = d->minor_number;
        return NVML_SUCCESS;
    });
}
