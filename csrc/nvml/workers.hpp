// The threads that make NVML calls for their callers (nvml/deadline.hpp): a worker is kept for the next
// job while idle (starting a thread per read would cost more than the read itself) for at most
// kIdleWorkerSeconds, and runs one job at a time. A forked child has none of these threads and starts
// afresh.
#pragma once

#include "base/counted.hpp"
#include "base/status.hpp"

namespace flinkgpu {

// How long a worker thread waits idle for the next job before it ends: a burst of claims reuses it,
// and a process that claimed once keeps no NVML thread a while later (a fork() in a multi-threaded
// process is what Python 3.12 warns about, and PyFlink workers and DataLoaders fork).
inline constexpr double kIdleWorkerSeconds = 3.0;

// One job for a worker. Counted: its dispatcher and the worker each hold it, so a job whose caller
// stopped waiting lives on for as long as the worker runs it.
class WorkerJob : public Counted {
public:
    virtual ~WorkerJob() = default;
    // The work, on the worker's thread; it may throw.
    virtual void run() = 0;
    // Its end, with run()'s failure if it threw: called once the worker is back on the idle list, so
    // that the caller it wakes finds that same worker idle for its next job.
    virtual void finish(Status status) noexcept = 0;
};

// Hands `job` to an idle worker, or to a new thread; kOsError when none could be started. May throw
// std::bad_alloc.
Status dispatch(const Ref<WorkerJob>& job);

// Starts `main(arg)` on a detached thread that makes NVML calls for its callers, with every signal
// blocked: they are for the process's own threads to take (a SIGTERM a thread waits for with sigwait).
// 0, or pthread_create's error. Never throws.
int start_nvml_thread(void* (*main)(void*), void* arg) noexcept;

// For the native tests only: sets the idle wait of workers that park from now on (kIdleWorkerSeconds
// until then); returns the one before. Never throws.
double set_idle_worker_seconds_for_tests(double seconds) noexcept;

}  // namespace flinkgpu
