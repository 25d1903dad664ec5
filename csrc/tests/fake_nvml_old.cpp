// A deliberately awkward libnvidia-ml for the loader tests (path in FLINK_GPU_TEST_FAKE_NVML):
//   * only the original nvmlDeviceGetPciInfo (v1) exists, which fills the old, shorter struct whose
//     first member is the 16-byte bus id (what nvml.h now calls busIdLegacy);
//   * nvmlInit_v2 fork()s and waits for the child, as a driver does when it runs nvidia-modprobe
//     to create missing device nodes (set FAKE_NVML_FORK_IN_INIT=1);
//   * nvmlDeviceGetMemoryInfo answers NO_PERMISSION, as NVML does for an unprivileged caller on a
//     MIG-enabled GPU (set FAKE_NVML_MEMORY_NO_PERMISSION=1);
//   * only the original nvmlDeviceGetComputeRunningProcesses (v1 struct) lists processes;
//   * nvmlInit_v2 appends the calling pid to the file FAKE_NVML_INIT_LOG, one line per call;
//   * nvmlInit_v2 holds an internal lock for FAKE_NVML_SLOW_INIT_MS milliseconds, as a real library
//     holds its own state lock while initialising: a child forked meanwhile inherits it locked.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <sys/wait.h>
#include <unistd.h>

#include <pthread.h>
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {
// The layout drivers before nvmlDeviceGetPciInfo_v2 filled.
struct PciInfoV1 {
    char busId[16];
    unsigned int domain, bus, device, pciDeviceId, pciSubSystemId;
};
int g_device = 0;
pthread_mutex_t g_state_lock = PTHREAD_MUTEX_INITIALIZER;
}  // namespace

FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void) {
    if (const char* log = std::getenv("FAKE_NVML_INIT_LOG"); log != nullptr) {
        if (FILE* f = std::fopen(log, "a")) {
            std::fprintf(f, "%d\n", static_cast<int>(getpid()));
            std::fclose(f);
        }
    }
    pthread_mutex_lock(&g_state_lock);
    const char* slow = std::getenv("FAKE_NVML_SLOW_INIT_MS");
    if (slow != nullptr) {
        const long ms = std::atol(slow);
        timespec ts{ms / 1000, (ms % 1000) * 1000000L};
        nanosleep(&ts, nullptr);
    }
    pthread_mutex_unlock(&g_state_lock);
    const char* fork_env = std::getenv("FAKE_NVML_FORK_IN_INIT");
    if (fork_env != nullptr && fork_env[0] == '1') {
        const pid_t pid = fork();
        if (pid < 0) return NVML_ERROR_OPERATING_SYSTEM;
        if (pid == 0) _exit(0);
        int status = 0;
        waitpid(pid, &status, 0);
    }
    return NVML_SUCCESS;
}

FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t) { return "fake"; }

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
    *count = 1;
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
    if (index != 0) return NVML_ERROR_INVALID_ARGUMENT;
    *device = reinterpret_cast<nvmlDevice_t>(&g_device);
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t, nvmlPciInfo_t* pci) {
    PciInfoV1 v1{};
    std::strcpy(v1.busId, "0000:3B:00.0");
    v1.bus = 0x3b;
    std::memcpy(static_cast<void*>(pci), &v1, sizeof v1);  // only the old, shorter layout
    return NVML_SUCCESS;
}

FAKE_EXPORT nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t, nvmlMemory_t* memory) {
    const char* env = std::getenv("FAKE_NVML_MEMORY_NO_PERMISSION");
    if (env != nullptr && env[0] == '1') return NVML_ERROR_NO_PERMISSION;
    memory->total = 1024;
    memory->free = 1024;
    memory->used = 0;
    return NVML_SUCCESS;
}

// Only the original process query (nvmlProcessInfo_v1_t): one process, pid 4242, 4096 bytes.
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetComputeRunningProcesses(nvmlDevice_t, unsigned int* count,
                                                              nvmlProcessInfo_v1_t* infos) {
    if (*count < 1) {
        *count = 1;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    infos[0].pid = 4242;
    infos[0].usedGpuMemory = 4096;
    *count = 1;
    return NVML_SUCCESS;
}
