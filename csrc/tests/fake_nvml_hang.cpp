// A libnvidia-ml whose calls can hang, for the deadline tests (path in FLINK_GPU_TEST_FAKE_NVML_HANG):
// FAKE_NVML_GPUS GPUs (default 4) that answer only the count, handles and nvmlDeviceGetRemappedRows.
// While the file FAKE_NVML_HANG_FILE exists, the call FAKE_NVML_HANG_QUERY ("count", "init" or
// "remapped-rows", on GPU FAKE_NVML_HANG_GPU or every GPU when unset) blocks, as a wedged driver's
// does. fake_calls(query, gpu) counts the calls made (gpu -1 for count and init), for the tests to
// prove no call was repeated; a test reads it through dlopen(RTLD_NOLOAD) of the same path.
#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace {

std::atomic<int> g_calls[3][9];  // [init, count, remapped-rows][gpu + 1]

int query_id(const char* query) {
    if (std::strcmp(query, "init") == 0) return 0;
    if (std::strcmp(query, "count") == 0) return 1;
    return 2;
}

unsigned gpu_count() {
    const char* n = std::getenv("FAKE_NVML_GPUS");
    const unsigned count = n != nullptr ? static_cast<unsigned>(std::atoi(n)) : 4u;
    return count > 8 ? 8 : count;
}

// Blocks while the hang file exists, if `query` on `gpu` is the one to hang.
void maybe_hang(const char* query, int gpu) {
    g_calls[query_id(query)][gpu + 1].fetch_add(1);
    const char* file = std::getenv("FAKE_NVML_HANG_FILE");
    const char* which = std::getenv("FAKE_NVML_HANG_QUERY");
    const char* on = std::getenv("FAKE_NVML_HANG_GPU");
    if (file == nullptr || which == nullptr || std::strcmp(which, query) != 0) return;
    if (on != nullptr && on[0] != '\0' && std::atoi(on) != gpu) return;
    const timespec tick{0, 1000000};  // the "driver" polls; the tests wait on nothing but the calls' return
    while (access(file, F_OK) == 0) nanosleep(&tick, nullptr);
}

}  // namespace

FAKE_EXPORT int fake_calls(const char* query, int gpu) { return g_calls[query_id(query)][gpu + 1].load(); }

FAKE_EXPORT nvmlReturn_t nvmlInit_v2(void) {
    maybe_hang("init", -1);
    return NVML_SUCCESS;
}
FAKE_EXPORT const char* nvmlErrorString(nvmlReturn_t) { return "fake"; }
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int* count) {
    maybe_hang("count", -1);
    *count = gpu_count();
    return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t* device) {
    if (index >= gpu_count()) return NVML_ERROR_INVALID_ARGUMENT;
    *device = reinterpret_cast<nvmlDevice_t>(static_cast<std::uintptr_t>(index + 1));
    return NVML_SUCCESS;
}
FAKE_EXPORT nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int* corr, unsigned int* unc,
                                                   unsigned int* pending, unsigned int* failure) {
    maybe_hang("remapped-rows", static_cast<int>(reinterpret_cast<std::uintptr_t>(device)) - 1);
    *corr = *unc = *pending = *failure = 0;
    return NVML_SUCCESS;
}
