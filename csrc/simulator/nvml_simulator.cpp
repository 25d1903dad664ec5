// A simulated libnvidia-ml.so.1: the real NVML ABI (built against NVIDIA's nvml.h) over devices
// described by the environment, so that the native path, the CLI and users' CI run without a GPU.
//
//   FLINK_GPU_SIM_DEVICES=N       N identical simulated GPUs (default 4)
//   FLINK_GPU_SIM_SPEC=FILE       JSON: {"init_error": 0, "driver_version": "...", "devices": [
//                                   {"uuid", "name", "memory_total", "pci_bus_id", "minor_number",
//                                    "fault": null | "NO_PERMISSION" | "GPU_IS_LOST"}]}
//                                    "memory_used", "cpu_affinity" (cpulist), "compute_mode",
//                                    "health": {"inforom_corrupted", "row_remap_failure",
//                                      "row_remap_pending", "retired_pages_pending" (booleans),
//                                      "ecc_enabled" (default true), "ecc_uncorrected" (count),
//                                      "recovery_action" (name: none, gpu_reset, node_reboot,
//                                        drain_p2p, drain_and_reset, recover_imex_domain, bus_reset,
//                                        system_reboot; or a whole number), "state_error": "GPU_IS_LOST" |
//                                      "RESET_REQUIRED" (what every state query answers),
//                                      "state_error_after_s" (whole seconds after nvmlInit before it
//                                      does: a GPU that falls off the bus mid-run; default 0),
//                                      "lost_handle_after_s" (from then on nvmlDeviceGetHandleByIndex
//                                        answers GPU_IS_LOST: a GPU gone from the bus)},
//                                    "fabric": {"state": "not_supported" | "not_started" | "in_progress" |
//                                      "completed" (default), "status" (an nvmlReturn_t, default 0),
//                                      "health_summary": "not_supported" (default) | "healthy" |
//                                      "unhealthy" | "limited_capacity", "struct": "v3" (default) | "v2"
//                                      (R550: v3 refused) | "v1" (R535: only nvmlDeviceGetGpuFabricInfo)};
//                                      without it every fabric query answers NOT_SUPPORTED (a PCIe part),
//                                    "persistence_mode": "enabled" (default) | "disabled",
//                                    "processes": [{"pid", "used_memory", "kind"}],
//                                    "utilization" (%), "temperature" (°C), "power" (W, to the
//                                      milliwatt): readings pinned instead of following the clock,
//                                    "not_supported" / "no_permission": [query names],
//                                    "mig": {"mode": "enabled" | "disabled", "pending": (a mode; default
//                                      the current one), "max_devices" (slots, default 7), "instances":
//                                      [{"slot" (required), "uuid", "memory_total", "gi", "ci", and the
//                                      state keys above: "memory_used", "processes", ...}]}}],
//                                 "process_struct": "v2" | "r535",
//                                 "unprivileged": true (not root: a MIG-enabled GPU's own memory queries
//                                   answer NO_PERMISSION, as for a real unprivileged caller),
//                                 "latency_ms": {family: milliseconds (fractional; 0..3600000)}: the time
//                                   each call of the family spends in the driver (below),
//                                 "driver_lock": true (default) | false,
//                                 "hang": [{"query": family, "device": GPU index (absent: every call),
//                                   "while_exists": path}]: such a call blocks while the file exists}
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
// Two builds of this file exist. The default one is a current driver: it has the versioned
// nvmlDeviceGetRunningProcessDetailList and *_v3 process queries that fill the four-field
// nvmlProcessInfo_v2_t. Built with FLINK_GPU_SIM_R535 it is a driver of the R535 era: no
// nvmlDeviceGetRunningProcessDetailList, nvmlDeviceGetConfComputeMemSizeInfo present, and *_v3
// filling five-field entries (usedGpuCcProtectedMemory appended) through the same prototype.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <atomic>

#include <time.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "json.hpp"

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

enum class Fault { kNone, kNoPermission, kGpuIsLost };

#ifdef FLINK_GPU_SIM_R535
const char* const kProcessStruct = "r535";
#else
const char* const kProcessStruct = "v2";
#endif

// The names of the state queries, as "not_supported" and "no_permission" list them.
enum Query : unsigned {
    kQueryInforom, kQueryRemappedRows, kQueryEccMode, kQueryEccErrors, kQueryFieldValues, kQueryRetiredPages,
    kQueryMemory, kQueryMemoryV2, kQueryComputeMode, kQueryCpuAffinity, kQueryComputeProcesses,
    kQueryGraphicsProcesses, kQueryMpsProcesses, kQueryProcessDetailList, kQueryUtilization, kQueryTemperature,
    kQueryPower, kQueryTemperatureV, kQueryFabric, kQueryPersistenceMode, kQueryCount
};
const char* const kQueryNames[kQueryCount] = {
    "inforom", "remapped_rows", "ecc_mode", "ecc_errors", "field_values", "retired_pages", "memory",
    "memory_v2", "compute_mode", "cpu_affinity", "compute_processes", "graphics_processes", "mps_processes",
    "process_detail_list", "utilization", "temperature", "power",
    "temperature_v",  // nvmlDeviceGetTemperatureV alone (a driver exporting it but refusing it)
    "fabric",         // nvmlDeviceGetGpuFabricInfoV and nvmlDeviceGetGpuFabricInfo
    "persistence_mode",
};

struct SimProcess {
    unsigned pid = 0;
    unsigned long long used_memory = static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE);
    unsigned mode = NVML_PROCESS_MODE_COMPUTE;
};

struct SimDevice {
    unsigned index = 0;
    std::string uuid, name, pci_bus_id;
    unsigned long long memory_total = 80ULL << 30;
    unsigned long long memory_used = 0;
    unsigned minor_number = 0;
    Fault fault = Fault::kNone;
    std::vector<unsigned long> cpu_affinity;  // bitmask; empty: NOT_SUPPORTED
    nvmlComputeMode_t compute_mode = NVML_COMPUTEMODE_DEFAULT;
    bool inforom_corrupted = false, remap_failure = false, remap_pending = false, pages_pending = false;
    bool ecc_enabled = true;
    unsigned long long ecc_uncorrected = 0;
    unsigned recovery_action = NVML_GPU_RECOVERY_ACTION_NONE;
    nvmlReturn_t state_error = NVML_SUCCESS;
    unsigned long long state_error_after_ms = 0;  // since nvmlInit
    // From then on its handle is refused with GPU_IS_LOST (a GPU gone from the bus); 0: never.
    unsigned long long lost_handle_after_ms = 0;
    // NVLink fabric (NVSwitch systems): nvmlGpuFabricInfo_v3 fields, and which struct the driver has:
    // 3 (v3 and v2), 2 (v2 only: R550), 1 (nvmlDeviceGetGpuFabricInfo only: R535). No "fabric": a PCIe
    // part, every fabric query NOT_SUPPORTED.
    bool has_fabric = false;
    unsigned char fabric_state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
    nvmlReturn_t fabric_status = NVML_SUCCESS;
    unsigned char fabric_health_summary = NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED;
    unsigned fabric_struct = 3;
    std::vector<SimProcess> processes;
    // Readings pinned by the spec; -1: they follow the load curve.
    int utilization = -1, temperature = -1;
    long long power_mw = -1;
    unsigned not_supported = 0, no_permission = 0;  // bit per Query
    // MIG: a GPU with a "mig" spec has a mode; slot_units[slot] is its unit in SimState::units or -1.
    bool mig_capable = false;
    unsigned mig_mode = NVML_DEVICE_MIG_DISABLE, mig_pending = NVML_DEVICE_MIG_DISABLE;
    std::vector<int> slot_units;
    // A MIG unit (a handle from nvmlDeviceGetMigDeviceHandleByIndex): its GPU, GPU and compute instance.
    bool is_unit = false;
    unsigned gi = 0, ci = 0, slot = 0;
    bool persistence_mode = true;  // NVML_FEATURE_ENABLED
};

struct SimState {
    std::mutex mutex;
    int refcount = 0;
    std::atomic<unsigned long long> init_ms{0};  // CLOCK_MONOTONIC at the first nvmlInit
    std::string driver_version = "999.99.99";
    std::vector<SimDevice> devices;
    std::vector<SimDevice> units;  // the MIG units of every GPU
    bool unprivileged = false;
};

SimState& state() {
    static SimState s;
    return s;
}

SimDevice default_device(unsigned i) {
    SimDevice d;
    d.index = i;
    char buf[64];
    std::snprintf(buf, sizeof buf, "GPU-00000000-0000-4000-8000-%012x", i);
    d.uuid = buf;
    d.name = "NVIDIA Simulated GPU";
    std::snprintf(buf, sizeof buf, "00000000:%02X:00.0", (i + 1) & 0xFF);
    d.pci_bus_id = buf;
    d.minor_number = i;
    return d;
}

void complain(const std::string& what) {
    std::fprintf(stderr, "flink-gpu NVML simulator: %s\n", what.c_str());
}

bool parse_unsigned(const char* text, unsigned long long max, unsigned long long* out) {
    if (text == nullptr || *text == '\0') return false;
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v > max || text[0] == '-') return false;
    *out = v;
    return true;
}

// A JSON number that is a whole number in [0, limit). Converting anything else (negative, fractional,
// huge, infinite) to an unsigned integer type is undefined behaviour, so it is a configuration error.
bool whole_number(const simjson::Value& v, double limit, unsigned long long* out) {
    if (!(v.number >= 0.0) || !(v.number < limit) || v.number != static_cast<double>(static_cast<unsigned long long>(v.number)))
        return false;
    *out = static_cast<unsigned long long>(v.number);
    return true;
}

// A key of a spec object that is given (null counts as absent, as in flink_gpu.simulator).
const simjson::Value* present(const simjson::Value& object, const char* key) {
    const simjson::Value* v = object.get(key);
    return v != nullptr && v->type != simjson::Value::Type::kNull ? v : nullptr;
}

// A string value of a spec object into *out; a value of another type is a configuration error
// naming the key (`where` is the object's path, e.g. "devices[0].").
bool read_string(const simjson::Value& object, const char* key, const char* spec_path,
                 const std::string& where, std::string* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    if (!v->is_string()) {
        complain(std::string(spec_path) + ": " + where + key + " must be a string");
        return false;
    }
    *out = v->string;
    return true;
}


bool read_bool(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
               bool* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    if (v->type != simjson::Value::Type::kBool) {
        complain(std::string(spec_path) + ": " + where + key + " must be true or false");
        return false;
    }
    *out = v->boolean;
    return true;
}

bool read_number(const simjson::Value& object, const char* key, double limit, const char* spec_path,
                 const std::string& where, unsigned long long* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    if (!v->is_number() || !whole_number(*v, limit, out)) {
        complain(std::string(spec_path) + ": " + where + key + " must be a whole number (0.." +
                 (limit > 1e19 ? std::string("2^64-1") : std::to_string(static_cast<unsigned long long>(limit) - 1)) + ")");
        return false;
    }
    return true;
}

// One of `names` (index into it), for the spec key `key`.
bool read_choice(const simjson::Value& object, const char* key, const char* const* names, unsigned count,
                 const char* spec_path, const std::string& where, unsigned* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    for (unsigned i = 0; v->is_string() && i < count; ++i) {
        if (names[i] != nullptr && v->string == names[i]) {
            *out = i;
            return true;
        }
    }
    std::string allowed;
    for (unsigned i = 0; i < count; ++i) {
        if (names[i] == nullptr) continue;
        if (!allowed.empty()) allowed += ", ";
        allowed += names[i];
    }
    complain(std::string(spec_path) + ": " + where + key + " must be one of " + allowed);
    return false;
}

// A Linux cpulist ("0-3,8") into a bitmask; false when it is not one.
bool parse_cpulist(const std::string& text, std::vector<unsigned long>* mask) {
    constexpr unsigned kBits = sizeof(unsigned long) * 8;
    mask->clear();
    const char* p = text.c_str();
    if (*p == '\0') return false;
    while (*p != '\0') {
        char* end = nullptr;
        if (*p < '0' || *p > '9') return false;
        unsigned long first = std::strtoul(p, &end, 10), last = first;
        p = end;
        if (*p == '-') {
            ++p;
            if (*p < '0' || *p > '9') return false;
            last = std::strtoul(p, &end, 10);
            p = end;
        }
        if (last < first || last >= 4096) return false;
        if (mask->size() <= last / kBits) mask->resize(last / kBits + 1, 0);
        for (unsigned long c = first; c <= last; ++c) (*mask)[c / kBits] |= 1UL << (c % kBits);
        if (*p == ',') {
            ++p;
            if (*p == '\0') return false;
        } else if (*p != '\0') {
            return false;
        }
    }
    return true;
}

// A list of query names into a bitmask.
bool read_queries(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
                  unsigned* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    bool ok = v->is_array();
    for (size_t i = 0; ok && i < v->array.size(); ++i) {
        const simjson::Value& item = v->array[i];
        bool known = false;
        for (unsigned q = 0; item.is_string() && q < kQueryCount; ++q) {
            if (item.string == kQueryNames[q]) {
                *out |= 1u << q;
                known = true;
            }
        }
        if (item.is_string() && item.string == "processes") {
            *out |= (1u << kQueryComputeProcesses) | (1u << kQueryGraphicsProcesses) | (1u << kQueryMpsProcesses);
            known = true;
        }
        ok = known;
    }
    if (!ok) {
        std::string names;
        for (unsigned q = 0; q < kQueryCount; ++q) names += std::string(kQueryNames[q]) + ", ";
        complain(std::string(spec_path) + ": " + where + key + " must be a list of query names: " + names + "processes");
    }
    return ok;
}

// NVML_GPU_RECOVERY_ACTION_* by value; a whole number stands for any other (one a newer driver may have)
const char* const kRecoveryActions[] = {"none",    "gpu_reset", "node_reboot", "drain_p2p", "drain_and_reset",
                                        "recover_imex_domain", "bus_reset", "system_reboot"};
const char* const kFabricStates[] = {"not_supported", "not_started", "in_progress", "completed"};
const char* const kFabricSummaries[] = {"not_supported", "healthy", "unhealthy", "limited_capacity"};
const char* const kFabricStructs[] = {nullptr, "v1", "v2", "v3"};
const char* const kComputeModes[] = {"default", "exclusive_thread", "prohibited", "exclusive_process"};
const char* const kProcessKinds[] = {"compute", "graphics", "mps"};
const char* const kStateErrors[] = {"GPU_IS_LOST", "RESET_REQUIRED"};
const char* const kProcessStructs[] = {"v2", "r535"};

// The state keys of devices[i] (see the header comment).
bool read_state(const simjson::Value& item, const char* spec_path, const std::string& where, SimDevice* d) {
    unsigned long long number = 0;
    number = d->memory_used;
    if (!read_number(item, "memory_used", 18446744073709551616.0, spec_path, where, &number)) return false;
    d->memory_used = number;
    if (d->memory_used > d->memory_total) {
        complain(std::string(spec_path) + ": " + where + "memory_used must not exceed memory_total");
        return false;
    }
    std::string cpus;
    if (!read_string(item, "cpu_affinity", spec_path, where, &cpus)) return false;
    if (!cpus.empty() && !parse_cpulist(cpus, &d->cpu_affinity)) {
        complain(std::string(spec_path) + ": " + where + "cpu_affinity must be a Linux cpulist of CPUs 0..4095 "
                 "such as \"0-15,32-47\", not \"" + cpus + "\"");
        return false;
    }
    unsigned choice = d->compute_mode;
    if (!read_choice(item, "compute_mode", kComputeModes, 4, spec_path, where, &choice)) return false;
    d->compute_mode = static_cast<nvmlComputeMode_t>(choice);
    if (!read_queries(item, "not_supported", spec_path, where, &d->not_supported) ||
        !read_queries(item, "no_permission", spec_path, where, &d->no_permission))
        return false;
    if (const simjson::Value* h = present(item, "health")) {
        if (!h->is_object()) {
            complain(std::string(spec_path) + ": " + where + "health must be an object");
            return false;
        }
        const std::string hw = where + "health.";
        if (!read_bool(*h, "inforom_corrupted", spec_path, hw, &d->inforom_corrupted) ||
            !read_bool(*h, "row_remap_failure", spec_path, hw, &d->remap_failure) ||
            !read_bool(*h, "row_remap_pending", spec_path, hw, &d->remap_pending) ||
            !read_bool(*h, "retired_pages_pending", spec_path, hw, &d->pages_pending) ||
            !read_bool(*h, "ecc_enabled", spec_path, hw, &d->ecc_enabled) ||
            !read_number(*h, "ecc_uncorrected", 18446744073709551616.0, spec_path, hw, &d->ecc_uncorrected))
            return false;
        choice = d->recovery_action;
        if (const simjson::Value* v = present(*h, "recovery_action"); v != nullptr && v->is_number()) {
            unsigned long long action = 0;
            if (!read_number(*h, "recovery_action", 4294967296.0, spec_path, hw, &action)) return false;
            choice = static_cast<unsigned>(action);
        } else if (!read_choice(*h, "recovery_action", kRecoveryActions, 8, spec_path, hw, &choice)) {
            return false;
        }
        d->recovery_action = choice;
        choice = 2;
        if (!read_choice(*h, "state_error", kStateErrors, 2, spec_path, hw, &choice)) return false;
        if (choice == 0) d->state_error = NVML_ERROR_GPU_IS_LOST;
        if (choice == 1) d->state_error = NVML_ERROR_RESET_REQUIRED;
        unsigned long long after_s = 0;
        if (!read_number(*h, "state_error_after_s", 1e9, spec_path, hw, &after_s)) return false;
        d->state_error_after_ms = after_s * 1000ULL;
        after_s = 0;
        if (!read_number(*h, "lost_handle_after_s", 1e9, spec_path, hw, &after_s)) return false;
        d->lost_handle_after_ms = after_s * 1000ULL;
    }
    if (const simjson::Value* f = present(item, "fabric")) {
        if (!f->is_object()) {
            complain(std::string(spec_path) + ": " + where + "fabric must be an object");
            return false;
        }
        const std::string fw = where + "fabric.";
        d->has_fabric = true;
        unsigned value = NVML_GPU_FABRIC_STATE_COMPLETED;
        if (!read_choice(*f, "state", kFabricStates, 4, spec_path, fw, &value)) return false;
        d->fabric_state = static_cast<unsigned char>(value);
        unsigned long long status = 0;
        if (!read_number(*f, "status", 1000.0, spec_path, fw, &status)) return false;  // an nvmlReturn_t
        d->fabric_status = static_cast<nvmlReturn_t>(status);
        value = NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED;
        if (!read_choice(*f, "health_summary", kFabricSummaries, 4, spec_path, fw, &value)) return false;
        d->fabric_health_summary = static_cast<unsigned char>(value);
        value = 3;
        if (!read_choice(*f, "struct", kFabricStructs, 4, spec_path, fw, &value)) return false;
        d->fabric_struct = value;
    }
    if (const simjson::Value* list = present(item, "processes")) {
        if (!list->is_array()) {
            complain(std::string(spec_path) + ": " + where + "processes must be a list");
            return false;
        }
        for (size_t i = 0; i < list->array.size(); ++i) {
            const simjson::Value& p = list->array[i];
            const std::string pw = where + "processes[" + std::to_string(i) + "].";
            if (!p.is_object()) {
                complain(std::string(spec_path) + ": " + pw.substr(0, pw.size() - 1) + " must be an object");
                return false;
            }
            SimProcess sp;
            unsigned long long pid = 0;
            if (present(p, "pid") == nullptr) {
                complain(std::string(spec_path) + ": " + pw + "pid is required");
                return false;
            }
            if (!read_number(p, "pid", 4294967296.0, spec_path, pw, &pid)) return false;
            sp.pid = static_cast<unsigned>(pid);
            if (!read_number(p, "used_memory", 18446744073709551615.0, spec_path, pw, &sp.used_memory)) return false;
            unsigned kind = 0;
            if (!read_choice(p, "kind", kProcessKinds, 3, spec_path, pw, &kind)) return false;
            sp.mode = kind;
            d->processes.push_back(sp);
        }
    }
    return true;
}

// devices[i].utilization, temperature and power: readings pinned instead of following the clock.
bool read_readings(const simjson::Value& item, const char* spec_path, const std::string& where, SimDevice* d) {
    unsigned long long number = 0;
    if (present(item, "utilization") != nullptr) {
        if (!read_number(item, "utilization", 101.0, spec_path, where, &number)) return false;
        d->utilization = static_cast<int>(number);
    }
    if (present(item, "temperature") != nullptr) {
        if (!read_number(item, "temperature", 201.0, spec_path, where, &number)) return false;
        d->temperature = static_cast<int>(number);
    }
    if (const simjson::Value* v = present(item, "power")) {
        // NVML answers milliwatts in an unsigned int: watts to the milliwatt, rounded to nearest.
        if (!v->is_number() || !(v->number >= 0.0) || !(v->number * 1000.0 + 0.5 < 4294967296.0)) {
            complain(std::string(spec_path) + ": " + where + "power must be a number of watts (0..4294967.295)");
            return false;
        }
        d->power_mw = static_cast<long long>(v->number * 1000.0 + 0.5);
    }
    return true;
}

const char* const kMigModes[] = {"disabled", "enabled"};  // NVML_DEVICE_MIG_DISABLE, _ENABLE
const char* const kPersistenceModes[] = {"disabled", "enabled"};

// devices[i].mig: the GPU's mode and its instances, appended to `units`.
bool read_mig(const simjson::Value& item, const char* spec_path, const std::string& where, SimDevice* d,
              std::vector<SimDevice>* units) {
    const simjson::Value* m = present(item, "mig");
    if (m == nullptr) return true;
    const std::string mw = where + "mig.";
    if (!m->is_object()) {
        complain(std::string(spec_path) + ": " + where + "mig must be an object");
        return false;
    }
    d->mig_capable = true;
    unsigned mode = NVML_DEVICE_MIG_DISABLE;
    if (!read_choice(*m, "mode", kMigModes, 2, spec_path, mw, &mode)) return false;
    unsigned pending = mode;
    if (!read_choice(*m, "pending", kMigModes, 2, spec_path, mw, &pending)) return false;
    d->mig_mode = mode;
    d->mig_pending = pending;
    unsigned long long max = 7;
    if (!read_number(*m, "max_devices", 65.0, spec_path, mw, &max)) return false;
    d->slot_units.assign(max, -1);
    const simjson::Value* list = present(*m, "instances");
    if (list == nullptr) return true;
    if (!list->is_array()) {
        complain(std::string(spec_path) + ": " + mw + "instances must be a list");
        return false;
    }
    if (mode != NVML_DEVICE_MIG_ENABLE && !list->array.empty()) {
        complain(std::string(spec_path) + ": " + mw + "instances need \"mode\": \"enabled\"");
        return false;
    }
    for (size_t j = 0; j < list->array.size(); ++j) {
        const simjson::Value& inst = list->array[j];
        const std::string iw = mw + "instances[" + std::to_string(j) + "].";
        if (!inst.is_object()) {
            complain(std::string(spec_path) + ": " + iw.substr(0, iw.size() - 1) + " must be an object");
            return false;
        }
        unsigned long long slot = 0, number = 0;
        if (present(inst, "slot") == nullptr) {
            complain(std::string(spec_path) + ": " + iw + "slot is required");
            return false;
        }
        if (!read_number(inst, "slot", static_cast<double>(max), spec_path, iw, &slot)) return false;
        if (d->slot_units[slot] != -1) {
            complain(std::string(spec_path) + ": " + iw + "slot " + std::to_string(slot) + " is given twice");
            return false;
        }
        SimDevice u;
        u.is_unit = true;
        u.index = d->index;
        u.name = d->name;
        u.pci_bus_id = d->pci_bus_id;
        u.minor_number = d->minor_number;
        u.cpu_affinity = d->cpu_affinity;
        char buf[80];
        std::snprintf(buf, sizeof buf, "MIG-00000000-0000-4000-8000-%06x%06llx", d->index, slot);
        u.uuid = buf;
        u.memory_total = d->memory_total / (max == 0 ? 1 : max);
        u.gi = u.slot = static_cast<unsigned>(slot);
        u.persistence_mode = d->persistence_mode;
        if (!read_string(inst, "uuid", spec_path, iw, &u.uuid)) return false;
        if (!read_number(inst, "memory_total", 18446744073709551616.0, spec_path, iw, &u.memory_total)) return false;
        number = u.gi;
        if (!read_number(inst, "gi", 4294967296.0, spec_path, iw, &number)) return false;
        u.gi = static_cast<unsigned>(number);
        number = 0;
        if (!read_number(inst, "ci", 4294967296.0, spec_path, iw, &number)) return false;
        u.ci = static_cast<unsigned>(number);
        if (!read_state(inst, spec_path, iw, &u)) return false;
        d->slot_units[slot] = static_cast<int>(units->size());
        units->push_back(std::move(u));
    }
    return true;
}

// ---- the driver model: per-query latency, the driver lock, hanging queries, counters -------------

// The query families of "latency_ms" and "hang": every export belongs to one.
enum Family : unsigned {
    kFamilyInit, kFamilyStatic, kFamilyHandle, kFamilyProcesses, kFamilyPower, kFamilyMemory, kFamilyUtilization,
    kFamilyTemperature, kFamilyInforom, kFamilyRemappedRows, kFamilyEcc, kFamilyFieldValues, kFamilyFabric,
    kFamilyRetiredPages, kFamilyComputeMode, kFamilyCpuAffinity, kFamilyMig, kFamilyPersistenceMode,
    kCallFamilyCount,
    // latencies of the handle family's first call per GPU in a process (a driver initialising the GPU)
    kFamilyFirstHandle = kCallFamilyCount, kFamilyFirstHandleWithoutPersistence, kFamilyCount
};
const char* const kFamilyNames[kFamilyCount] = {
    "init", "static", "handle", "processes", "power", "memory", "utilization", "temperature", "inforom",
    "remapped_rows", "ecc", "field_values", "fabric", "retired_pages", "compute_mode", "cpu_affinity", "mig",
    "persistence_mode", "first_handle", "first_handle_without_persistence",
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

std::string family_list(unsigned count) {
    std::string names;
    for (unsigned f = 0; f < count; ++f) names += std::string(f == 0 ? "" : ", ") + kFamilyNames[f];
    return names;
}

bool family_named(const std::string& name, unsigned count, unsigned* out) {
    for (unsigned f = 0; f < count; ++f) {
        if (name == kFamilyNames[f]) {
            *out = f;
            return true;
        }
    }
    return false;
}

// "driver_lock", "latency_ms" and "hang" of the spec's top level; `persistent[i]`: GPU i's persistence mode.
bool read_driver(const simjson::Value& root, const char* spec_path, const std::vector<bool>& persistent,
                 DriverConfig* out) {
    if (!read_bool(root, "driver_lock", spec_path, "", &out->lock)) return false;
    double latency_ms[kFamilyCount] = {};
    bool given[kFamilyCount] = {};
    if (const simjson::Value* l = present(root, "latency_ms")) {
        if (!l->is_object()) {
            complain(std::string(spec_path) + ": latency_ms must be an object of query family: milliseconds");
            return false;
        }
        for (const auto& kv : l->object) {
            unsigned f = 0;
            if (!family_named(kv.first, kFamilyCount, &f)) {
                complain(std::string(spec_path) + ": latency_ms." + kv.first + " is not a query family; use " +
                         family_list(kFamilyCount));
                return false;
            }
            // at most an hour, so that nanoseconds fit and a typo does not hang a test for ever
            if (!kv.second.is_number() || !(kv.second.number >= 0.0) || !(kv.second.number <= 3600000.0)) {
                complain(std::string(spec_path) + ": latency_ms." + kv.first +
                         " must be a number of milliseconds (0..3600000)");
                return false;
            }
            latency_ms[f] = kv.second.number;
            given[f] = true;
        }
    }
    // first_handle defaults to handle, and first_handle_without_persistence to first_handle.
    if (!given[kFamilyFirstHandle]) latency_ms[kFamilyFirstHandle] = latency_ms[kFamilyHandle];
    if (!given[kFamilyFirstHandleWithoutPersistence])
        latency_ms[kFamilyFirstHandleWithoutPersistence] = latency_ms[kFamilyFirstHandle];
    for (unsigned f = 0; f < kCallFamilyCount; ++f)
        out->latency_ns[f] = static_cast<unsigned long long>(latency_ms[f] * 1e6 + 0.5);
    out->first_handle_ns.clear();
    for (bool p : persistent)
        out->first_handle_ns.push_back(static_cast<unsigned long long>(
            latency_ms[p ? kFamilyFirstHandle : kFamilyFirstHandleWithoutPersistence] * 1e6 + 0.5));
    const simjson::Value* list = present(root, "hang");
    if (list == nullptr) return true;
    if (!list->is_array()) {
        complain(std::string(spec_path) + ": hang must be a list of {\"query\", \"device\", \"while_exists\"}");
        return false;
    }
    for (size_t i = 0; i < list->array.size(); ++i) {
        const simjson::Value& item = list->array[i];
        const std::string where = "hang[" + std::to_string(i) + "].";
        if (!item.is_object()) {
            complain(std::string(spec_path) + ": " + where.substr(0, where.size() - 1) + " must be an object");
            return false;
        }
        for (const auto& kv : item.object) {
            if (kv.first != "query" && kv.first != "device" && kv.first != "while_exists") {
                complain(std::string(spec_path) + ": " + where + kv.first + " is not a key of a hang; use query, "
                         "device, while_exists");
                return false;
            }
        }
        HangRule rule;
        const simjson::Value* q = present(item, "query");
        if (q == nullptr || !q->is_string() || !family_named(q->string, kCallFamilyCount, &rule.family)) {
            complain(std::string(spec_path) + ": " + where + "query must be one of " + family_list(kCallFamilyCount));
            return false;
        }
        if (present(item, "device") != nullptr) {
            unsigned long long device = 0;
            if (!read_number(item, "device", 4096.0, spec_path, where, &device)) return false;
            rule.device = static_cast<long long>(device);
        }
        if (!read_string(item, "while_exists", spec_path, where, &rule.path)) return false;
        if (rule.path.empty()) {
            complain(std::string(spec_path) + ": " + where + "while_exists must name a file (the call blocks "
                     "while it exists)");
            return false;
        }
        out->hangs.push_back(std::move(rule));
    }
    return true;
}

unsigned long long monotonic_ns() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<unsigned long long>(now.tv_sec) * 1000000000ULL + static_cast<unsigned long long>(now.tv_nsec);
}

void sleep_ns(unsigned long long ns) {
    timespec left{static_cast<time_t>(ns / 1000000000ULL), static_cast<long>(ns % 1000000000ULL)};
    while (nanosleep(&left, &left) != 0 && errno == EINTR) {
    }
}

// What the driver model keeps for the process's life.
struct DriverModel {
    std::mutex driver_lock;                // the driver's own: held by every call when lock_enabled
    std::atomic<bool> lock_enabled{true};  // "driver_lock" of the last configuration
    std::atomic<unsigned long long> held_ns{0}, epoch_ns{0};
    std::mutex mutex;  // guards what follows
    DriverConfig config;
    std::vector<bool> handle_opened;  // per GPU: its first handle was given out in this process
    std::map<std::string, std::map<std::string, unsigned long long>> calls;  // function -> device -> count
    bool exit_hook = false;
};

DriverModel& driver_model() {
    static DriverModel m;
    return m;
}

void use_driver_config(DriverConfig config) {
    DriverModel& m = driver_model();
    std::lock_guard<std::mutex> lock(m.mutex);
    if (m.handle_opened.size() < config.first_handle_ns.size()) m.handle_opened.resize(config.first_handle_ns.size());
    m.lock_enabled = config.lock;
    m.config = std::move(config);
}

// The counters as JSON: {"elapsed_ns", "driver_lock_held_ns", "calls": {function: {device: count}}}.
std::string counters_json() {
    DriverModel& m = driver_model();
    const unsigned long long epoch = m.epoch_ns;
    std::string out = "{\"elapsed_ns\": " + std::to_string(epoch == 0 ? 0 : monotonic_ns() - epoch) +
                      ", \"driver_lock_held_ns\": " + std::to_string(m.held_ns.load()) + ", \"calls\": {";
    std::lock_guard<std::mutex> lock(m.mutex);
    const char* comma = "";
    for (const auto& function : m.calls) {
        out += comma + ("\"" + function.first) + "\": {";
        comma = ", ";
        const char* inner = "";
        for (const auto& device : function.second) {
            out += inner + ("\"" + device.first) + "\": " + std::to_string(device.second);
            inner = ", ";
        }
        out += "}";
    }
    return out + "}}";
}

void reset_counters() {
    DriverModel& m = driver_model();
    std::lock_guard<std::mutex> lock(m.mutex);
    m.calls.clear();
    m.held_ns = 0;
    m.epoch_ns = monotonic_ns();
}

// FLINK_GPU_SIM_COUNTERS_FILE: the counters for a test or benchmark that ran another process.
void write_counters_file() noexcept {
    try {
        const char* path = std::getenv("FLINK_GPU_SIM_COUNTERS_FILE");
        if (path == nullptr || *path == '\0') return;
        const std::string text = counters_json() + "\n";
        const std::string partial = std::string(path) + ".partial." + std::to_string(getpid());
        FILE* f = std::fopen(partial.c_str(), "w");
        if (f == nullptr) {
            complain(std::string("cannot write FLINK_GPU_SIM_COUNTERS_FILE=") + path + ": " + std::strerror(errno));
            return;
        }
        const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
        if (std::fclose(f) != 0 || !written || std::rename(partial.c_str(), path) != 0) {
            complain(std::string("cannot write FLINK_GPU_SIM_COUNTERS_FILE=") + path + ": " + std::strerror(errno));
            std::remove(partial.c_str());
        }
    } catch (...) {
    }
}

void write_counters_file_at_exit() { write_counters_file(); }

// The counters begin at the first nvmlInit; the file is written at exit too.
void start_counting() {
    DriverModel& m = driver_model();
    unsigned long long unset = 0;
    m.epoch_ns.compare_exchange_strong(unset, monotonic_ns());
    std::lock_guard<std::mutex> lock(m.mutex);
    if (!m.exit_hook) m.exit_hook = std::atexit(write_counters_file_at_exit) == 0;
}

// Loads the configuration; returns an NVML error code for nvmlInit.
nvmlReturn_t configure(SimState& s) {
    s.devices.clear();
    s.units.clear();
    s.unprivileged = false;
    s.driver_version = "999.99.99";
    nvmlReturn_t init_error = NVML_SUCCESS;
    DriverConfig driver;
    const char* spec_path = std::getenv("FLINK_GPU_SIM_SPEC");
    if (spec_path != nullptr && *spec_path != '\0') {
        std::string error;
        simjson::Value root;
        if (!simjson::parse_file(spec_path, &root, &error)) {
            complain(std::string("cannot use FLINK_GPU_SIM_SPEC=") + spec_path + ": " + error);
            return NVML_ERROR_UNKNOWN;
        }
        if (!root.is_object()) {
            complain(std::string(spec_path) + ": the top level must be a JSON object");
            return NVML_ERROR_UNKNOWN;
        }
        if (const auto* v = present(root, "init_error")) {
            unsigned long long code = 0;
            if (!v->is_number() || !whole_number(*v, 1000.0, &code)) {
                complain(std::string(spec_path) + ": \"init_error\" must be an NVML error code (0..999)");
                return NVML_ERROR_UNKNOWN;
            }
            init_error = static_cast<nvmlReturn_t>(code);
        }
        if (!read_string(root, "driver_version", spec_path, "", &s.driver_version) ||
            !read_bool(root, "unprivileged", spec_path, "", &s.unprivileged))
            return NVML_ERROR_UNKNOWN;
        unsigned layout = 0;
        for (unsigned i = 0; i < 2; ++i)
            if (std::strcmp(kProcessStructs[i], kProcessStruct) == 0) layout = i;
        const unsigned built = layout;
        if (!read_choice(root, "process_struct", kProcessStructs, 2, spec_path, "", &layout)) return NVML_ERROR_UNKNOWN;
        if (layout != built) {
            complain(std::string(spec_path) + ": \"process_struct\" is \"" + kProcessStructs[layout] +
                     "\" but this build of the simulator models \"" + kProcessStruct +
                     "\" (flink_gpu.simulator.library_path(process_struct) names the matching one)");
            return NVML_ERROR_UNKNOWN;
        }
        const auto* list = root.get("devices");
        if (list != nullptr && !list->is_array()) {
            complain(std::string(spec_path) + ": \"devices\" must be a list");
            return NVML_ERROR_UNKNOWN;
        }
        for (size_t i = 0; list != nullptr && i < list->array.size(); ++i) {
            const auto& item = list->array[i];
            SimDevice d = default_device(static_cast<unsigned>(i));
            if (!item.is_object()) {
                complain(std::string(spec_path) + ": devices[" + std::to_string(i) + "] must be an object");
                return NVML_ERROR_UNKNOWN;
            }
            const std::string where = "devices[" + std::to_string(i) + "].";
            if (!read_string(item, "uuid", spec_path, where, &d.uuid) ||
                !read_string(item, "name", spec_path, where, &d.name) ||
                !read_string(item, "pci_bus_id", spec_path, where, &d.pci_bus_id))
                return NVML_ERROR_UNKNOWN;
            unsigned long long number = 0;
            if (const auto* v = present(item, "memory_total")) {
                if (!v->is_number() || !whole_number(*v, 18446744073709551616.0, &number)) {
                    complain(std::string(spec_path) + ": " + where +
                             "memory_total must be a whole number of bytes (0..2^64-1)");
                    return NVML_ERROR_UNKNOWN;
                }
                d.memory_total = number;
            }
            if (const auto* v = present(item, "minor_number")) {
                if (!v->is_number() || !whole_number(*v, 4294967296.0, &number)) {
                    complain(std::string(spec_path) + ": " + where +
                             "minor_number must be a whole number (0..2^32-1)");
                    return NVML_ERROR_UNKNOWN;
                }
                d.minor_number = static_cast<unsigned>(number);
            }
            unsigned persistence = 1;
            if (!read_choice(item, "persistence_mode", kPersistenceModes, 2, spec_path, where, &persistence))
                return NVML_ERROR_UNKNOWN;
            d.persistence_mode = persistence == 1;
            if (!read_state(item, spec_path, where, &d) || !read_readings(item, spec_path, where, &d) ||
                !read_mig(item, spec_path, where, &d, &s.units))
                return NVML_ERROR_UNKNOWN;
            if (const auto* v = present(item, "fault")) {
                if (v->is_string() && v->string == "NO_PERMISSION") d.fault = Fault::kNoPermission;
                else if (v->is_string() && v->string == "GPU_IS_LOST") d.fault = Fault::kGpuIsLost;
                else {
                    complain(std::string(spec_path) + ": " + where + "fault must be \"NO_PERMISSION\" or "
                             "\"GPU_IS_LOST\" (or null), not " + (v->is_string() ? "\"" + v->string + "\"" : "that value"));
                    return NVML_ERROR_UNKNOWN;
                }
            }
            s.devices.push_back(std::move(d));
        }
        std::vector<bool> persistent;
        for (const SimDevice& d : s.devices) persistent.push_back(d.persistence_mode);
        if (!read_driver(root, spec_path, persistent, &driver)) return NVML_ERROR_UNKNOWN;
    } else {
        unsigned long long count = 4;
        const char* text = std::getenv("FLINK_GPU_SIM_DEVICES");
        if (text != nullptr && *text != '\0' && !parse_unsigned(text, 4096, &count)) {
            complain(std::string("FLINK_GPU_SIM_DEVICES=") + text + " is not a device count (0..4096)");
            return NVML_ERROR_UNKNOWN;
        }
        for (unsigned i = 0; i < count; ++i) s.devices.push_back(default_device(i));
        driver.first_handle_ns.assign(count, 0);
    }
    if (const char* text = std::getenv("FLINK_GPU_SIM_INIT_ERROR"); text != nullptr && *text != '\0') {
        unsigned long long code = 0;
        if (!parse_unsigned(text, 999, &code)) {
            complain(std::string("FLINK_GPU_SIM_INIT_ERROR=") + text + " is not an NVML error code");
            return NVML_ERROR_UNKNOWN;
        }
        init_error = static_cast<nvmlReturn_t>(code);
    }
    use_driver_config(std::move(driver));
    return init_error;
}

unsigned long long monotonic_ms() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<unsigned long long>(now.tv_sec) * 1000ULL + static_cast<unsigned long long>(now.tv_nsec) / 1000000ULL;
}

nvmlReturn_t init() {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.refcount == 0) {
        const nvmlReturn_t rc = configure(s);
        if (rc != NVML_SUCCESS) return rc;
        s.init_ms = monotonic_ms();
        start_counting();
    }
    ++s.refcount;
    return NVML_SUCCESS;
}

// Resolves a handle for a device query; devices live in a vector that only changes at init.
nvmlReturn_t device_for(nvmlDevice_t handle, const SimDevice** out) {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
    const auto* d = reinterpret_cast<const SimDevice*>(handle);
    auto within = [d](const std::vector<SimDevice>& v) {
        return !v.empty() && d >= v.data() && d < v.data() + v.size();
    };
    if (d == nullptr || !(within(s.devices) || within(s.units))) return NVML_ERROR_INVALID_ARGUMENT;
    if (d->fault == Fault::kGpuIsLost) return NVML_ERROR_GPU_IS_LOST;
    *out = d;
    return NVML_SUCCESS;
}

nvmlReturn_t query_allowed(const SimDevice& d, Query q) {
    if ((d.not_supported >> q) & 1u) return NVML_ERROR_NOT_SUPPORTED;
    if ((d.no_permission >> q) & 1u) return NVML_ERROR_NO_PERMISSION;
    // nvml.h: a GPU in MIG mode tells its memory only to a privileged caller.
    if ((q == kQueryMemory || q == kQueryMemoryV2) && !d.is_unit && d.mig_mode == NVML_DEVICE_MIG_ENABLE &&
        state().unprivileged)
        return NVML_ERROR_NO_PERMISSION;
    return NVML_SUCCESS;
}

nvmlReturn_t copy_string(const std::string& value, char* buf, unsigned length) {
    if (buf == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
    if (value.size() + 1 > length) return NVML_ERROR_INSUFFICIENT_SIZE;
    std::memcpy(buf, value.c_str(), value.size() + 1);
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

// One export's call: its name, family and the GPU it is about (a handle, or an index it was given).
struct Call {
    const char* function;
    Family family;
    nvmlDevice_t handle = nullptr;
    long long index = -1;
};

// The counters' name for the call's device ("host", "<gpu>", "<gpu>:<slot>") and its GPU (-1: none).
void locate(const Call& call, std::string* key, long long* gpu) {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    *gpu = call.index;
    *key = call.index >= 0 ? std::to_string(call.index) : "host";
    if (call.handle == nullptr) return;
    const auto* d = reinterpret_cast<const SimDevice*>(call.handle);
    auto within = [d](const std::vector<SimDevice>& v) { return !v.empty() && d >= v.data() && d < v.data() + v.size(); };
    if (within(s.devices)) {
        *gpu = d->index;
        *key = std::to_string(d->index);
    } else if (within(s.units)) {
        *gpu = d->index;
        *key = std::to_string(d->index) + ":" + std::to_string(d->slot);
    } else {
        *key = "invalid";
    }
}

// A call inside the simulated driver: counted on entry, holding the driver lock (when it is on) until
// it is destroyed; delay() models its time in the driver.
class DriverCall {
public:
    explicit DriverCall(const Call& call) : call_(call) {
        DriverModel& m = driver_model();
        if (m.lock_enabled) {
            lock_ = std::unique_lock<std::mutex>(m.driver_lock);
            locked_at_ns_ = monotonic_ns();
        }
        locate(call, &key_, &gpu_);
        std::lock_guard<std::mutex> guard(m.mutex);
        ++m.calls[call.function][key_];
    }
    DriverCall(const DriverCall&) = delete;
    DriverCall& operator=(const DriverCall&) = delete;
    ~DriverCall() {
        if (lock_.owns_lock()) driver_model().held_ns += monotonic_ns() - locked_at_ns_;
    }

    // After the call's work (so that nvmlInit applies the configuration it just read): blocks while a
    // hang rule's file exists, then sleeps the family's latency.
    void delay() {
        DriverModel& m = driver_model();
        unsigned long long ns = 0;
        std::vector<std::string> hang_paths;
        {
            std::lock_guard<std::mutex> guard(m.mutex);
            ns = m.config.latency_ns[call_.family];
            const auto gpu = static_cast<size_t>(gpu_);
            if (call_.family == kFamilyHandle && gpu_ >= 0 && gpu < m.config.first_handle_ns.size() &&
                !m.handle_opened[gpu]) {
                m.handle_opened[gpu] = true;
                ns = m.config.first_handle_ns[gpu];
            }
            for (const HangRule& rule : m.config.hangs)
                if (rule.family == call_.family && (rule.device < 0 || rule.device == gpu_)) hang_paths.push_back(rule.path);
        }
        for (const std::string& path : hang_paths)
            while (access(path.c_str(), F_OK) == 0) sleep_ns(1000000);
        if (ns > 0) sleep_ns(ns);
    }

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
    return no_exceptions(
        [&]() -> nvmlReturn_t {
            DriverCall driver(call);
            const nvmlReturn_t rc = fn();
            driver.delay();
            return rc;
        },
        NVML_ERROR_MEMORY, NVML_ERROR_UNKNOWN);
}

}  // namespace

// The counters for tests and benchmarks (flink_gpu.simulator.counters): the JSON text into `json` when
// `length` holds it; returns the length it needs, its NUL included (0: none could be made).
SIM_EXPORT unsigned flinkgpuSimCounters(char* json, unsigned length) {
    return no_exceptions(
        [&]() -> unsigned {
            const std::string text = counters_json();
            if (json != nullptr && text.size() < length) std::memcpy(json, text.c_str(), text.size() + 1);
            return static_cast<unsigned>(text.size() + 1);
        },
        0u, 0u);
}

SIM_EXPORT void flinkgpuSimResetCounters(void) {
    no_exceptions([]() -> int { reset_counters(); return 0; }, 0, 0);
}

SIM_EXPORT nvmlReturn_t nvmlInit_v2(void) { return guarded({__func__, kFamilyInit}, [&]() -> nvmlReturn_t { return init(); }); }
SIM_EXPORT nvmlReturn_t nvmlInit(void) { return guarded({__func__, kFamilyInit}, [&]() -> nvmlReturn_t { return init(); }); }
SIM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int) { return guarded({__func__, kFamilyInit}, [&]() -> nvmlReturn_t { return init(); }); }

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
    return guarded({__func__, kFamilyStatic}, [&]() -> nvmlReturn_t {
        return copy_string("13.0.0-simulated", version, length);
    });
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
    if (d.lost_handle_after_ms > 0 && monotonic_ms() >= s.init_ms + d.lost_handle_after_ms)
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
    return guarded({__func__, kFamilyHandle, nullptr, index}, [&]() -> nvmlReturn_t { return handle_by_index(index, device); });
}
SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
    return guarded({__func__, kFamilyHandle, nullptr, index}, [&]() -> nvmlReturn_t { return handle_by_index(index, device); });
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

SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) { return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t { return fill_pci(device, pci); }); }
SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) { return guarded({__func__, kFamilyStatic, device}, [&]() -> nvmlReturn_t { return fill_pci(device, pci); }); }

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    return guarded({__func__, kFamilyMemory, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        if (nvmlReturn_t rc = query_allowed(*d, kQueryMemory); rc != NVML_SUCCESS) return rc;
        memory->total = d->memory_total;
        memory->free = d->memory_total - d->memory_used;
        memory->used = d->memory_used;
        return NVML_SUCCESS;
    });
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

// ---- device state (the queries of csrc/device_state.cpp) ---------------------------------------

namespace {

// What every state query of `d` answers now: its state_error once its time has come.
nvmlReturn_t state_error_now(const SimDevice& d) {
    if (d.state_error == NVML_SUCCESS || monotonic_ms() < state().init_ms + d.state_error_after_ms) return NVML_SUCCESS;
    return d.state_error;
}

// A device for the state query `q`: its state_error, or what "not_supported"/"no_permission" say.
nvmlReturn_t state_device(nvmlDevice_t handle, Query q, const SimDevice** out) {
    if (nvmlReturn_t rc = device_for(handle, out); rc != NVML_SUCCESS) return rc;
    if (nvmlReturn_t rc = state_error_now(**out); rc != NVML_SUCCESS) return rc;
    return query_allowed(**out, q);
}

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

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t* memory) {
    return guarded({__func__, kFamilyMemory, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = state_device(device, kQueryMemoryV2, &d); rc != NVML_SUCCESS) return rc;
        if (memory->version != nvmlMemory_v2) return NVML_ERROR_ARGUMENT_VERSION_MISMATCH;
        memory->total = d->memory_total;
        memory->reserved = 0;
        memory->used = d->memory_used;
        memory->free = d->memory_total - d->memory_used;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetCpuAffinityWithinScope(nvmlDevice_t device, unsigned int cpuSetSize,
                                                            unsigned long* cpuSet, nvmlAffinityScope_t scope) {
    return guarded({__func__, kFamilyCpuAffinity, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (cpuSet == nullptr || cpuSetSize == 0 || (scope != NVML_AFFINITY_SCOPE_NODE && scope != NVML_AFFINITY_SCOPE_SOCKET))
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

SIM_EXPORT nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t* current, nvmlEnableState_t* pending) {
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
        const bool uncorrected_volatile = errorType == NVML_MEMORY_ERROR_TYPE_UNCORRECTED && counterType == NVML_VOLATILE_ECC;
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

#define SIM_PROCESS_QUERIES(NAME, MODE)                                                                          \
    SIM_EXPORT nvmlReturn_t NAME(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v1_t* infos) {        \
        return guarded({__func__, kFamilyProcesses, device}, [&]() -> nvmlReturn_t { return running_processes(device, MODE, count, infos); });        \
    }                                                                                                            \
    SIM_EXPORT nvmlReturn_t NAME##_v2(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_v2_t* infos) {   \
        return guarded({__func__, kFamilyProcesses, device}, [&]() -> nvmlReturn_t { return running_processes(device, MODE, count, infos); });        \
    }                                                                                                            \
    SIM_EXPORT nvmlReturn_t NAME##_v3(nvmlDevice_t device, unsigned int* count, nvmlProcessInfo_t* infos) {      \
        return guarded({__func__, kFamilyProcesses, device}, [&]() -> nvmlReturn_t { return running_processes_v3(device, MODE, count, infos); });     \
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

// ---- live readings (the queries of csrc/device_metrics.cpp) -------------------------------------

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
    return guarded({__func__, kFamilyTemperature, device}, [&]() -> nvmlReturn_t { return temperature(device, sensorType, temp); });
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

// ---- MIG: through MIG device handles only, as an unprivileged caller can -------------------------

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

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMigMode(nvmlDevice_t device, unsigned int* currentMode, unsigned int* pendingMode) {
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
