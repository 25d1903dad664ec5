#include "nvml/metrics.hpp"

#include "nvml/read.hpp"

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

// Each reading stores its value in *out and returns the NVML code of the query that answered
// (FUNCTION_NOT_FOUND where the driver lacks every query for it).
int utilization(const NvmlApi& api, const MetricDevice& device, long long* out) {
    if (device.mig_unit) return NVML_ERROR_NOT_SUPPORTED;
    if (api.device_get_utilization_rates == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
    nvmlUtilization_t u{};
    const int rc = api.device_get_utilization_rates(device.handle, &u);
    if (rc == NVML_SUCCESS) *out = u.gpu;
    return rc;
}

int memory_used(const NvmlApi& api, const MetricDevice& device, long long* out) {
    MemoryReading m;
    const char* function = nullptr;
    const int rc = read_memory(api, device.handle, &m, &function);
    if (rc == NVML_SUCCESS) *out = mib_from_bytes(m.used);
    return rc;
}

int temperature(const NvmlApi& api, const MetricDevice& device, long long* out) {
    if (api.device_get_temperature_v != nullptr) {
        nvmlTemperature_t t{};
        t.version = nvmlTemperature_v1;
        t.sensorType = NVML_TEMPERATURE_GPU;
        const int rc = api.device_get_temperature_v(device.gpu, &t);
        if (rc == NVML_SUCCESS) *out = t.temperature;
        // a driver that exports the call but not for this struct version or device: the original query
        if (rc != NVML_ERROR_NOT_SUPPORTED && rc != NVML_ERROR_ARGUMENT_VERSION_MISMATCH) return rc;
    }
    if (api.device_get_temperature == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
    unsigned celsius = 0;
    const int rc = api.device_get_temperature(device.gpu, NVML_TEMPERATURE_GPU, &celsius);
    if (rc == NVML_SUCCESS) *out = celsius;
    return rc;
}

int power(const NvmlApi& api, const MetricDevice& device, long long* out) {
    if (api.device_get_power_usage == nullptr) return NVML_ERROR_FUNCTION_NOT_FOUND;
    unsigned milliwatts = 0;
    const int rc = api.device_get_power_usage(device.gpu, &milliwatts);
    if (rc == NVML_SUCCESS) *out = watts_from_milliwatts(milliwatts);
    return rc;
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

int read_metric_code(const NvmlLibrary& lib, const MetricDevice& device, Metric metric, long long* out) noexcept {
    const NvmlApi& api = lib.api();
    *out = -1;
    switch (metric) {
        case Metric::kUtilization: return utilization(api, device, out);
        case Metric::kMemoryUsed: return memory_used(api, device, out);
        case Metric::kTemperature: return temperature(api, device, out);
        case Metric::kPower: return power(api, device, out);
        case Metric::kCount: break;
    }
    return NVML_ERROR_INVALID_ARGUMENT;
}

long long read_metric(const NvmlLibrary& lib, const MetricDevice& device, Metric metric) noexcept {
    long long value = -1;
    return read_metric_code(lib, device, metric, &value) == NVML_SUCCESS ? value : -1;
}

long long mib_from_bytes(unsigned long long bytes) noexcept { return static_cast<long long>(bytes >> 20); }

long long watts_from_milliwatts(unsigned int milliwatts) noexcept {
    return static_cast<long long>((static_cast<unsigned long long>(milliwatts) + 500) / 1000);
}

}  // namespace flinkgpu
