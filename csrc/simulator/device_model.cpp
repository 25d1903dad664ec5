#include "device_model.hpp"

#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

namespace flinkgpu_sim {

SimState& state() {
    static SimState& s = *new SimState;  // never destroyed, as the driver model (driver_model.cpp)
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
    // every GPU on a PCIe switch of its own under one host bridge: PHB between any two
    d.switches = {"GPU " + std::to_string(i) + "'s switch"};
    d.host_bridge = kDefaultHostBridge;
    return d;
}

namespace {
thread_local std::string* t_complaints = nullptr;
}  // namespace

void complain(const std::string& what) {
    if (t_complaints != nullptr) {
        *t_complaints = what;  // the first error ends a check: it is the one to say
        return;
    }
    std::fprintf(stderr, "flink-gpu NVML simulator: %s\n", what.c_str());
}

ComplaintCapture::ComplaintCapture(std::string* into) : previous_(t_complaints) { t_complaints = into; }
ComplaintCapture::~ComplaintCapture() { t_complaints = previous_; }

unsigned long long monotonic_ms() {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<unsigned long long>(now.tv_sec) * 1000ULL +
           static_cast<unsigned long long>(now.tv_nsec) / 1000000ULL;
}

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

nvmlReturn_t state_error_now(const SimDevice& d) {
    if (d.state_error == NVML_SUCCESS) return NVML_SUCCESS;
    if (!d.state_error_when_exists.empty() && access(d.state_error_when_exists.c_str(), F_OK) != 0) return NVML_SUCCESS;
    return d.state_error;
}

nvmlReturn_t state_device(nvmlDevice_t handle, Query q, const SimDevice** out) {
    if (nvmlReturn_t rc = device_for(handle, out); rc != NVML_SUCCESS) return rc;
    if (nvmlReturn_t rc = state_error_now(**out); rc != NVML_SUCCESS) return rc;
    return query_allowed(**out, q);
}

}  // namespace flinkgpu_sim
