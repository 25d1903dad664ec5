// A simulated libnvidia-ml.so.1: the real NVML ABI (built against NVIDIA's nvml.h) over devices
// described by the environment, so that the native path, the CLI and users' CI run without a GPU.
//
//   FLINK_GPU_SIM_DEVICES=N       N identical simulated GPUs (default 4)
//   FLINK_GPU_SIM_SPEC=FILE       JSON: {"init_error": 0, "driver_version": "...", "devices": [
//                                   {"uuid", "name", "memory_total", "pci_bus_id", "minor_number",
//                                    "fault": null | "NO_PERMISSION" | "GPU_IS_LOST"}]}
//   FLINK_GPU_SIM_INIT_ERROR=CODE nvmlInit returns this NVML error code
// The configuration is read when NVML is initialised (reference count going from 0 to 1).
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>
#include <string>
#include <vector>

#include "json.hpp"

#define SIM_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

enum class Fault { kNone, kNoPermission, kGpuIsLost };

struct SimDevice {
    unsigned index = 0;
    std::string uuid, name, pci_bus_id;
    unsigned long long memory_total = 80ULL << 30;
    unsigned minor_number = 0;
    Fault fault = Fault::kNone;
};

struct SimState {
    std::mutex mutex;
    int refcount = 0;
    std::string driver_version = "999.99.99";
    std::vector<SimDevice> devices;
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

// Loads the configuration; returns an NVML error code for nvmlInit.
nvmlReturn_t configure(SimState& s) {
    s.devices.clear();
    s.driver_version = "999.99.99";
    nvmlReturn_t init_error = NVML_SUCCESS;
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
        if (!read_string(root, "driver_version", spec_path, "", &s.driver_version)) return NVML_ERROR_UNKNOWN;
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
    } else {
        unsigned long long count = 4;
        const char* text = std::getenv("FLINK_GPU_SIM_DEVICES");
        if (text != nullptr && *text != '\0' && !parse_unsigned(text, 4096, &count)) {
            complain(std::string("FLINK_GPU_SIM_DEVICES=") + text + " is not a device count (0..4096)");
            return NVML_ERROR_UNKNOWN;
        }
        for (unsigned i = 0; i < count; ++i) s.devices.push_back(default_device(i));
    }
    if (const char* text = std::getenv("FLINK_GPU_SIM_INIT_ERROR"); text != nullptr && *text != '\0') {
        unsigned long long code = 0;
        if (!parse_unsigned(text, 999, &code)) {
            complain(std::string("FLINK_GPU_SIM_INIT_ERROR=") + text + " is not an NVML error code");
            return NVML_ERROR_UNKNOWN;
        }
        init_error = static_cast<nvmlReturn_t>(code);
    }
    return init_error;
}

nvmlReturn_t init() {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    if (s.refcount == 0) {
        const nvmlReturn_t rc = configure(s);
        if (rc != NVML_SUCCESS) return rc;
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
    if (d == nullptr || s.devices.empty() || d < s.devices.data() || d >= s.devices.data() + s.devices.size())
        return NVML_ERROR_INVALID_ARGUMENT;
    if (d->fault == Fault::kGpuIsLost) return NVML_ERROR_GPU_IS_LOST;
    *out = d;
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

// No C++ exception may cross the C ABI of a libnvidia-ml: every export runs through this.
template <typename Fn>
nvmlReturn_t guarded(Fn&& fn) noexcept {
    try {
        return fn();
    } catch (const std::bad_alloc&) {
        return NVML_ERROR_MEMORY;
    } catch (...) {
        return NVML_ERROR_UNKNOWN;
    }
}

}  // namespace

SIM_EXPORT nvmlReturn_t nvmlInit_v2(void) { return guarded([&]() -> nvmlReturn_t { return init(); }); }
SIM_EXPORT nvmlReturn_t nvmlInit(void) { return guarded([&]() -> nvmlReturn_t { return init(); }); }
SIM_EXPORT nvmlReturn_t nvmlInitWithFlags(unsigned int) { return guarded([&]() -> nvmlReturn_t { return init(); }); }

SIM_EXPORT nvmlReturn_t nvmlShutdown(void) {
    return guarded([&]() -> nvmlReturn_t {
        SimState& s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
        --s.refcount;
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
    return guarded([&]() -> nvmlReturn_t {
        SimState& s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
        return copy_string(s.driver_version, version, length);
    });
}

SIM_EXPORT nvmlReturn_t nvmlSystemGetNVMLVersion(char* version, unsigned int length) {
    return guarded([&]() -> nvmlReturn_t {
        return copy_string("13.0.0-simulated", version, length);
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
    return guarded([&]() -> nvmlReturn_t {
        SimState& s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
        if (count == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        *count = static_cast<unsigned>(s.devices.size());
        return NVML_SUCCESS;
    });
}
SIM_EXPORT nvmlReturn_t nvmlDeviceGetCount(unsigned int* count) { return guarded([&]() -> nvmlReturn_t { return nvmlDeviceGetCount_v2(count); }); }

SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
    return guarded([&]() -> nvmlReturn_t {
        SimState& s = state();
        std::lock_guard<std::mutex> lock(s.mutex);
        if (s.refcount == 0) return NVML_ERROR_UNINITIALIZED;
        if (device == nullptr || index >= s.devices.size()) return NVML_ERROR_INVALID_ARGUMENT;
        if (s.devices[index].fault == Fault::kNoPermission) return NVML_ERROR_NO_PERMISSION;
        *device = reinterpret_cast<nvmlDevice_t>(&s.devices[index]);
        return NVML_SUCCESS;
    });
}
SIM_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t* device) {
    return guarded([&]() -> nvmlReturn_t {
        return nvmlDeviceGetHandleByIndex_v2(index, device);
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int* index) {
    return guarded([&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (index == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        *index = d->index;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char* uuid, unsigned int length) {
    return guarded([&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        return copy_string(d->uuid, uuid, length);
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char* name, unsigned int length) {
    return guarded([&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        return copy_string(d->name, name, length);
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t* pci) { return guarded([&]() -> nvmlReturn_t { return fill_pci(device, pci); }); }
SIM_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t* pci) { return guarded([&]() -> nvmlReturn_t { return fill_pci(device, pci); }); }

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t* memory) {
    return guarded([&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (memory == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        memory->total = d->memory_total;
        memory->free = d->memory_total;
        memory->used = 0;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int* minor) {
    return guarded([&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        if (minor == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = device_for(device, &d); rc != NVML_SUCCESS) return rc;
        *minor = d->minor_number;
        return NVML_SUCCESS;
    });
}
