// The live readings (the queries of csrc/nvml/metrics.cpp): utilization, temperature and power follow
// each GPU's load, a triangle wave on CLOCK_MONOTONIC, unless the spec pins them.
#include "driver_model.hpp"

using namespace flinkgpu_sim;

namespace {

// The load of `d` now, 0..1000: a triangle wave of period 60 s on CLOCK_MONOTONIC, GPU i 7 s ahead.
unsigned long long load_permille(const SimDevice& d) {
    constexpr unsigned long long kPeriodMs = 60000, kHalfMs = kPeriodMs / 2;
    const unsigned long long ms = monotonic_ms() + 7000ULL * d.index;
    const unsigned long long phase = ms % kPeriodMs;
    return (phase < kHalfMs ? phase : kPeriodMs - phase) * 1000ULL / kHalfMs;
}

unsigned long long scaled(unsigned long long permille, unsigned long long low, unsigned long long high) {
    return low + ((high - low) * permille + 500) / 1000;
}

// A GPU (not a MIG device: its handle has none of the readings) for the reading `q`.
nvmlReturn_t reading_device(nvmlDevice_t handle, Query q, const SimDevice** out) {
    if (nvmlReturn_t rc = state_device(handle, q, out); rc != NVML_SUCCESS) return rc;
    return (*out)->is_unit ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

unsigned gpu_temperature(const SimDevice& d) {
    return d.temperature >= 0 ? static_cast<unsigned>(d.temperature)
                              : static_cast<unsigned>(scaled(load_permille(d), 30, 80));
}

nvmlReturn_t temperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensor, unsigned* celsius) {
    const SimDevice* d = nullptr;
    if (celsius == nullptr || sensor != NVML_TEMPERATURE_GPU) return NVML_ERROR_INVALID_ARGUMENT;
    if (nvmlReturn_t rc = reading_device(device, kQueryTemperature, &d); rc != NVML_SUCCESS) return rc;
    *celsius = gpu_temperature(*d);
    return NVML_SUCCESS;
}

}  // namespace

SIM_EXPORT nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t* utilization) {
    return guarded({__func__, kFamilyUtilization, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (utilization == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = reading_device(device, kQueryUtilization, &d); rc != NVML_SUCCESS) return rc;
        if (d->mig_mode == NVML_DEVICE_MIG_ENABLE) return NVML_ERROR_NOT_SUPPORTED;  // nvml.h: not on MIG GPUs
        const unsigned gpu = d->utilization >= 0 ? static_cast<unsigned>(d->utilization)
                                                 : static_cast<unsigned>(scaled(load_permille(*d), 0, 100));
        utilization->gpu = gpu;
        utilization->memory = gpu / 2;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetTemperature(nvmlDevice_t device, nvmlTemperatureSensors_t sensorType,
                                                 unsigned int* temp) {
    return guarded({__func__, kFamilyTemperature, device},
                   [&]() -> nvmlReturn_t { return temperature(device, sensorType, temp); });
}

#ifndef FLINK_GPU_SIM_R535
// New in R565 (the R535 build, like the real drivers of that era, has only the original query).
SIM_EXPORT nvmlReturn_t nvmlDeviceGetTemperatureV(nvmlDevice_t device, nvmlTemperature_t* temperature_info) {
    return guarded({__func__, kFamilyTemperature, device}, [&]() -> nvmlReturn_t {
        if (temperature_info == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (temperature_info->version != nvmlTemperature_v1) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        const SimDevice* d = nullptr;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        if (nvmlReturn_t rc = query_allowed(*d, kQueryTemperatureV); rc != NVML_SUCCESS) return rc;
        unsigned celsius = 0;
        if (nvmlReturn_t rc = temperature(device, temperature_info->sensorType, &celsius); rc != NVML_SUCCESS)
            return rc;
        temperature_info->temperature = static_cast<int>(celsius);
        return NVML_SUCCESS;
    });
}
#endif

SIM_EXPORT nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t device, unsigned int* power) {
    return guarded({__func__, kFamilyPower, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (power == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = reading_device(device, kQueryPower, &d); rc != NVML_SUCCESS) return rc;
        *power = d->power_mw >= 0 ? static_cast<unsigned>(d->power_mw)
                                  : static_cast<unsigned>(scaled(load_permille(*d), 50000, 700000));
        return NVML_SUCCESS;
    });
}
