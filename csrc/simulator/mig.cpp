// MIG: a GPU's mode and its MIG devices, through MIG device handles only, as an unprivileged caller can.
#include "driver_model.hpp"

using namespace flinkgpu_sim;

namespace {

// A GPU (not a unit) that has a MIG mode.
nvmlReturn_t mig_gpu(nvmlDevice_t handle, const SimDevice** out) {
    if (nvmlReturn_t rc = device_for(handle, out); rc != NVML_SUCCESS) return rc;
    return (*out)->is_unit || !(*out)->mig_capable ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

nvmlReturn_t mig_unit(nvmlDevice_t handle, const SimDevice** out) {
    if (nvmlReturn_t rc = device_for(handle, out); rc != NVML_SUCCESS) return rc;
    return (*out)->is_unit ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

}  // namespace

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode,
                                             unsigned int* pendingMode) {
    return guarded({__func__, kFamilyMig, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (currentMode == nullptr || pendingMode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = mig_gpu(device, &d); rc != NVML_SUCCESS) return rc;
        *currentMode = d->mig_mode;
        *pendingMode = d->mig_pending;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMaxMigDeviceCount(nvmlDevice_t device, unsigned int* count) {
    return guarded({__func__, kFamilyMig, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = mig_gpu(device, &d); rc != NVML_SUCCESS) return rc;
        *count = static_cast<unsigned>(d->slot_units.size());
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMigDeviceHandleByIndex(nvmlDevice_t device, unsigned int index,
                                                            nvmlDevice_t* migDevice) {
    return guarded({__func__, kFamilyMig, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (migDevice == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = mig_gpu(device, &d); rc != NVML_SUCCESS) return rc;
        if (index >= d->slot_units.size()) return NVML_ERROR_INVALID_ARGUMENT;
        if (d->mig_mode != NVML_DEVICE_MIG_ENABLE || d->slot_units[index] < 0) return NVML_ERROR_NOT_FOUND;
        SimState& s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        *migDevice = reinterpret_cast<nvmlDevice_t>(&s.units[static_cast<size_t>(d->slot_units[index])]);
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuInstanceId(nvmlDevice_t device, unsigned int* id) {
    return guarded({__func__, kFamilyMig, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = mig_unit(device, &d); rc != NVML_SUCCESS) return rc;
        *id = d->gi;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeInstanceId(nvmlDevice_t device, unsigned int* id) {
    return guarded({__func__, kFamilyMig, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (id == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = mig_unit(device, &d); rc != NVML_SUCCESS) return rc;
        *id = d->ci;
        return NVML_SUCCESS;
    });
}
