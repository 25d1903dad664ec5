// Device state (csrc/nvml/state.*) and its health verdict against the simulator, in both
// process-struct layouts (FLINK_GPU_TEST_SIMULATOR and FLINK_GPU_TEST_SIMULATOR_R535).
#include "nvml/choice.hpp"
#include "nvml/devices.hpp"
#include "nvml/loader.hpp"
#include "nvml/read.hpp"
#include "nvml/state.hpp"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

#include "tests/check.hpp"
#include "tests/simulated.hpp"

using namespace flinkgpu;

namespace {

using simulated::env;

// Runs `body` against `library` with the simulator spec `json` and the states it reads now.
int with_spec(const std::string& library, const std::string& json,
              const std::function<void(const NvmlLibrary&, std::vector<DeviceState>&)>& body) {
    return simulated::with_spec(library, json, [&](const NvmlLibrary& lib) {
        std::vector<DeviceState> states;
        const Status st = query_states(lib, getpid(), 0, all_checks(), &states);
        if (!st.ok()) {
            std::fprintf(stderr, "query_states: %s\n", st.message.c_str());
            _exit(97);
        }
        body(lib, states);
    });
}

const std::string& sim() {
    static const std::string path = env("FLINK_GPU_TEST_SIMULATOR");
    return path;
}
const std::string& r535() {
    static const std::string path = env("FLINK_GPU_TEST_SIMULATOR_R535");
    return path;
}

// The counters of the simulator loaded in this process (flinkgpuSimCounters), "" when none can be read.
// Read again while the text outgrew the buffer sized for it: "elapsed_ns" and the counts go on growing
// between the call that sizes the buffer and the one that fills it.
std::string sim_counters() {
    void* handle = dlopen(sim().c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) return "";
    auto read = reinterpret_cast<unsigned (*)(char*, unsigned)>(dlsym(handle, "flinkgpuSimCounters"));
    std::string text;
    for (unsigned needed = read != nullptr ? read(nullptr, 0) : 0; needed != 0;) {
        text.assign(needed, '\0');
        const unsigned got = read(&text[0], needed);
        if (got <= needed) break;
        needed = got;
    }
    dlclose(handle);
    return text.c_str();
}

// How often the simulator loaded in this process saw `function` called on GPU `gpu` (its counters; -1:
// they cannot be read).
int sim_calls(const std::string& function, const std::string& gpu) {
    const std::string text = sim_counters();
    if (text.empty()) return -1;
    const std::size_t at = text.find("\"" + function + "\"");
    if (at == std::string::npos) return 0;
    const std::size_t end = text.find('}', at);
    const std::size_t key = text.find("\"" + gpu + "\":", at);
    if (key == std::string::npos || key > end) return 0;
    return std::atoi(text.c_str() + key + gpu.size() + 3);
}

bool has(const std::vector<std::string>& v, const std::string& x) {
    for (const auto& e : v)
        if (e == x) return true;
    return false;
}

const char* const kProcesses =
    R"("processes": [{"pid": 4000000001, "used_memory": 1000, "kind": "compute"},)"
    R"({"pid": 4000000002, "used_memory": 2000, "kind": "compute"},)"
    R"({"pid": 4000000003, "kind": "graphics"}, {"pid": 4000000004, "used_memory": 4000, "kind": "mps"}])";

void check_processes(const std::vector<DeviceState>& s) {
    CHECK_EQ(s.size(), static_cast<std::size_t>(1));
    if (s.size() != 1) return;
    const auto& p = s[0].processes;
    CHECK_EQ(p.size(), static_cast<std::size_t>(4));
    if (p.size() != 4) return;
    CHECK_EQ(p[0].pid, 4000000001u);
    CHECK(p[0].used_memory == 1000ULL);
    CHECK_EQ(p[1].pid, 4000000002u);  // a misread stride scrambles the second entry first
    CHECK(p[1].used_memory == 2000ULL);
    CHECK(p[1].kind == ProcessKind::kCompute);
    CHECK_EQ(p[2].pid, 4000000003u);
    CHECK(!p[2].used_memory.has_value());
    CHECK(p[2].kind == ProcessKind::kGraphics);
    CHECK_EQ(p[3].pid, 4000000004u);
    CHECK(p[3].kind == ProcessKind::kMps);
    CHECK(!p[0].visible && !p[0].own);  // no such pid here: foreign, not visible
    CHECK(s[0].busy);
    CHECK(s[0].processes_known);
}

}  // namespace

TEST_CASE(the_process_api_is_chosen_by_the_drivers_exports) {
    // The R535 rule: five-field *_v3 where the R535-era export exists without the detail list.
    CHECK(choose_process_api(true, true, true, true, true) == ProcessApi::kDetailList);
    CHECK(choose_process_api(false, true, true, true, true) == ProcessApi::kV3R535);
    CHECK(choose_process_api(false, true, false, true, true) == ProcessApi::kV3);
    CHECK(choose_process_api(false, false, false, true, true) == ProcessApi::kV2);
    CHECK(choose_process_api(false, false, false, false, true) == ProcessApi::kV1);
    CHECK(choose_process_api(false, false, true, false, false) == ProcessApi::kNone);
}

TEST_CASE(a_healthy_idle_gpu_is_ok_with_memory_and_compute_mode) {
    // A healthy idle GPU: ok, memory from v2, compute mode, nothing busy.
    CHECK_EQ(
        with_spec(sim(),
                  R"({"devices": [{"memory_total": 1000, "memory_used": 300, "compute_mode": "exclusive_process"}]})",
                  [](const NvmlLibrary& lib, std::vector<DeviceState>& s) {
        CHECK(lib.api().process_api == ProcessApi::kDetailList);
        CHECK_EQ(s.size(), static_cast<std::size_t>(1));
        CHECK(s[0].health == Health::kOk);
        CHECK_EQ(s[0].health_text, std::string("ok"));
        CHECK(s[0].findings.empty());
        CHECK(s[0].memory_used == 300ULL);
        CHECK(s[0].memory_free == 700ULL);
        CHECK(s[0].compute_mode == std::string("exclusive_process"));
        CHECK(s[0].processes.empty() && !s[0].busy && s[0].processes_known);
    }),
        0);
}

TEST_CASE(processes_are_read_in_every_struct_layout) {
    // Processes in both layouts, and through *_v3 when the detail list is not supported.
    const std::string one = std::string(R"({"devices": [{)") + kProcesses + "}]}";
    CHECK_EQ(with_spec(sim(), one, [](const NvmlLibrary&, std::vector<DeviceState>& s) { check_processes(s); }), 0);
    CHECK_EQ(with_spec(r535(), std::string(R"({"process_struct": "r535", "devices": [{)") + kProcesses + "}]}",
                       [](const NvmlLibrary& lib, std::vector<DeviceState>& s) {
        CHECK(lib.api().process_api == ProcessApi::kV3R535);
        check_processes(s);
    }),
             0);
    CHECK_EQ(with_spec(sim(),
                       std::string(R"({"devices": [{"not_supported": ["process_detail_list"], )") + kProcesses + "}]}",
                       [](const NvmlLibrary&, std::vector<DeviceState>& s) { check_processes(s); }),
             0);
    // The build and the spec disagree on the layout: init fails (the spec names the other build).
    CHECK(with_spec(sim(), R"({"process_struct": "r535", "devices": [{}]})", [](auto&, auto&) {}) == 98);
}

TEST_CASE(the_owners_own_processes_are_not_foreign) {
    // Our own process (and, through the ppid chain, our children) is not foreign where the simulator's pids
    // (host pids) are ours; in a container the listed pid is the host's process with our number: foreign.
    const std::string mine = R"({"devices": [{"processes": [{"pid": )" + std::to_string(getpid()) + R"(}]}]})";
    CHECK_EQ(with_spec(sim(), mine,
                       [](const NvmlLibrary& lib, std::vector<DeviceState>& s) {
        const bool host = simulated::pids_are_hosts();
        // the child runs the queries: the test process is its parent, owner = the child
        std::vector<DeviceState> again;
        CHECK(query_states(lib, getpid(), getppid(), all_checks(), &again).ok());
        CHECK(again[0].processes[0].own == host && again[0].processes[0].visible == host && again[0].busy != host);
        // without the TaskManager (the parent) the parent's process is foreign
        CHECK(!s[0].processes[0].own && s[0].processes[0].visible == host && s[0].busy);
    }),
             0);
}

TEST_CASE(no_permission_on_the_process_queries_makes_them_unknown_not_busy) {
    // NO_PERMISSION on the process queries: unknown, not busy.
    CHECK_EQ(with_spec(sim(), std::string(R"({"devices": [{"no_permission": ["processes"], )") + kProcesses + "}]}",
                       [](const NvmlLibrary&, std::vector<DeviceState>& s) {
        CHECK(!s[0].processes_known);
        CHECK(s[0].processes.empty() && !s[0].busy);
    }),
             0);
}

TEST_CASE(each_finding_shows_on_its_own_device) {
    // Each finding on its own device.
    CHECK_EQ(with_spec(sim(),
                       R"({"devices": [{"health": {"inforom_corrupted": true}},)"
                       R"({"health": {"row_remap_failure": true}},)"
                       R"({"health": {"ecc_uncorrected": 3}},)"
                       R"({"health": {"ecc_uncorrected": 3, "ecc_enabled": false}},)"
                       R"({"health": {"recovery_action": "gpu_reset"}},)"
                       R"({"health": {"row_remap_pending": true}},)"
                       R"({"health": {"retired_pages_pending": true}},)"
                       R"({"health": {"state_error": "GPU_IS_LOST"}},)"
                       R"({"health": {"state_error": "RESET_REQUIRED"}},)"
                       R"({"health": {"row_remap_pending": true, "inforom_corrupted": true}}]})",
                       [](const NvmlLibrary&, std::vector<DeviceState>& s) {
        CHECK_EQ(s.size(), static_cast<std::size_t>(10));
        if (s.size() != 10) return;
        CHECK_EQ(s[0].health_text, std::string("unhealthy: InfoROM corrupted"));
        CHECK_EQ(s[1].health_text, std::string("unhealthy: row remapping failed"));
        CHECK_EQ(s[2].health_text, std::string("unhealthy: 3 uncorrectable volatile ECC errors"));
        CHECK(s[3].health == Health::kOk);  // counts are not read while ECC is off
        CHECK_EQ(s[4].health_text, std::string("unhealthy: GPU recovery action: reset the GPU"));
        CHECK_EQ(s[5].health_text, std::string("degraded: row remapping pending"));
        CHECK(s[5].health == Health::kDegraded);
        CHECK_EQ(s[6].health_text, std::string("degraded: page retirement pending"));
        CHECK(s[7].health == Health::kUnhealthy);
        CHECK(s[7].health_text.find("GPU is lost") != std::string::npos);
        CHECK(!s[7].memory_used.has_value());
        CHECK(s[8].health_text.find("unhealthy: GPU reset required") == 0);
        CHECK_EQ(s[9].health_text, std::string("unhealthy: InfoROM corrupted"));
        CHECK(has(s[9].findings, "degraded: row remapping pending"));
    }),
             0);
}

TEST_CASE(not_supported_everywhere_is_no_finding) {
    // NOT_SUPPORTED everywhere: no finding, no memory, no compute mode, nothing busy.
    CHECK_EQ(
        with_spec(
            sim(),
            std::string(R"({"devices": [{"health": {"inforom_corrupted": true, "row_remap_failure": true,)"
                        R"("ecc_uncorrected": 1, "recovery_action": "node_reboot", "retired_pages_pending": true},)"
                        R"("not_supported": ["inforom", "remapped_rows", "ecc_mode", "ecc_errors", "field_values",)"
                        R"("retired_pages", "memory", "memory_v2", "compute_mode", "cpu_affinity", "processes"], )") +
                kProcesses + "}]}",
            [](const NvmlLibrary&, std::vector<DeviceState>& s) {
        CHECK(s[0].health == Health::kOk);
        CHECK(s[0].findings.empty());
        CHECK(!s[0].memory_used.has_value() && !s[0].compute_mode.has_value());
        CHECK(s[0].processes.empty() && !s[0].busy && s[0].processes_known);
    }),
        0);
}

TEST_CASE(the_nvlink_fabric_is_read_through_each_struct) {
    // NVLink fabric through each struct the driver may have; a PCIe part is not supported.
    CHECK_EQ(with_spec(sim(),
                       R"({"devices": [{"fabric": {"state": "not_started"}},)"
                       R"({"fabric": {"state": "in_progress", "struct": "v2"}},)"
                       R"({"fabric": {"status": 999, "struct": "v1"}},)"
                       R"({"fabric": {"health_summary": "unhealthy"}},)"
                       R"({"fabric": {"health_summary": "unhealthy", "struct": "v2"}}, {}]})",
                       [](const NvmlLibrary&, std::vector<DeviceState>& s) {
        CHECK_EQ(s.size(), static_cast<std::size_t>(6));
        if (s.size() != 6) return;
        const auto fabric = static_cast<std::size_t>(Check::kFabric);
        CHECK(s[0].health == Health::kUnhealthy);
        CHECK(s[0].health_text.find("registration not started") != std::string::npos);
        CHECK(s[1].health == Health::kUnhealthy);
        CHECK(s[1].health_text.find("in progress: transient") != std::string::npos);
        CHECK(s[2].health == Health::kDegraded);
        CHECK(s[3].health == Health::kDegraded);  // the v3 summary
        CHECK(s[4].health == Health::kOk);        // v2 has no summary
        CHECK(s[4].checks[fabric].outcome == Outcome::kOk);
        CHECK(s[5].health == Health::kOk);
        CHECK(s[5].checks[fabric].outcome == Outcome::kNotSupported);
    }),
             0);
}

TEST_CASE(each_check_says_how_it_was_answered) {
    // Each check says how it was answered: no permission, not applicable (ECC off), ok.
    CHECK_EQ(with_spec(sim(),
                       R"({"devices": [{"no_permission": ["remapped_rows"], "not_supported": ["retired_pages"],)"
                       R"("health": {"ecc_enabled": false}}]})",
                       [](const NvmlLibrary&, std::vector<DeviceState>& s) {
        const auto& c = s[0].checks;
        CHECK(c[static_cast<std::size_t>(Check::kRemappedRows)].outcome == Outcome::kNoPermission);
        CHECK(c[static_cast<std::size_t>(Check::kEcc)].outcome == Outcome::kNotApplicable);
        CHECK(c[static_cast<std::size_t>(Check::kRetiredPages)].outcome == Outcome::kNotSupported);
        CHECK(c[static_cast<std::size_t>(Check::kInforom)].outcome == Outcome::kOk);
        CHECK(c[static_cast<std::size_t>(Check::kRecoveryAction)].outcome == Outcome::kOk);
    }),
             0);
}

TEST_CASE(a_mig_unit_takes_what_its_handle_does_not_answer_from_its_gpu) {
    // A MIG unit: a check its handle does not answer is as its GPU answered it, NOT_SUPPORTED included.
    CHECK_EQ(with_spec(sim(),
                       R"({"devices": [{"not_supported": ["remapped_rows"], "fabric": {"state": "not_started"},)"
                       R"("mig": {"mode": "enabled", "instances": [{"slot": 1}, {"slot": 3,)"
                       R"("health": {"inforom_corrupted": true}}]}}]})",
                       [](const NvmlLibrary&, std::vector<DeviceState>& s) {
        CHECK_EQ(s.size(), static_cast<std::size_t>(2));
        if (s.size() != 2) return;
        for (const DeviceState& unit : s) {
            CHECK(unit.checks[static_cast<std::size_t>(Check::kFabric)].outcome == Outcome::kFinding);
            CHECK(unit.health == Health::kUnhealthy);
        }
        CHECK(s[0].checks[static_cast<std::size_t>(Check::kInforom)].outcome == Outcome::kOk);
        CHECK(s[1].checks[static_cast<std::size_t>(Check::kInforom)].outcome == Outcome::kFinding);
    }),
             0);
}

TEST_CASE(a_gpu_refused_after_the_enumeration_is_one_lost_state) {
    // A GPU whose handle NVML refuses after the enumeration is one lost state, never dropped, and the
    // choice names it; an enumerated unit that is gone is unhealthy too.
    // (the spec's trigger: GPU 0's handle is refused once this file exists)
    const std::string lost = "/tmp/flink-gpu-test-lost-" + std::to_string(getpid());
    CHECK_EQ(
        simulated::with_spec(sim(), R"({"devices": [{"health": {"lost_handle_when_exists": ")" + lost + R"("}}, {}]})",
                             [&lost](const NvmlLibrary& lib) {
        Choice before;
        CHECK(choose_gpus(lib, {"0", "1"}, getpid(), 0, BusyPolicy::kAvoid, all_checks(), 30.0, &before).ok());
        CHECK(before.ranking.indices == (std::vector<std::string>{"0", "1"}));
        std::fclose(std::fopen(lost.c_str(), "w"));
        Choice after;
        CHECK(choose_gpus(lib, {"0", "1", "1:2"}, getpid(), 0, BusyPolicy::kAvoid, all_checks(), 30.0, &after).ok());
        CHECK_EQ(after.states.size(), static_cast<std::size_t>(3));
        if (after.states.size() != 3) return;
        CHECK_EQ(after.states[0].health_text, std::string("unhealthy: GPU is lost (nvmlDeviceGetHandleByIndex_v2 "
                                                          "returned NVML_ERROR_GPU_IS_LOST)"));
        CHECK(after.states[2].health == Health::kUnhealthy);
        CHECK(after.states[2].mig_slot == 2u);
        CHECK(after.ranking.indices == (std::vector<std::string>{"1"}));
        CHECK_EQ(after.ranking.left_out.size(), static_cast<std::size_t>(2));
    }),
        0);
    unlink(lost.c_str());
}

TEST_CASE(an_old_driver_without_state_queries_is_ok) {
    // An old driver without any state query: every device ok, nothing known.
    if (!env("FLINK_GPU_TEST_FAKE_NVML").empty()) {
        CHECK_EQ(with_spec(env("FLINK_GPU_TEST_FAKE_NVML"), "{}",
                           [](const NvmlLibrary& lib, std::vector<DeviceState>& s) {
            CHECK(lib.api().process_api == ProcessApi::kV1);
            CHECK_EQ(s.size(), static_cast<std::size_t>(1));
            CHECK(s[0].health == Health::kOk);
            CHECK_EQ(s[0].processes.size(), static_cast<std::size_t>(1));
            if (!s[0].processes.empty()) {
                CHECK_EQ(s[0].processes[0].pid, 4242u);
                CHECK(s[0].processes[0].used_memory == 4096ULL);
            }
        }),
                 0);
    }
}

TEST_CASE(busy_gpus_ignore_reads_no_process_list) {
    const std::string spec = std::string(R"({"devices": [{)") + kProcesses + "}]}";
    CHECK_EQ(simulated::with_spec(sim(), spec,
                                  [](const NvmlLibrary& lib) {
        Choice ignore;
        CHECK(choose_gpus(lib, {"0"}, getpid(), 0, BusyPolicy::kIgnore, all_checks(), 30.0, &ignore).ok());
        CHECK_EQ(ignore.states.size(), static_cast<std::size_t>(1));
        if (ignore.states.empty()) return;
        CHECK(!ignore.states[0].processes_read);
        CHECK(ignore.states[0].processes.empty());
        Choice avoid;
        CHECK(choose_gpus(lib, {"0"}, getpid(), 0, BusyPolicy::kAvoid, all_checks(), 30.0, &avoid).ok());
        if (avoid.states.empty()) return;
        CHECK(avoid.states[0].processes_read);
        CHECK_EQ(avoid.states[0].processes.size(), static_cast<std::size_t>(4));
        CHECK(avoid.states[0].busy);
    }),
             0);
}

TEST_CASE(a_gpu_is_read_only_for_the_process_lists_that_can_hold_something) {
    // docs/design.md §9.1: none where memory shows no allocation (v2, the reservation apart); compute and
    // graphics where it does; MPS only after a compute process (an MPS client's server is one)
    const std::string spec = R"({"devices": [{}, {"memory_used": 1073741824},)"
                             R"({"processes": [{"pid": 4000000001, "kind": "graphics"}]},)"
                             R"({"processes": [{"pid": 4000000002}, {"pid": 4000000003, "kind": "mps"}]},)"
                             R"({"not_supported": ["memory_v2"]}]})";
    CHECK_EQ(with_spec(sim(), spec,
                       [](const NvmlLibrary&, std::vector<DeviceState>& s) {
        const char* list = "nvmlDeviceGetRunningProcessDetailList";
        const int lists[] = {0, 2, 2, 3, 2};  // v1's used counts the reservation in: it cannot tell
        for (int i = 0; i < 5; ++i) CHECK_EQ(sim_calls(list, std::to_string(i)), lists[i]);
        CHECK_EQ(s.size(), static_cast<std::size_t>(5));
        if (s.size() != 5) return;
        CHECK(s[0].processes.empty() && s[0].processes_known && s[0].processes_read && !s[0].busy);
        CHECK(s[2].busy && s[2].processes.size() == 1u);
        CHECK(s[3].busy && s[3].processes.size() == 2u);
        if (s[3].processes.size() == 2u) CHECK(s[3].processes[1].kind == ProcessKind::kMps);
        CHECK(s[1].processes.empty() && s[4].processes.empty() && !s[4].busy);
    }),
             0);
}

TEST_CASE(a_mig_gpus_process_lists_are_read_on_its_units_alone) {
    // the GPU's own lists would only be dropped: its units' states carry their processes
    const std::string spec = R"({"devices": [{"memory_used": 1073741824, "mig": {"mode": "enabled", "instances": [)"
                             R"({"slot": 0, "memory_used": 1073741824, "processes": [{"pid": 4000000001}]},)"
                             R"({"slot": 1, "memory_used": 1073741824}]}}]})";
    CHECK_EQ(with_spec(sim(), spec,
                       [](const NvmlLibrary&, std::vector<DeviceState>& s) {
        const char* list = "nvmlDeviceGetRunningProcessDetailList";
        CHECK_EQ(sim_calls(list, "0"), 0);
        CHECK_EQ(sim_calls(list, "0:0"), 3);  // compute, graphics, and MPS after a compute process
        CHECK_EQ(sim_calls(list, "0:1"), 2);
        CHECK_EQ(s.size(), static_cast<std::size_t>(2));
        if (s.size() != 2) return;
        CHECK(s[0].busy && s[0].processes.size() == 1u && s[0].processes_read);
        CHECK(!s[1].busy && s[1].processes.empty() && s[1].processes_read);
    }),
             0);
}

TEST_CASE(the_health_fields_come_in_one_field_values_call_per_gpu) {
    CHECK_EQ(
        simulated::with_spec(sim(), R"({"devices": [{"health": {"row_remap_pending": true, "ecc_uncorrected": 2}}]})",
                             [](const NvmlLibrary& lib) {
        std::vector<DeviceState> s;
        CHECK(query_states(lib, getpid(), 0, all_checks(), &s).ok());
        CHECK_EQ(s[0].health_text, std::string("unhealthy: 2 uncorrectable volatile ECC errors"));
        CHECK(has(s[0].findings, "degraded: row remapping pending"));
        CHECK_EQ(sim_calls("nvmlDeviceGetFieldValues", "0"), 1);
        CHECK_EQ(sim_calls("nvmlDeviceGetRemappedRows", "0"), 0);
        CHECK_EQ(sim_calls("nvmlDeviceGetEccMode", "0"), 0);
        CHECK_EQ(sim_calls("nvmlDeviceGetTotalEccErrors", "0"), 0);
        CHECK_EQ(sim_calls("nvmlDeviceGetRetiredPagesPendingStatus", "0"), 0);
    }),
        0);
}

TEST_CASE(a_field_that_does_not_answer_falls_back_to_its_own_query) {
    CHECK_EQ(simulated::with_spec(sim(),
                                  R"({"devices": [{"not_supported": ["field_values"],)"
                                  R"("health": {"row_remap_failure": true, "retired_pages_pending": true,)"
                                  R"("ecc_uncorrected": 1}}]})",
                                  [](const NvmlLibrary& lib) {
        std::vector<DeviceState> s;
        CHECK(query_states(lib, getpid(), 0, all_checks(), &s).ok());
        CHECK(has(s[0].findings, "unhealthy: row remapping failed"));
        CHECK(has(s[0].findings, "unhealthy: 1 uncorrectable volatile ECC error"));
        CHECK(has(s[0].findings, "degraded: page retirement pending"));
        CHECK_EQ(sim_calls("nvmlDeviceGetRemappedRows", "0"), 1);
        CHECK_EQ(sim_calls("nvmlDeviceGetTotalEccErrors", "0"), 1);
    }),
             0);
}

TEST_CASE(inforom_validity_is_read_once_per_interval_and_again_when_nothing_is_usable) {
    CHECK_EQ(simulated::with_spec(sim(), R"({"devices": [{}, {"health": {"inforom_corrupted": true}}]})",
                                  [](const NvmlLibrary& lib) {
        for (int i = 0; i < 3; ++i) {
            Choice c;
            CHECK(choose_gpus(lib, {"0", "1"}, getpid(), 0, BusyPolicy::kAvoid, all_checks(), 30.0, &c).ok());
            CHECK(c.ranking.indices == (std::vector<std::string>{"0"}));
            if (c.states.size() == 2) CHECK(c.states[1].readings.inforom_corrupted);
        }
        CHECK_EQ(sim_calls("nvmlDeviceValidateInforom", "0"), 1);
        CHECK_EQ(sim_calls("nvmlDeviceValidateInforom", "1"), 1);
        // only the corrupted GPU: nothing usable, so its cached answer is checked again
        Choice alone;
        CHECK(choose_gpus(lib, {"1"}, getpid(), 0, BusyPolicy::kAvoid, all_checks(), 30.0, &alone).ok());
        CHECK(alone.ranking.indices.empty());
        CHECK_EQ(sim_calls("nvmlDeviceValidateInforom", "1"), 2);
    }),
             0);
}

int main(int argc, char** argv) { return check::run(argc, argv); }
