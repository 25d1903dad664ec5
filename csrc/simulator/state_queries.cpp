// The device state queries (those of csrc/nvml/read.cpp): memory, CPU affinity, compute mode,
// InfoROM, remapped rows, ECC, field values (the NVLink count among them), NVLink fabric, retired pages,
// persistence mode.
#include <cstring>

#include "driver_model.hpp"

using namespace flinkgpu_sim;

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    return guarded({__func__, kFamilyMemory, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        if (nvmlReturn_t rc = query_allowed(*d, kQueryMemory); rc != NVML_SUCCESS) return rc;
        memory->total = d->memory_total;
        memory->free = d->memory_total - d->memory_used - d->memory_reserved;
        memory->used = d->memory_used + d->memory_reserved;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
    return guarded({__func__, kFamilyMemory, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryMemoryV2, &d); rc != NVML_SUCCESS) return rc;
        if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        memory->total = d->memory_total;
        memory->reserved = d->memory_reserved;
        memory->used = d->memory_used;
        memory->free = d->memory_total - d->memory_used - d->memory_reserved;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
                                                            unsigned long* cpuSet, nvmlAffinityScope_t scope) {
    return guarded({__func__, kFamilyCpuAffinity, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (cpuSet == nullptr || cpuSetSize == 0 ||
            (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET))
            return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        if (nvmlReturn_t rc = query_allowed(*d, kQueryCpuAffinity); rc != NVML_SUCCESS) return rc;
        if (d->cpu_affinity.empty()) return NVML_ERROR_NOT_SUPPORTED;
        for (unsigned i = 0; i < cpuSetSize; ++i) cpuSet[i] = i < d->cpu_affinity.size() ? d->cpu_affinity[i] : 0;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t* mode) {
    return guarded({__func__, kFamilyComputeMode, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryComputeMode, &d); rc != NVML_SUCCESS) return rc;
        *mode = d->compute_mode;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceValidateInforom(nvmlDevice_t device) {
    return guarded({__func__, kFamilyInforom, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (nvmlReturn_t rc = state_device(device, kQueryInforom, &d); rc != NVML_SUCCESS) return rc;
        return d->inforom_corrupted ? NVML_ERROR_CORRUPTED_INFOROM : NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corrRows, unsigned int* uncRows,
                                                  unsigned int* isPending, unsigned int* failureOccurred) {
    return guarded({__func__, kFamilyRemappedRows, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (!corrRows || !uncRows || !isPending || !failureOccurred) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryRemappedRows, &d); rc != NVML_SUCCESS) return rc;
        *corrRows = 0;
        *uncRows = d->remap_failure || d->remap_pending ? 1 : 0;
        *isPending = d->remap_pending ? 1 : 0;
        *failureOccurred = d->remap_failure ? 1 : 0;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current,
                                             nvmlEnableState_t* pending) {
    return guarded({__func__, kFamilyEcc, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (current == nullptr || pending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryEccMode, &d); rc != NVML_SUCCESS) return rc;
        *current = *pending = d->ecc_enabled ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
    });
}

// Answers whatever ECC mode says, so that a test sees the count ignored while ECC is off.
SIM_EXPORT nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                                    nvmlEccCounterType_t counterType, unsigned long long* eccCounts) {
    return guarded({__func__, kFamilyEcc, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (eccCounts == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryEccErrors, &d); rc != NVML_SUCCESS) return rc;
        const bool uncorrected_volatile =
            errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED && counterType == NVML_VOLATILE_ECC;
        *eccCounts = uncorrected_volatile ? d->ecc_uncorrected : 0;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount, nvmlFieldValue_t* values) {
    return guarded({__func__, kFamilyFieldValues, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (values == nullptr || valuesCount <= 0) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryFieldValues, &d); rc != NVML_SUCCESS) return rc;
        for (int i = 0; i < valuesCount; ++i) {
            nvmlFieldValue_t& v = values[i];
            // the health fields answer as the query they stand for would (not supported, no permission)
            auto field = [&](Query q, unsigned long long value) {
                v.nvmlReturn = query_allowed(*d, q);
                v.valueType = NVML_VALUE_TYPE_UNSIGNED_LONG_LONG;
                v.value.ullVal = v.nvmlReturn == NVML_SUCCESS ? value : 0;
            };
            if (v.fieldId == NVML_FI_DEV_GET_GPU_RECOVERY_ACTION) {
                v.nvmlReturn = NVML_SUCCESS;
                v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
                v.value.uiVal = d->recovery_action;
            } else if (v.fieldId == NVML_FI_DEV_ECC_CURRENT) {
                field(kQueryEccMode, d->ecc_enabled ? 1 : 0);
            } else if (v.fieldId == NVML_FI_DEV_ECC_DBE_VOL_TOTAL) {
                field(kQueryEccErrors, d->ecc_enabled ? d->ecc_uncorrected : 0);
            } else if (v.fieldId == NVML_FI_DEV_REMAPPED_PENDING) {
                field(kQueryRemappedRows, d->remap_pending ? 1 : 0);
            } else if (v.fieldId == NVML_FI_DEV_REMAPPED_FAILURE) {
                field(kQueryRemappedRows, d->remap_failure ? 1 : 0);
            } else if (v.fieldId == NVML_FI_DEV_RETIRED_PENDING) {
                field(kQueryRetiredPages, d->pages_pending ? 1 : 0);
            } else if (v.fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT) {
                // the links the GPU has (0 without NVLink), active or not; none on a MIG device's handle
                v.nvmlReturn = d->is_unit ? NVML_ERROR_NOT_SUPPORTED : query_allowed(*d, kQueryNvLink);
                v.valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
                v.value.uiVal = v.nvmlReturn == NVML_SUCCESS ? static_cast<unsigned>(d->nvlinks.size()) : 0;
            } else {
                v.nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
            }
        }
        return NVML_SUCCESS;
    });
}

// The fabric fields into any of the three structs (they share the names).
template <typename Info>
void fill_fabric(const SimDevice& d, Info* info) {
    std::memset(info->clusterUuid, 0, sizeof info->clusterUuid);  // as on a healthy HGX H100 with R580
    info->status = d.fabric_status;
    info->cliqueId = 0;
    info->state = d.fabric_state;
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t* info) {
    return guarded({__func__, kFamilyFabric, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryFabric, &d); rc != NVML_SUCCESS) return rc;
        if (!d->has_fabric) return NVML_ERROR_NOT_SUPPORTED;
        if (d->fabric_struct == 1) return NVML_ERROR_FUNCTION_NOT_FOUND;  // an R535 driver: no V
        if (info->version == nvmlGpuFabricInfo_v3 && d->fabric_struct == 3) {
            fill_fabric(*d, info);
            info->healthMask = 0;
            info->healthSummary = d->fabric_health_summary;
            return NVML_SUCCESS;
        }
        if (info->version == nvmlGpuFabricInfo_v2) {
            auto* v2 = reinterpret_cast<nvmlGpuFabricInfo_v2_t*>(info);
            fill_fabric(*d, v2);
            v2->healthMask = 0;
            return NVML_SUCCESS;
        }
        return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t* info) {
    return guarded({__func__, kFamilyFabric, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryFabric, &d); rc != NVML_SUCCESS) return rc;
        if (!d->has_fabric) return NVML_ERROR_NOT_SUPPORTED;
        fill_fabric(*d, info);
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device, nvmlEnableState_t* isPending) {
    return guarded({__func__, kFamilyRetiredPages, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (isPending == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryRetiredPages, &d); rc != NVML_SUCCESS) return rc;
        *isPending = d->pages_pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetConfComputeMemSizeInfo(nvmlDevice_t device, nvmlConfComputeMemSizeInfo_t*) {
    // exported for its presence: it marks drivers since R535
    return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t { return NVML_ERROR_NOT_SUPPORTED; });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetPersistenceMode(nvmlDevice_t device, nvmlEnableState_t* mode) {
    return guarded({__func__, kFamilyPersistenceMode, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (mode == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryPersistenceMode, &d); rc != NVML_SUCCESS) return rc;
        *mode = d->persistence_mode ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
    });
}
