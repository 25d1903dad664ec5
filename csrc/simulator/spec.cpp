#include "spec.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "base/glibc_compat.hpp"  // dladdr at its manylinux_2_28 version
#include "driver_model.hpp"
#include "json.hpp"
#include "spec_values.hpp"

namespace flinkgpu_sim {

namespace {

#ifdef FLINK_GPU_SIM_R535
const char* const kProcessStruct = "r535";
#else
const char* const kProcessStruct = "v2";
#endif
// NVML_GPU_RECOVERY_ACTION_* by value; a whole number stands for any other (one a newer driver may have)
const char* const kRecoveryActions[] = {"none",      "gpu_reset",       "node_reboot",
                                        "drain_p2p", "drain_and_reset", "recover_imex_domain",
                                        "bus_reset", "system_reboot"};
const char* const kFabricStates[] = {"not_supported", "not_started", "in_progress", "completed"};
const char* const kFabricSummaries[] = {"not_supported", "healthy", "unhealthy", "limited_capacity"};
const char* const kFabricStructs[] = {nullptr, "v1", "v2", "v3"};
const char* const kComputeModes[] = {"default", "exclusive_thread", "prohibited", "exclusive_process"};
const char* const kProcessKinds[] = {"compute", "graphics", "mps"};
const char* const kStateErrors[] = {"GPU_IS_LOST", "RESET_REQUIRED"};
const char* const kProcessStructs[] = {"v2", "r535"};
// Set while flinkgpuSimCheckSpec runs: the checker library (its own soname, so that checking a spec never
// makes a process's libnvidia-ml.so.1 the simulator) checks specs for either build.
thread_local bool t_checking_any_build = false;

// What a driver guarantees about a device's processes, which the process reads of csrc/nvml/read.cpp
// rely on (kNoContextBelowBytes there): an MPS client runs in its server's context, so a device with MPS
// processes lists a compute process (the server) too; and NVML's used memory includes every process's,
// so the device's is at least their sum, a process (once, however many lists name it) counting 1 MiB at
// least, its context, also where its own use is not available.
bool account_processes(const char* spec_path, const std::string& where, SimDevice* d) {
    constexpr unsigned long long kContextBytes = 1ull << 20;
    bool mps = false, compute = false;
    std::vector<std::pair<unsigned, unsigned long long>> per_pid;  // pid, its largest use
    for (const SimProcess& p : d->processes) {
        mps = mps || p.mode == NVML_PROCESS_MODE_MPS;
        compute = compute || p.mode == NVML_PROCESS_MODE_COMPUTE;
        const unsigned long long own = p.used_memory == static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE)
                                           ? kContextBytes
                                           : std::max(p.used_memory, kContextBytes);
        const auto it = std::find_if(per_pid.begin(), per_pid.end(), [&](const auto& e) { return e.first == p.pid; });
        if (it == per_pid.end()) per_pid.emplace_back(p.pid, own);
        else it->second = std::max(it->second, own);
    }
    unsigned long long used = 0;
    for (const auto& entry : per_pid) used = entry.second > ~0ull - used ? ~0ull : used + entry.second;
    if (mps && !compute) {
        complain(std::string(spec_path) + ": " + where +
                 "processes has an \"mps\" process but no \"compute\" one: an MPS client runs in its server's "
                 "context, which NVML lists as a compute process; add the nvidia-cuda-mps-server's pid as one");
        return false;
    }
    if (used > d->memory_total - d->memory_reserved) {
        complain(std::string(spec_path) + ": " + where +
                 "processes use more than memory_total - memory_reserved (each counts 1 MiB at least)");
        return false;
    }
    d->memory_used = std::max(d->memory_used, used);
    return true;
}

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
    if (!read_number(item, "memory_reserved", 18446744073709551616.0, spec_path, where, &d->memory_reserved))
        return false;
    if (d->memory_reserved > d->memory_total - d->memory_used) {
        complain(std::string(spec_path) + ": " + where + "memory_used + memory_reserved must not exceed memory_total");
        return false;
    }
    std::string cpus;
    if (!read_string(item, "cpu_affinity", spec_path, where, &cpus)) return false;
    if (!cpus.empty() && !parse_cpulist(cpus, &d->cpu_affinity)) {
        complain(std::string(spec_path) + ": " + where +
                 "cpu_affinity must be a Linux cpulist of CPUs 0..4095 "
                 "such as \"0-15,32-47\", not \"" +
                 cpus + "\"");
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
        for (const char* removed : {"state_error_after_s", "lost_handle_after_s"}) {
            if (present(*h, removed) != nullptr) {
                complain(std::string(spec_path) + ": " + hw + removed + " is no longer a key: create a file named by " +
                         (removed[0] == 's' ? "state_error_when_exists" : "lost_handle_when_exists") + " instead");
                return false;
            }
        }
        if (!known_keys(*h,
                        {"inforom_corrupted", "row_remap_failure", "row_remap_pending", "retired_pages_pending",
                         "ecc_enabled", "ecc_uncorrected", "recovery_action", "state_error", "state_error_when_exists",
                         "lost_handle_when_exists"},
                        spec_path, where + "health"))
            return false;
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
        if (!read_string(*h, "state_error_when_exists", spec_path, hw, &d->state_error_when_exists) ||
            !read_string(*h, "lost_handle_when_exists", spec_path, hw, &d->lost_handle_when_exists))
            return false;
    }
    if (const simjson::Value* f = present(item, "fabric")) {
        if (!f->is_object()) {
            complain(std::string(spec_path) + ": " + where + "fabric must be an object");
            return false;
        }
        const std::string fw = where + "fabric.";
        if (!known_keys(*f, {"state", "status", "health_summary", "struct"}, spec_path, where + "fabric")) return false;
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
            if (!known_keys(p, {"pid", "used_memory", "kind"}, spec_path, pw.substr(0, pw.size() - 1))) return false;
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
    return account_processes(spec_path, where, d);
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
            complain(std::string(spec_path) + ": " + where + "power must be a number of watts (0..4294967.295)" +
                     got(*v));
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
    if (!known_keys(*m, {"mode", "pending", "max_devices", "instances"}, spec_path, where + "mig")) return false;
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
        if (!known_keys(inst,
                        {"slot", "uuid", "memory_total", "gi", "ci", "memory_used", "memory_reserved", "cpu_affinity",
                         "compute_mode", "health", "processes", "not_supported", "no_permission", "fabric"},
                        spec_path, iw.substr(0, iw.size() - 1)))
            return false;
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
                complain(std::string(spec_path) + ": " + where + kv.first +
                         " is not a key of a hang; use query, "
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
            if (device >= persistent.size()) {  // a rule on no GPU would never block: a test's typo
                complain(std::string(spec_path) + ": " + where + "device " + std::to_string(device) +
                         " is not a GPU of this spec (it has " + std::to_string(persistent.size()) + ")");
                return false;
            }
            rule.device = static_cast<long long>(device);
        }
        if (!read_string(item, "while_exists", spec_path, where, &rule.path)) return false;
        if (rule.path.empty()) {
            complain(std::string(spec_path) + ": " + where +
                     "while_exists must name a file (the call blocks "
                     "while it exists)");
            return false;
        }
        out->hangs.push_back(std::move(rule));
    }
    return true;
}

// ---- machine profiles: spec files installed next to this library -----------------------------

#ifdef FLINK_GPU_SIM_R535
const char* const kProfilesBelowLibrary = "/../profiles";  // this build lives in r535/ under the default one
#else
const char* const kProfilesBelowLibrary = "/profiles";
#endif

std::string profiles_directory() {
    Dl_info info{};
    if (dladdr(reinterpret_cast<void*>(&profiles_directory), &info) == 0 || info.dli_fname == nullptr)
        return "profiles";
    // the installed file's directory, not a link's (an image linking libnvidia-ml.so.1 elsewhere)
    char* real = realpath(info.dli_fname, nullptr);
    const std::string library = real != nullptr ? real : info.dli_fname;
    std::free(real);
    const size_t slash = library.rfind('/');
    return (slash == std::string::npos ? std::string(".") : library.substr(0, slash)) + kProfilesBelowLibrary;
}

std::string profile_names(const std::string& directory) {
    std::vector<std::string> names;
    if (DIR* dir = opendir(directory.c_str())) {
        while (const dirent* entry = readdir(dir)) {
            const std::string file = entry->d_name;
            if (file.size() > 5 && file.compare(file.size() - 5, 5, ".json") == 0)
                names.push_back(file.substr(0, file.size() - 5));
        }
        closedir(dir);
    }
    std::sort(names.begin(), names.end());
    std::string list;
    for (const std::string& name : names) list += (list.empty() ? "" : ", ") + name;
    return list.empty() ? "none" : list;
}

// FLINK_GPU_SIM_PROFILE=name: the spec file of that profile.
bool profile_file(const char* name, std::string* out) {
    const std::string directory = profiles_directory();
    bool plain = *name != '\0' && *name != '.';
    for (const char* c = name; *c != '\0'; ++c)
        plain = plain && ((*c >= 'a' && *c <= 'z') || (*c >= '0' && *c <= '9') || *c == '-' || *c == '_' || *c == '.');
    *out = directory + "/" + name + ".json";
    if (!plain || access(out->c_str(), R_OK) != 0) {
        complain(std::string("FLINK_GPU_SIM_PROFILE=") + name + " is not a profile of this simulator; use one of " +
                 profile_names(directory) + " (in " + directory + ")");
        return false;
    }
    return true;
}

// The spec `root` (read from `spec_path`, which the errors name) into `s`, `driver` and `init_error`;
// false after a configuration error is said.
bool read_root(const simjson::Value& root, const char* spec_path, SimState& s, DriverConfig* driver,
               nvmlReturn_t* init_error) {
    if (!root.is_object()) {
        complain(std::string(spec_path) + ": the top level must be a JSON object");
        return false;
    }
    if (!known_keys(root,
                    {"init_error", "driver_version", "devices", "process_struct", "unprivileged", "driver_lock",
                     "latency_ms", "hang"},
                    spec_path, "the top level"))
        return false;
    if (const auto* v = present(root, "init_error")) {
        unsigned long long code = 0;
        if (!v->is_number() || !whole_number(*v, 1000.0, &code)) {
            complain(std::string(spec_path) + ": init_error must be an NVML error code (0..999)" + got(*v));
            return false;
        }
        *init_error = static_cast<nvmlReturn_t>(code);
    }
    if (!read_string(root, "driver_version", spec_path, "", &s.driver_version) ||
        !read_bool(root, "unprivileged", spec_path, "", &s.unprivileged))
        return false;
    unsigned layout = 0;
    for (unsigned i = 0; i < 2; ++i)
        if (std::strcmp(kProcessStructs[i], kProcessStruct) == 0) layout = i;
    const unsigned built = layout;
    if (!read_choice(root, "process_struct", kProcessStructs, 2, spec_path, "", &layout)) return false;
    if (layout != built && !t_checking_any_build) {
        complain(std::string(spec_path) + ": \"process_struct\" is \"" + kProcessStructs[layout] +
                 "\" but this build of the simulator models \"" + kProcessStruct +
                 "\" (flink_gpu.simulator.library_path(process_struct) names the matching one)");
        return false;
    }
    const auto* list = root.get("devices");
    if (list != nullptr && !list->is_array()) {
        complain(std::string(spec_path) + ": \"devices\" must be a list");
        return false;
    }
    for (size_t i = 0; list != nullptr && i < list->array.size(); ++i) {
        const auto& item = list->array[i];
        SimDevice d = default_device(static_cast<unsigned>(i));
        if (!item.is_object()) {
            complain(std::string(spec_path) + ": devices[" + std::to_string(i) + "] must be an object");
            return false;
        }
        const std::string where = "devices[" + std::to_string(i) + "].";
        if (!known_keys(item, {"uuid",          "name",   "memory_total",     "pci_bus_id",
                               "minor_number",  "fault",  "memory_used",      "cpu_affinity",
                               "compute_mode",  "health", "processes",        "not_supported",
                               "no_permission", "mig",    "utilization",      "temperature",
                               "power",         "fabric", "persistence_mode", "memory_reserved",
                               "pcie",          "nvlinks"},
                        spec_path, "devices[" + std::to_string(i) + "]"))
            return false;
        if (!read_string(item, "uuid", spec_path, where, &d.uuid) ||
            !read_string(item, "name", spec_path, where, &d.name) ||
            !read_string(item, "pci_bus_id", spec_path, where, &d.pci_bus_id))
            return false;
        unsigned long long number = 0;
        if (const auto* v = present(item, "memory_total")) {
            if (!v->is_number() || !whole_number(*v, 18446744073709551616.0, &number)) {
                complain(std::string(spec_path) + ": " + where +
                         "memory_total must be a whole number of bytes (0..2^64-1)" + got(*v));
                return false;
            }
            d.memory_total = number;
        }
        if (const auto* v = present(item, "minor_number")) {
            if (!v->is_number() || !whole_number(*v, 4294967296.0, &number)) {
                complain(std::string(spec_path) + ": " + where + "minor_number must be a whole number (0..2^32-1)" +
                         got(*v));
                return false;
            }
            d.minor_number = static_cast<unsigned>(number);
        }
        unsigned persistence = 1;
        if (!read_choice(item, "persistence_mode", kPersistenceModes, 2, spec_path, where, &persistence)) return false;
        d.persistence_mode = persistence == 1;
        if (!read_state(item, spec_path, where, &d) || !read_readings(item, spec_path, where, &d) ||
            !read_mig(item, spec_path, where, &d, &s.units) || !read_topology(item, spec_path, where, &d))
            return false;
        if (const auto* v = present(item, "fault")) {
            if (v->is_string() && v->string == "NO_PERMISSION") d.fault = Fault::kNoPermission;
            else if (v->is_string() && v->string == "GPU_IS_LOST") d.fault = Fault::kGpuIsLost;
            else {
                complain(std::string(spec_path) + ": " + where +
                         "fault must be \"NO_PERMISSION\" or "
                         "\"GPU_IS_LOST\" (or null), not " +
                         (v->is_string() ? "\"" + v->string + "\"" : "that value"));
                return false;
            }
        }
        s.devices.push_back(std::move(d));
    }
    if (!check_topology(s.devices, spec_path)) return false;
    std::vector<bool> persistent;
    for (const SimDevice& d : s.devices) persistent.push_back(d.persistence_mode);
    if (!read_driver(root, spec_path, persistent, driver)) return false;
    return true;
}

}  // namespace

nvmlReturn_t configure(SimState& s) {
    s.devices.clear();
    s.units.clear();
    s.unprivileged = false;
    s.driver_version = "999.99.99";
    nvmlReturn_t init_error = NVML_SUCCESS;
    DriverConfig driver;
    const char* spec_path = std::getenv("FLINK_GPU_SIM_SPEC");
    std::string profile_path;
    if (const char* profile = std::getenv("FLINK_GPU_SIM_PROFILE"); profile != nullptr && *profile != '\0') {
        if (spec_path != nullptr && *spec_path != '\0') {
            complain(std::string("FLINK_GPU_SIM_PROFILE=") + profile + " and FLINK_GPU_SIM_SPEC=" + spec_path +
                     " are both set: use one (to change a profile, copy " + profiles_directory() + "/" + profile +
                     ".json and give the copy as FLINK_GPU_SIM_SPEC)");
            return NVML_ERROR_UNKNOWN;
        }
        if (!profile_file(profile, &profile_path)) return NVML_ERROR_UNKNOWN;
        spec_path = profile_path.c_str();
    }
    if (spec_path != nullptr && *spec_path != '\0') {
        std::string error;
        simjson::Value root;
        if (!simjson::parse_file(spec_path, &root, &error)) {
            complain(std::string("cannot use FLINK_GPU_SIM_SPEC=") + spec_path + ": " + error);
            return NVML_ERROR_UNKNOWN;
        }
        if (!read_root(root, spec_path, s, &driver, &init_error)) return NVML_ERROR_UNKNOWN;
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

}  // namespace flinkgpu_sim

// The spec text `json` checked as configure() checks FLINK_GPU_SIM_SPEC (errors name `source` for the
// file): 0 when this build accepts it, else the size the error text needs with its NUL; the text goes
// into `error` (`size` bytes, cut short to fit). flink_gpu.simulator checks a spec with it.
SIM_EXPORT unsigned flinkgpuSimCheckSpec(const char* json, const char* source, char* error, unsigned size) {
    std::string said;
    struct AnyBuild {
        AnyBuild() { flinkgpu_sim::t_checking_any_build = true; }
        ~AnyBuild() { flinkgpu_sim::t_checking_any_build = false; }
    } any_build;
    try {
        flinkgpu_sim::ComplaintCapture capture(&said);
        simjson::Value root;
        std::string parse_error;
        const char* name = source != nullptr ? source : "simulator spec";
        if (json == nullptr) {
            said = "no spec text";
        } else if (const std::string text = json; !simjson::Parser(text).parse(&root, &parse_error)) {
            said = std::string(name) + ": it is not JSON: " + parse_error;
        } else {
            flinkgpu_sim::SimState scratch;
            flinkgpu_sim::DriverConfig driver;
            nvmlReturn_t init_error = NVML_SUCCESS;
            if (!flinkgpu_sim::read_root(root, name, scratch, &driver, &init_error) && said.empty())
                said = std::string(name) + ": not accepted";
        }
    } catch (...) {  // no exception crosses the C boundary
        said = "the NVML simulator ran out of memory checking the spec";
    }
    if (said.empty()) return 0;
    if (error != nullptr && size > 0) {
        const size_t n = std::min<size_t>(said.size(), size - 1);
        std::memcpy(error, said.data(), n);
        error[n] = '\0';
    }
    return static_cast<unsigned>(std::min<size_t>(said.size() + 1, 0xffffffffu));
}
