// The process lists: the compute, graphics and MPS queries in their three versions, and the versioned
// detail list of current drivers (absent from the R535 build, whose *_v3 fill five-field entries).
#include <cstring>

#include "driver_model.hpp"

using namespace flinkgpu_sim;

namespace {

template <typename Entry>
nvmlReturn_t copy_processes(const SimDevice& d, unsigned mode, unsigned* count, Entry* out) {
    if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned n = 0;
    for (const SimProcess& p : d.processes) n += p.mode == mode ? 1 : 0;
    if (*count < n) {
        *count = n;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (n > 0 && out == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    unsigned i = 0;
    for (const SimProcess& p : d.processes) {
        if (p.mode != mode) continue;
        Entry e{};
        e.pid = p.pid;
        e.usedGpuMemory = p.used_memory;
        std::memcpy(static_cast<void*>(out + i), &e, sizeof e);
        ++i;
    }
    *count = n;
    return NVML_SUCCESS;
}

Query process_query(unsigned mode) {
    return mode == NVML_PROCESS_MODE_GRAPHICS ? kQueryGraphicsProcesses
           : mode == NVML_PROCESS_MODE_MPS    ? kQueryMpsProcesses
                                              : kQueryComputeProcesses;
}

template <typename Entry>
nvmlReturn_t running_processes(nvmlDevice_t device, unsigned mode, unsigned* count, Entry* out) {
    const SimDevice* d = nullptr;
    if (nvmlReturn_t rc = state_device(device, process_query(mode), &d); rc != NVML_SUCCESS) return rc;
    return copy_processes(*d, mode, count, out);
}

// *_v3: the four-field struct, or in the R535 build five-field entries through the same prototype.
nvmlReturn_t running_processes_v3(nvmlDevice_t device, unsigned mode, unsigned* count, nvmlProcessInfo_t* out) {
#ifdef FLINK_GPU_SIM_R535
    return running_processes(device, mode, count, reinterpret_cast<nvmlProcessDetail_v1_t*>(out));
#else
    return running_processes(device, mode, count, out);
#endif
}

}  // namespace

#define SIM_PROCESS_QUERIES(NAME, MODE)                                                                        \
    SIM_EXPORT nvmlReturn_t NAME(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos) {      \
        return guarded({__func__, kFamilyProcesses, device},                                                   \
                       [&]() -> nvmlReturn_t { return running_processes(device, MODE, count, infos); });       \
    }                                                                                                          \
    SIM_EXPORT nvmlReturn_t NAME##_v2(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v2_t* infos) { \
        return guarded({__func__, kFamilyProcesses, device},                                                   \
                       [&]() -> nvmlReturn_t { return running_processes(device, MODE, count, infos); });       \
    }                                                                                                          \
    SIM_EXPORT nvmlReturn_t NAME##_v3(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos) {    \
        return guarded({__func__, kFamilyProcesses, device},                                                   \
                       [&]() -> nvmlReturn_t { return running_processes_v3(device, MODE, count, infos); });    \
    }
SIM_PROCESS_QUERIES(nvmlDeviceGetComputeRunningProcesses, NVML_PROCESS_MODE_COMPUTE)
SIM_PROCESS_QUERIES(nvmlDeviceGetGraphicsRunningProcesses, NVML_PROCESS_MODE_GRAPHICS)
SIM_PROCESS_QUERIES(nvmlDeviceGetMPSComputeRunningProcesses, NVML_PROCESS_MODE_MPS)
#undef SIM_PROCESS_QUERIES

#ifndef FLINK_GPU_SIM_R535
SIM_EXPORT nvmlReturn_t nvmlDeviceGetRunningProcessDetailList(nvmlDevice_t device, nvmlProcessDetailList_t* plist) {
    return guarded({__func__, kFamilyProcesses, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (plist == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (plist->version != nvmlProcessDetailList_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        if (plist->mode > NVML_PROCESS_MODE_MPS) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        if (nvmlReturn_t rc = state_error_now(*d); rc != NVML_SUCCESS) return rc;
        if (nvmlReturn_t rc = query_allowed(*d, kQueryProcessDetailList); rc != NVML_SUCCESS) return rc;
        if (nvmlReturn_t rc = query_allowed(*d, process_query(plist->mode)); rc != NVML_SUCCESS) return rc;
        return copy_processes(*d, plist->mode, &plist->numProcArrayEntries, plist->procArray);
    });
}
#endif
