// A GPU's live readings, one metric at a time, for gauges (docs/design.md §9.3): utilization, memory
// in use, temperature and power as integers, -1 where NVML cannot say. A reading is one NVML query
// on handles resolved once (find_metric_device), never an enumeration.
#pragma once

#include "nvml/loader.hpp"

#include <string_view>

namespace flinkgpu {

enum class Metric : int { kUtilization, kMemoryUsed, kTemperature, kPower, kCount };
inline constexpr int kMetricCount = static_cast<int>(Metric::kCount);

// "utilization" (%), "memory.used" (MiB), "temperature" (°C), "power" (W).
const char* metric_name(Metric metric) noexcept;
// The metric called `name`; false when no metric is.
bool parse_metric(std::string_view name, Metric* out) noexcept;

// The handles one device's readings come from.
struct MetricDevice {
    nvmlDevice_t handle = nullptr;  // the GPU's, or the MIG unit's
    nvmlDevice_t gpu = nullptr;     // the physical GPU: the same handle, or the unit's parent
    bool mig_unit = false;
};

// The device of `index` as GPUInfo carries it ("<i>", or "<i>:<slot>" for a MIG unit; canonical
// decimal numbers); false when the library has no such device or refuses its handle. Never throws.
bool find_metric_device(const NvmlLibrary& lib, std::string_view index, MetricDevice* out) noexcept;

// One reading of `metric` on `device`, -1 where NVML cannot say: an absent entry point,
// NOT_SUPPORTED or any other error. A MIG unit's memory is its own; its temperature and power are
// its GPU's (they belong to the physical GPU: a MIG handle answers NOT_SUPPORTED); its utilization
// is -1 (nvml.h: utilization rates are not supported on MIG-enabled GPUs). Never throws.
long long read_metric(const NvmlLibrary& lib, const MetricDevice& device, Metric metric) noexcept;
// The same reading with the NVML code of the query that answered it (NVML_SUCCESS: *out is the
// value; otherwise *out is -1 and the code says why: NOT_SUPPORTED, GPU_IS_LOST, ...;
// FUNCTION_NOT_FOUND where the driver lacks every query for it). Never throws.
int read_metric_code(const NvmlLibrary& lib, const MetricDevice& device, Metric metric, long long* out) noexcept;

// The units of the readings: whole MiB (rounded down), whole watts (rounded to nearest).
long long mib_from_bytes(unsigned long long bytes) noexcept;
long long watts_from_milliwatts(unsigned int milliwatts) noexcept;

}  // namespace flinkgpu
