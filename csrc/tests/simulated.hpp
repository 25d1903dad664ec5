// Test helper: runs checks against the NVML simulator configured by a JSON spec. NVML reads its
// configuration once per process, so each spec gets a forked child.
#pragma once

#include "base/pid_namespace.hpp"
#include "nvml/loader.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <string>

#include "tests/check.hpp"

namespace simulated {

inline std::string env(const char* name) {
    const char* p = std::getenv(name);
    return p ? p : "";
}

// Whether the simulator's pids, host pids as a driver's are, name this test's processes: it runs in the
// initial pid namespace (in a container they are other processes: host/process_tree.hpp).
inline bool pids_are_hosts() {
    std::uint64_t ns = 0;
    return flinkgpu::read_own_pid_namespace_inode(&ns) && ns == flinkgpu::kInitialPidNamespace;
}

// Runs `body` against `library` in a forked child (NVML reads its configuration once per process),
// after `setup` there; the child's failed checks come back as its exit status (98: the library could
// not be acquired; 100: the harness).
inline int in_child(const std::string& library, const std::function<void(const flinkgpu::NvmlLibrary&)>& body,
                    const std::function<void()>& setup = [] {}) {
    std::fflush(nullptr);
    const pid_t pid = fork();
    if (pid == 0) {
        setup();
        flinkgpu::Status st;
        const flinkgpu::NvmlLibrary* lib = flinkgpu::NvmlLibrary::acquire(library, &st);
        if (lib == nullptr) {
            std::fprintf(stderr, "acquire: %s\n", st.message.c_str());
            _exit(98);
        }
        body(*lib);
        _exit(check::failures());
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100;
}

// Runs `body` against `library` with the simulator spec `json` in a forked child (in_child; 99: no
// spec file could be written).
inline int with_spec(const std::string& library, const std::string& json,
                     const std::function<void(const flinkgpu::NvmlLibrary&)>& body) {
    char path[] = "/tmp/flink-gpu-sim-test-XXXXXX";
    const int fd = mkstemp(path);
    if (fd < 0) return 99;
    close(fd);
    std::ofstream(path) << json;
    const int status = in_child(library, body, [&] { setenv("FLINK_GPU_SIM_SPEC", path, 1); });
    unlink(path);
    return status;
}

}  // namespace simulated
