// The NVML loader and enumeration against the bundled simulator (path in FLINK_GPU_TEST_SIMULATOR).
#include "nvml/devices.hpp"
#include "nvml/loader.hpp"

#include <dlfcn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <iterator>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "tests/check.hpp"
#include "tests/simulated.hpp"

using namespace flinkgpu;
using simulated::with_spec;

namespace {

std::string simulator() {
    const char* p = std::getenv("FLINK_GPU_TEST_SIMULATOR");
    return p ? p : "";
}

// csrc/tests/fake_nvml_old.cpp: only the v1 PCI query; optionally forks inside nvmlInit.
std::string fake_nvml() {
    const char* p = std::getenv("FLINK_GPU_TEST_FAKE_NVML");
    return p ? p : "";
}

// Runs `body` in a forked child (NVML initialises once per process) and returns its exit status.
template <typename Fn>
int in_child(Fn body) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) _exit(body());
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

}  // namespace

TEST_CASE(a_missing_library_is_a_clear_error_naming_the_path) {
    // A missing library: a clear error naming the path, and nothing cached.
    Status status;
    CHECK(NvmlLibrary::acquire("/nonexistent/libnvidia-ml.so.1", &status) == nullptr);
    CHECK(status.code == StatusCode::kNvml);
    CHECK_EQ(status.nvml_code, static_cast<int>(NVML_ERROR_LIBRARY_NOT_FOUND));
    CHECK_EQ(status.function, std::string("dlopen"));
    CHECK(status.message.find("/nonexistent/libnvidia-ml.so.1") != std::string::npos);
}

TEST_CASE(a_path_that_is_not_a_regular_file_is_refused_without_dlopen) {
    Status status;
    // A path that is not a regular file is refused saying what it is, without dlopen: dlopen of a
    // FIFO without a writer blocks forever. A bare name is left to the loader's search.
    {
        char dir_template[] = "/tmp/flinkgpu-loader-XXXXXX";
        const char* dir = mkdtemp(dir_template);
        CHECK(dir != nullptr);
        const std::string fifo = std::string(dir) + "/libnvidia-ml.so.1";
        CHECK_EQ(mkfifo(fifo.c_str(), 0600), 0);
        alarm(10);  // a blocked dlopen ends the test (SIGALRM) instead of hanging it
        for (const auto& [path, kind] : {std::pair<std::string, std::string>{fifo, "a FIFO (named pipe)"},
                                         {dir, "a directory"},
                                         {"/dev/null", "a character device"}}) {
            CHECK(NvmlLibrary::acquire(path, &status) == nullptr);
            CHECK(status.code == StatusCode::kNvml);
            CHECK_EQ(status.nvml_code, static_cast<int>(NVML_ERROR_LIBRARY_NOT_FOUND));
            CHECK_EQ(status.function, std::string("dlopen"));
            CHECK(status.message.find("Could not load the NVIDIA Management Library '" + path + "': it is " + kind +
                                      ", not a regular file.") == 0);
            CHECK(NvmlLibrary::probe(path, &status) == nullptr);
            CHECK_EQ(status.nvml_code, static_cast<int>(NVML_ERROR_LIBRARY_NOT_FOUND));
        }
        alarm(0);
        CHECK_EQ(unlink(fifo.c_str()), 0);
        CHECK_EQ(rmdir(dir), 0);
    }
}

TEST_CASE(a_library_that_is_not_nvml_is_refused) {
    Status status;
    // Not an NVML library at all: libc.
    CHECK(NvmlLibrary::acquire("libc.so.6", &status) == nullptr);
    CHECK(status.code == StatusCode::kNvml);
    CHECK_EQ(status.nvml_code, static_cast<int>(NVML_ERROR_FUNCTION_NOT_FOUND));
    CHECK(status.message.find("libc.so.6") != std::string::npos);
}

TEST_CASE(four_default_devices_are_enumerated) {
    // Four default devices.
    CHECK_EQ(in_child([] {
        setenv("FLINK_GPU_SIM_DEVICES", "4", 1);
        Status s;
        const NvmlLibrary* lib = NvmlLibrary::acquire(simulator(), &s);
        if (lib == nullptr) return 1;
        if (NvmlLibrary::acquire(simulator(), &s) != lib) return 2;  // one instance per path
        Enumeration e;
        if (!enumerate_devices(*lib, &e).ok() || e.devices.size() != 4 || !e.skipped.empty()) return 3;
        const DeviceInfo& d = e.devices[3];
        if (d.index != "3" || d.uuid != std::string("GPU-00000000-0000-4000-8000-000000000003")) return 4;
        if (d.name != std::string("NVIDIA Simulated GPU") || d.pci_bus_id != std::string("00000000:04:00.0")) return 5;
        if (d.memory_total != (80ULL << 30) || d.minor_number != 3u) return 6;
        return 0;
    }),
             0);
}

TEST_CASE(an_init_failure_names_the_error_and_the_library) {
    // Init failure: the NVML error and the library path in the message.
    CHECK_EQ(in_child([] {
        setenv("FLINK_GPU_SIM_INIT_ERROR", "9", 1);  // NVML_ERROR_DRIVER_NOT_LOADED
        Status s;
        if (NvmlLibrary::acquire(simulator(), &s) != nullptr) return 1;
        if (s.code != StatusCode::kNvml || s.nvml_code != NVML_ERROR_DRIVER_NOT_LOADED) return 2;
        if (s.message.find("NVML_ERROR_DRIVER_NOT_LOADED") == std::string::npos) return 3;
        if (s.message.find(simulator()) == std::string::npos) return 4;
        return 0;
    }),
             0);
}

TEST_CASE(out_of_memory_in_the_simulator_is_an_nvml_error) {
#if !defined(__SANITIZE_ADDRESS__)  // ASan reserves terabytes of address space: no RLIMIT_AS under it
    // Out of memory inside the simulator is an NVML error, not a C++ exception through the C ABI.
    CHECK_EQ(in_child([] {
        const char* spec = "/tmp/flink-gpu-test-devices-oom.json";
        {
            std::ofstream out(spec);
            out << R"({"devices": [{"uuid": ")" << std::string(64u << 20, 'x') << "\"}]}";
        }
        setenv("FLINK_GPU_SIM_SPEC", spec, 1);
        long vm_kib = 0;
        std::ifstream status("/proc/self/status");
        for (std::string line; std::getline(status, line);)
            if (line.rfind("VmSize:", 0) == 0) vm_kib = std::atol(line.c_str() + 7);
        const struct rlimit limit = {static_cast<rlim_t>(vm_kib + (24 << 10)) << 10,
                                     static_cast<rlim_t>(vm_kib + (24 << 10)) << 10};
        Status s;
        // the library is loaded before the limit, so only the simulator's reading of the spec is short
        if (std::getenv("FLINK_GPU_TEST_SIMULATOR") == nullptr) return 1;
        void* preload = dlopen(simulator().c_str(), RTLD_NOW | RTLD_LOCAL);
        if (preload == nullptr || setrlimit(RLIMIT_AS, &limit) != 0) return 2;
        const NvmlLibrary* lib = NvmlLibrary::acquire(simulator(), &s);
        std::remove(spec);
        if (lib != nullptr) return 3;
        return s.code == StatusCode::kNvml && s.nvml_code == NVML_ERROR_MEMORY ? 0 : 4;
    }),
             0);
#endif
}

TEST_CASE(per_device_faults_are_skipped_not_fatal) {
    // Per-device faults are skipped, not fatal.
    CHECK_EQ(with_spec(simulator(), R"({"devices": [{}, {"fault": "NO_PERMISSION"}, {"fault": "GPU_IS_LOST"},
                                  {"uuid": "GPU-x", "name": "\u00c9t\u00e9", "memory_total": 1024}]})",
                       [](const NvmlLibrary& lib) {
        Enumeration e;
        CHECK(enumerate_devices(lib, &e).ok());
        CHECK_EQ(e.devices.size(), 2u);
        CHECK_EQ(e.skipped.size(), 2u);
        if (e.devices.size() != 2 || e.skipped.size() != 2) return;
        CHECK_EQ(e.devices[0].index, std::string("0"));
        CHECK_EQ(e.devices[1].index, std::string("3"));
        CHECK_EQ(e.devices[1].uuid, std::string("GPU-x"));
        CHECK_EQ(e.devices[1].memory_total, 1024ULL);
        CHECK_EQ(e.devices[1].name, std::string("\xC3\x89t\xC3\xA9"));
        CHECK_EQ(e.skipped[0].code, NVML_ERROR_NO_PERMISSION);
        CHECK_EQ(e.skipped[1].code, NVML_ERROR_GPU_IS_LOST);
        CHECK(e.skipped[1].reason.find("GPU 2") != std::string::npos);
    }),
             0);
}

TEST_CASE(a_mig_gpu_gives_its_units_at_their_slots) {
    // A GPU in MIG mode gives its units at their (sparse) slots, through MIG handles only; one without
    // instances is skipped with a reason; a pending mode is a notice.
    CHECK_EQ(with_spec(simulator(), R"({"unprivileged": true, "devices": [
            {"uuid": "GPU-m", "mig": {"mode": "enabled", "instances": [{"slot": 5, "uuid": "MIG-5", "memory_total": 64,
                                                                     "gi": 2, "ci": 1}, {"slot": 0}]}},
            {"mig": {"mode": "enabled", "pending": "disabled"}}, {}]})",
                       [](const NvmlLibrary& lib) {
        Enumeration e;
        CHECK(enumerate_devices(lib, &e).ok());
        CHECK_EQ(e.devices.size(), 3u);
        CHECK_EQ(e.skipped.size(), 1u);
        CHECK_EQ(e.notices.size(), 1u);
        if (e.devices.size() != 3 || e.skipped.size() != 1 || e.notices.size() != 1) return;
        CHECK_EQ(e.devices[0].index, std::string("0:0"));
        CHECK_EQ(e.devices[1].index, std::string("0:5"));
        CHECK_EQ(e.devices[2].index, std::string("2"));
        const DeviceInfo& u = e.devices[1];
        CHECK_EQ(u.uuid, std::string("MIG-5"));
        CHECK_EQ(u.memory_total, 64ULL);
        CHECK_EQ(u.mig_slot, 5u);
        CHECK_EQ(u.mig_gi, 2u);
        CHECK_EQ(u.mig_ci, 1u);
        CHECK_EQ(u.parent_uuid, std::string("GPU-m"));
        CHECK_EQ(u.nvml_index, 0u);
        CHECK_EQ(e.skipped[0].index, std::string("1"));
        CHECK_EQ(e.skipped[0].code, NVML_ERROR_NOT_FOUND);
        CHECK(e.notices[0].find("pending a reset") != std::string::npos);
    }),
             0);
}

TEST_CASE(nvml_is_initialised_once_per_process_and_again_in_a_forked_child) {
    // NVML is initialised once per process and once more in a forked child, which then works
    // (the fake library logs the pid of every nvmlInit_v2 call).
    CHECK_EQ(in_child([] {
        const std::string log = "/tmp/flink-gpu-test-init-log-" + std::to_string(getpid());
        setenv("FAKE_NVML_INIT_LOG", log.c_str(), 1);
        Status s;
        const NvmlLibrary* lib = NvmlLibrary::acquire(fake_nvml(), &s);
        if (lib == nullptr || NvmlLibrary::acquire(fake_nvml(), &s) != lib) return 1;
        const int child = in_child([&] {
            Status cs;
            const NvmlLibrary* again = NvmlLibrary::acquire(fake_nvml(), &cs);
            if (again != lib || NvmlLibrary::acquire(fake_nvml(), &cs) != lib) return 2;
            Enumeration e;
            if (!enumerate_devices(*again, &e).ok() || e.devices.size() != 1) return 3;
            std::ofstream(log, std::ios::app) << "child " << getpid() << "\n";
            return 0;
        });
        std::ifstream in(log);
        const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        std::remove(log.c_str());
        if (child != 0) return child;
        // "<this pid>\n<child pid>\nchild <child pid>\n": one init here, one in the child
        const std::string self = std::to_string(getpid()) + "\n";
        if (text.compare(0, self.size(), self) != 0) return 4;
        const std::string rest = text.substr(self.size());
        const std::size_t eol = rest.find('\n');
        if (eol == std::string::npos || eol == 0) return 5;
        const std::string child_pid = rest.substr(0, eol);
        return rest == child_pid + "\nchild " + child_pid + "\n" && child_pid + "\n" != self ? 0 : 6;
    }),
             0);
}

TEST_CASE(simulator_numbers_no_integer_can_hold_are_refused) {
    // Simulator specs with numbers no integer can hold are refused (the conversion would be UB).
    for (const char* bad : {R"({"devices": [{"memory_total": -1}]})", R"({"devices": [{"minor_number": 1e20}]})",
                            R"({"devices": [{"memory_total": 1.5}]})", R"({"init_error": -3, "devices": []})"}) {
        CHECK_EQ(in_child([bad] {
            const std::string spec = "/tmp/flink-gpu-test-bad-number-" + std::to_string(getpid()) + ".json";
            std::ofstream(spec) << bad;
            setenv("FLINK_GPU_SIM_SPEC", spec.c_str(), 1);
            Status s;
            const NvmlLibrary* lib = NvmlLibrary::acquire(simulator(), &s);
            std::remove(spec.c_str());
            return lib == nullptr && s.nvml_code == NVML_ERROR_UNKNOWN ? 0 : 1;
        }),
                 0);
    }
}

TEST_CASE(a_v1_pci_query_reads_the_legacy_bus_id) {
    // A driver with only nvmlDeviceGetPciInfo (v1): it fills the old struct, whose bus id is the
    // first member (busIdLegacy in today's nvml.h), not the 32-byte busId at the end.
    CHECK(!fake_nvml().empty());
    CHECK_EQ(in_child([] {
        Status s;
        const NvmlLibrary* lib = NvmlLibrary::acquire(fake_nvml(), &s);
        if (lib == nullptr) return 1;
        Enumeration e;
        if (!enumerate_devices(*lib, &e).ok() || e.devices.size() != 1) return 2;
        if (e.devices[0].pci_bus_id != std::string("0000:3B:00.0")) return 3;
        return 0;
    }),
             0);
}

TEST_CASE(a_library_forking_inside_nvml_init_does_not_deadlock) {
    // A library that forks inside nvmlInit (a driver running nvidia-modprobe): our fork handlers
    // run in that thread while it is inside acquire(), which must not deadlock.
    CHECK_EQ(in_child([] {
        alarm(10);  // a deadlock kills the child: in_child reports 100
        setenv("FAKE_NVML_FORK_IN_INIT", "1", 1);
        Status s;
        const NvmlLibrary* lib = NvmlLibrary::acquire(fake_nvml(), &s);
        if (lib == nullptr) return 1;
        if (NvmlLibrary::acquire(fake_nvml(), &s) != lib) return 2;
        // and a child forked afterwards initialises again and works
        return in_child([] {
            Status cs;
            const NvmlLibrary* again = NvmlLibrary::acquire(fake_nvml(), &cs);
            Enumeration e;
            return again != nullptr && enumerate_devices(*again, &e).ok() && e.devices.size() == 1 ? 0 : 3;
        });
    }),
             0);
}

TEST_CASE(a_fork_during_another_threads_nvml_init_waits_for_it) {
    // Another thread forks while this one is inside nvmlInit: the fork waits until initialisation is
    // over, so the child does not inherit the library's state lock held and hang in its own nvmlInit.
    CHECK_EQ(in_child([] {
        alarm(10);
        setenv("FAKE_NVML_SLOW_INIT_MS", "500", 1);
        std::thread init([] {
            Status s;
            NvmlLibrary::acquire(fake_nvml(), &s);
        });
        usleep(100 * 1000);  // the init thread is inside nvmlInit now
        const int child = in_child([] {
            alarm(10);
            unsetenv("FAKE_NVML_SLOW_INIT_MS");
            Status cs;
            return NvmlLibrary::acquire(fake_nvml(), &cs) != nullptr ? 0 : 1;
        });
        init.join();
        return child;
    }),
             0);
}

TEST_CASE(memory_info_refused_leaves_only_memory_total_absent) {
    // Memory info answers NO_PERMISSION (an unprivileged caller on a MIG-enabled GPU, per nvml.h):
    // the GPU is still listed, only memory.total is absent. nvidia-smi and the stock script list it.
    CHECK_EQ(in_child([] {
        setenv("FAKE_NVML_MEMORY_NO_PERMISSION", "1", 1);
        Status s;
        const NvmlLibrary* lib = NvmlLibrary::acquire(fake_nvml(), &s);
        if (lib == nullptr) return 1;
        Enumeration e;
        if (!enumerate_devices(*lib, &e).ok()) return 2;
        if (e.devices.size() != 1 || !e.skipped.empty()) return 3;
        if (e.devices[0].memory_total.has_value()) return 4;
        if (e.devices[0].pci_bus_id != std::string("0000:3B:00.0")) return 5;
        return 0;
    }),
             0);
}

TEST_CASE(persistence_mode_is_read_per_gpu_and_unknown_where_the_driver_cannot_say) {
    CHECK_EQ(with_spec(simulator(), R"({"devices": [{}, {"persistence_mode": "disabled"},
                 {"not_supported": ["persistence_mode"]}, {"no_permission": ["persistence_mode"]},
                 {"persistence_mode": "disabled", "mig": {"mode": "enabled", "instances": [{"slot": 1}]}}]})",
                       [](const NvmlLibrary& lib) {
        Enumeration e;
        CHECK(enumerate_devices(lib, &e).ok());
        CHECK_EQ(e.devices.size(), std::size_t{5});
        CHECK(e.skipped.empty());  // an unanswered persistence mode never skips a GPU
        CHECK(e.devices[0].persistence_mode == std::optional<bool>(true));
        CHECK(e.devices[1].persistence_mode == std::optional<bool>(false));
        CHECK(!e.devices[2].persistence_mode.has_value());
        CHECK(!e.devices[3].persistence_mode.has_value());
        CHECK_EQ(e.devices[4].index, std::string("4:1"));  // a unit: its GPU's mode
        CHECK(e.devices[4].persistence_mode == std::optional<bool>(false));
    }),
             0);
    // A driver without nvmlDeviceGetPersistenceMode: unknown.
    CHECK_EQ(with_spec(fake_nvml(), "{}",
                       [](const NvmlLibrary& lib) {
        CHECK(lib.api().device_get_persistence_mode == nullptr);
        Enumeration e;
        CHECK(enumerate_devices(lib, &e).ok());
        CHECK(!e.devices.empty() && !e.devices[0].persistence_mode.has_value());
    }),
             0);
}

int main(int argc, char** argv) {
    if (simulator().empty()) return 2;  // FLINK_GPU_TEST_SIMULATOR names the simulator
    return check::run(argc, argv);
}
