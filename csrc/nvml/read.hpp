// The state read (docs/design.md §4): every GPU's state now, judged by nvml/health.hpp. Point-in-time
// queries, no event loop. Every query is optional: an absent entry point, NOT_SUPPORTED,
// FUNCTION_NOT_FOUND or NO_PERMISSION is no finding (NO_PERMISSION on a process query makes the
// processes unknown).
#pragma once

#include "nvml/loader.hpp"
#include "nvml/state.hpp"

#include <sys/types.h>

#include <vector>

namespace flinkgpu {

// A device's memory in total, in use and free (bytes): nvmlDeviceGetMemoryInfo_v2, else (absent, or an answer
// that is no finding, as a stub of the symbol gives) the original query. Returns the NVML code of
// the query that answered, *function naming it (nullptr and NVML_ERROR_FUNCTION_NOT_FOUND when the
// driver has neither). Never throws.
struct MemoryReading {
    unsigned long long total = 0, used = 0, free = 0;
    bool reservation_apart = false;  // v2: `used` leaves out the driver's reservation (v1 counts it in)
};
int read_memory(const NvmlApi& api, nvmlDevice_t dev, MemoryReading* out, const char** function) noexcept;

// Watches a state read from another thread (nvml/deadline.hpp). The reading thread tells it each
// NVML call before making it, asks whether to skip a GPU (an earlier read is still stuck on it, or
// another thread reads it) and hands it each GPU's states as soon as they are read; `gpu_read` false:
// stop reading. `known_count` true: the GPU count is already known (*count), not read again.
class ReadMonitor {
public:
    static constexpr int kLibrary = -1;  // a call about the whole library, not one GPU
    virtual ~ReadMonitor() = default;
    virtual void calling(int gpu, const char* function) noexcept = 0;
    virtual bool known_count(unsigned* count) noexcept = 0;
    virtual void counted(unsigned count) noexcept = 0;
    virtual bool skip(unsigned gpu) noexcept = 0;
    virtual bool gpu_read(std::vector<DeviceState>* states) noexcept = 0;
};

// How long a GPU's InfoROM validity (nvmlDeviceValidateInforom, which reads the flash) is reused within a
// process before it is read again; a choice that finds nothing usable reads it again at once.
inline constexpr unsigned kInforomRecheckSeconds = 600;

// The state of every device (a MIG GPU's units in its place), in index order, judged with the
// checks `enforced`. A GPU whose handle or MIG layout NVML refuses now is one state, lost, with
// the refusing call (enumerate_devices skips it, or it went after the enumeration). `owner`: the
// claiming process; `taskmanager`: its TaskManager, 0 for none. Errors that concern the whole
// library fail the call. Never throws.
// With a `monitor`, each GPU's states go to it instead of `out` (which stays empty), and GPUs it
// says to skip are not read.
Status query_states(const NvmlLibrary& lib, pid_t owner, pid_t taskmanager, const CheckSet& enforced,
                    std::vector<DeviceState>* out, const ReadPlan& plan = ReadPlan(),
                    ReadMonitor* monitor = nullptr) noexcept;

}  // namespace flinkgpu
