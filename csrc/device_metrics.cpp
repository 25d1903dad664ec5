#include "device_metrics.hpp"

#include "device_state.hpp"

#include <climits>

namespace flinkgpu {
namespace {

const char* const kMetricNames[kMetricCount] = {"utilization", "memory.used", "temperature", "power"};

// A number as GPU indices spell it: decimal digits, no leading zero (but "0"), at most UINT_MAX.
bool parse_number(std::string_view text, unsigned* out) noexcept {
    if (text.empty() || (text.size() > 1 && text[0] == '0')) return false;
    unsigned long long value = 0;
    for (const char c : text) {
        if (c < '0' || c > '9') return false;
        value = value * 10 + static_cast<unsigned>(c - '0');
        if (value > UINT_MAX) return false;
    }
    *out = static_cast<unsigned>(value);
    return true;
}

long long utilization(const NvmlApi& api, const MetricDevice& device) {
    if (device.mig_unit || api.device_get_utilization_rates == nullptr) return -1;
    nvmlUtilization_t u{};
    if (api.device_get_utilization_rates(device.handle, &u) != NVML_SUCCESS) return -1;
    return u.gpu;
}

long long memory_used(const NvmlApi& api, const MetricDevice& device) {
    MemoryReading m;
    const char* function = nullptr;
    if (read_memory(api, device.handle, &m, &function) != NVML_SUCCESS) return -1;
    return mib_from_bytes(m.used);
}

long long temperature(const NvmlApi& api, const MetricDevice& device) {
    if (api.device_get_temperature_v != nullptr) {
        nvmlTemperature_t t{};
        t.version = nvmlTemperature_v1;
        t.sensorType = NVML_TEMPERATURE_GPU;
        const nvmlReturn_t rc = api.device_get_temperature_v(device.gpu, &t);
        if (rc == NVML_SUCCESS) return t.temperature;
        // a driver that exports the call but not for this struct version or device: the original query
        if (rc != NVML_ERROR_NOT_SUPPORTED && rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH) return -1;
    }
    if (api.device_get_temperature == nullptr) return -1;
    unsigned celsius = 0;
    if (api.device_get_temperature(device.gpu, NVML_TEMPERATURE_GPU, &celsius) != NVML_SUCCESS) return -1;
    return celsius;
}

long long power(const NvmlApi& api, const MetricDevice& device) {
    if (api.device_get_power_usage == nullptr) return -1;
    unsigned milliwatts = 0;
    if (api.device_get_power_usage(device.gpu, &milliwatts) != NVML_SUCCESS) return -1;
    return watts_from_milliwatts(milliwatts);
}

}  // namespace

const char* metric_name(Metric metric) noexcept {
    const int i = static_cast<int>(metric);
    return i >= 0 && i < kMetricCount ? kMetricNames[i] : "unknown";
}

bool parse_metric(std::string_view name, Metric* out) noexcept {
    for (int i = 0; i < kMetricCount; ++i) {
        if (name == kMetricNames[i]) {
            *out = static_cast<Metric>(i);
            return true;
        }
    }
    return false;
}

bool find_metric_device(const NvmlLibrary& lib, std::string_view index, MetricDevice* out) noexcept {
    const NvmlApi& api = lib.api();
    const std::size_t colon = index.find(':');
    unsigned gpu_index = 0, slot = 0;
    if (!parse_number(index.substr(0, colon), &gpu_index)) return false;
    const bool unit = colon != std::string_view::npos;
    if (unit && !parse_number(index.substr(colon + 1), &slot)) return false;
    nvmlDevice_t gpu = nullptr;
    if (api.device_get_handle_by_index(gpu_index, &gpu) != NVML_SUCCESS || gpu == nullptr) return false;
    MetricDevice found;
    found.handle = found.gpu = gpu;
    if (unit) {
        // An empty slot, or a GPU not in MIG mode, answers NOT_FOUND or NOT_SUPPORTED.
        if (api.device_get_mig_device_handle_by_index == nullptr ||
            api.device_get_mig_device_handle_by_index(gpu, slot, &found.handle) != NVML_SUCCESS ||
            found.handle == nullptr)
            return false;
        found.mig_unit = true;
    }
    *out = found;
    return true;
}

long long read_metric(const NvmlLibrary& lib, const MetricDevice& device, Metric metric) noexcept {
    const NvmlApi& api = lib.api();
    switch (metric) {
        case Metric::kUtilization: return utilization(api, device);
        case Metric::kMemoryUsed: return memory_used(api, device);
        case Metric::kTemperature: return temperature(api, device);
        case Metric::kPower: return power(api, device);
        case Metric::kCount: break;
    }
    return -1;
}

long long mib_from_bytes(unsigned long long bytes) noexcept { return static_cast<long long>(bytes >> 20); }

long long watts_from_milliwatts(unsigned int milliwatts) noexcept {
    return static_cast<long long>((static_cast<unsigned long long>(milliwatts) + 500) / 1000);
}

}  // namespace flinkgpu
