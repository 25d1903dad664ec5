// The driver model: a simulator that behaves like a driver. Every export runs through guarded(), which
// holds one process-wide lock for the whole call ("driver_lock"), counts the call, blocks while a "hang"
// rule's file exists and spends its query family's latency ("latency_ms"); the counters are the C
// exports flinkgpuSimCounters / flinkgpuSimResetCounters and FLINK_GPU_SIM_COUNTERS_FILE.
#pragma once

#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "device_model.hpp"

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace flinkgpu_sim {

// The query families of "latency_ms" and "hang": every export belongs to one.
enum Family : unsigned {
    kFamilyInit,
    kFamilyStatic,
    kFamilyHandle,
    kFamilyProcesses,
    kFamilyPower,
    kFamilyMemory,
    kFamilyUtilization,
    kFamilyTemperature,
    kFamilyInforom,
    kFamilyRemappedRows,
    kFamilyEcc,
    kFamilyFieldValues,
    kFamilyFabric,
    kFamilyRetiredPages,
    kFamilyComputeMode,
    kFamilyCpuAffinity,
    kFamilyMig,
    kFamilyPersistenceMode,
    kFamilyTopology,  // nvmlDeviceGetTopologyCommonAncestor, nvmlDeviceGetP2PStatus
    kFamilyNvLink,    // nvmlDeviceGetNvLinkState, its remote PCI info and remote device type
    kCallFamilyCount,
    // latencies of the handle family's first call per GPU in a process (a driver initialising the GPU)
    kFamilyFirstHandle = kCallFamilyCount,
    kFamilyFirstHandleWithoutPersistence,
    kFamilyCount
};
const char* const kFamilyNames[kFamilyCount] = {
    "init",         "static",
    "handle",       "processes",
    "power",        "memory",
    "utilization",  "temperature",
    "inforom",      "remapped_rows",
    "ecc",          "field_values",
    "fabric",       "retired_pages",
    "compute_mode", "cpu_affinity",
    "mig",          "persistence_mode",
    "topology",     "nvlink",
    "first_handle", "first_handle_without_persistence",
};

// A call of `family` that blocks while `path` exists (on GPU `device`, or on every call when -1).
struct HangRule {
    unsigned family = 0;
    long long device = -1;
    std::string path;
};

struct DriverConfig {
    bool lock = true;  // "driver_lock"
    unsigned long long latency_ns[kCallFamilyCount] = {};
    std::vector<unsigned long long> first_handle_ns;  // per GPU: by its persistence mode
    std::vector<HangRule> hangs;
};

// The names of families 0..count-1, for a message.
std::string family_list(unsigned count);
// The family of that name among 0..count-1.
bool family_named(const std::string& name, unsigned count, unsigned* out);

// The configuration nvmlInit read (spec.cpp) becomes the driver's.
void use_driver_config(DriverConfig config);
// At nvmlInit: the counters' clock starts (once), and their file is written at exit.
void start_counting();
// FLINK_GPU_SIM_COUNTERS_FILE: the counters for a test or benchmark that ran another process.
void write_counters_file() noexcept;

// One export's call: its name, family and the GPU it is about (a handle, or an index it was given).
struct Call {
    const char* function;
    Family family;
    nvmlDevice_t handle = nullptr;
    long long index = -1;
};

// A call inside the simulated driver: counted on entry, holding the driver lock (when it is on) until
// it is destroyed; delay() models its time in the driver.
class DriverCall {
public:
    explicit DriverCall(const Call& call);
    DriverCall(const DriverCall&) = delete;
    DriverCall& operator=(const DriverCall&) = delete;
    ~DriverCall();

    // After the call's work (so that nvmlInit applies the configuration it just read): blocks while a
    // hang rule's file exists, then sleeps the family's latency.
    void delay();

private:
    const Call call_;
    std::unique_lock<std::mutex> lock_;
    unsigned long long locked_at_ns_ = 0;
    std::string key_;
    long long gpu_ = -1;
};

// No C++ exception may cross the C ABI of a libnvidia-ml.
template <typename Fn>
auto no_exceptions(Fn&& fn, decltype(fn()) on_memory, decltype(fn()) on_other) noexcept -> decltype(fn()) {
    try {
        return fn();
    } catch (const std::bad_alloc&) {
        return on_memory;
    } catch (...) {
        return on_other;
    }
}

// Every NVML export runs through this: the driver model around the call, and no exception out.
template <typename Fn>
nvmlReturn_t guarded(const Call& call, Fn&& fn) noexcept {
    return no_exceptions([&]() -> nvmlReturn_t {
        DriverCall driver(call);
        const nvmlReturn_t rc = fn();
        driver.delay();
        return rc;
    }, NVML_ERROR_MEMORY, NVML_ERROR_UNKNOWN);
}

}  // namespace flinkgpu_sim
