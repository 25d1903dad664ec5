#include "driver_model.hpp"

#include <pthread.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace flinkgpu_sim {

namespace {

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

void after_fork_in_child();

DriverModel& driver_model() {
    // never destroyed: a thread of the process (a metrics sampler) may still call during exit()
    static DriverModel& m = *new DriverModel;
    static const int fork_handler = pthread_atfork(nullptr, nullptr, after_fork_in_child);
    (void)fork_handler;
    return m;
}

// A forked child has only the thread that forked, which was in no call: a driver lock held by another
// thread of the parent (in its latency, or hung) would never be released there, and the child's own
// calls (the loader initialises NVML again in a child) would wait for ever. The child starts unlocked.
void after_fork_in_child() { new (&driver_model().driver_lock) std::mutex; }

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

void write_counters_file_at_exit() { write_counters_file(); }

// The counters' name for the call's device ("host", "<gpu>", "<gpu>:<slot>") and its GPU (-1: none).
void locate(const Call& call, std::string* key, long long* gpu) {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    *gpu = call.index;
    *key = call.index >= 0 ? std::to_string(call.index) : "host";
    if (call.handle == nullptr) return;
    const auto* d = reinterpret_cast<const SimDevice*>(call.handle);
    auto within = [d](const std::vector<SimDevice>& v) {
        return !v.empty() && d >= v.data() && d < v.data() + v.size();
    };
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

}  // namespace

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

void use_driver_config(DriverConfig config) {
    DriverModel& m = driver_model();
    std::lock_guard<std::mutex> lock(m.mutex);
    if (m.handle_opened.size() < config.first_handle_ns.size()) m.handle_opened.resize(config.first_handle_ns.size());
    m.lock_enabled = config.lock;
    m.config = std::move(config);
}

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

void start_counting() {
    DriverModel& m = driver_model();
    unsigned long long unset = 0;
    m.epoch_ns.compare_exchange_strong(unset, monotonic_ns());
    std::lock_guard<std::mutex> lock(m.mutex);
    if (!m.exit_hook) m.exit_hook = std::atexit(write_counters_file_at_exit) == 0;
}

DriverCall::DriverCall(const Call& call) : call_(call) {
    DriverModel& m = driver_model();
    if (m.lock_enabled) {
        lock_ = std::unique_lock<std::mutex>(m.driver_lock);
        locked_at_ns_ = monotonic_ns();
    }
    locate(call, &key_, &gpu_);
    std::lock_guard<std::mutex> guard(m.mutex);
    ++m.calls[call.function][key_];
}

DriverCall::~DriverCall() {
    if (!lock_.owns_lock()) return;
    // the time since the counters' start: not before nvmlInit started them or before a reset
    DriverModel& m = driver_model();
    const unsigned long long epoch = m.epoch_ns;
    const unsigned long long since = std::max(locked_at_ns_, epoch), now = monotonic_ns();
    if (epoch != 0 && now > since) m.held_ns += now - since;
}

void DriverCall::delay() {
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
            if (rule.family == call_.family && (rule.device < 0 || rule.device == gpu_))
                hang_paths.push_back(rule.path);
    }
    for (const std::string& path : hang_paths)
        while (access(path.c_str(), F_OK) == 0) sleep_ns(1000000);
    if (ns > 0) sleep_ns(ns);
}

}  // namespace flinkgpu_sim

using namespace flinkgpu_sim;

// The counters for tests and benchmarks (flink_gpu.simulator.counters): the JSON text into `json` when
// `length` holds it; returns the length it needs, its NUL included (0: none could be made).
SIM_EXPORT unsigned flinkgpuSimCounters(char* json, unsigned length) {
    return no_exceptions([&]() -> unsigned {
        const std::string text = counters_json();
        if (json != nullptr && text.size() < length) std::memcpy(json, text.c_str(), text.size() + 1);
        return static_cast<unsigned>(text.size() + 1);
    }, 0u, 0u);
}

SIM_EXPORT void flinkgpuSimResetCounters(void) {
    no_exceptions([]() -> int {
        reset_counters();
        return 0;
    }, 0, 0);
}
