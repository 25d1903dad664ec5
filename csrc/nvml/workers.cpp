#include "nvml/workers.hpp"

#include "base/event.hpp"
#include "base/glibc_compat.hpp"

#include <nvml.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <new>
#include <utility>
#include <vector>

namespace flinkgpu {
namespace {

// A worker thread. Counted: its thread and whoever hands it a job (the idle list's reference, taken by
// dispatch) each hold it, so that a dispatcher still inside `handed.set()` never touches a worker that
// has ended.
struct Worker : Counted {
    Ref<WorkerJob> job;  // the next job: written by its dispatcher before `handed` is set
    Event handed;
    pid_t tid = 0;  // set by the thread before it is first parked, read by dispatchers after that
    // Written by its dispatchers (while it is off the idle list): the CPU it was pinned to (-1: none), and
    // g_unpins then (an unpin since may have widened it).
    int cpu = -1;
    unsigned long pinned_at = 0;
};
constexpr std::size_t kMaxIdleWorkers = 2;  // more only while jobs run concurrently

std::atomic<long long> g_idle_worker_ns{static_cast<long long>(kIdleWorkerSeconds * 1e9)};

// The idle workers of this process. A forked child has none of their threads: its handler forgets them
// (leaking what a vanished thread may hold locked).
pthread_mutex_t g_idle_mutex = PTHREAD_MUTEX_INITIALIZER;
std::vector<Ref<Worker>>* g_idle = new std::vector<Ref<Worker>>();

void idle_prepare() { pthread_mutex_lock(&g_idle_mutex); }
void idle_parent() { pthread_mutex_unlock(&g_idle_mutex); }
void idle_child() {
    g_idle = new (std::nothrow) std::vector<Ref<Worker>>();  // the old one leaks on purpose
    pthread_mutex_unlock(&g_idle_mutex);
}
struct IdleAtfork {
    IdleAtfork() { pthread_atfork(idle_prepare, idle_parent, idle_child); }
};
const IdleAtfork g_idle_atfork;

// Unpins so far: a worker pinned before the last one is pinned again when it is next taken, whichever
// worker that unpin was about (it may be back on the idle list, or pinned anew, by then).
std::atomic<unsigned long> g_unpins{0};

void widen(pid_t tid) noexcept {
    cpu_set_t callers;
    if (sched_getaffinity(0, sizeof callers, &callers) == 0) (void)sched_setaffinity(tid, sizeof callers, &callers);
}

// Back on the idle list, or false when it is full (or gone in a forked child: not ours then).
bool park(const Ref<Worker>& w) noexcept {
    bool parked = false;
    pthread_mutex_lock(&g_idle_mutex);
    try {
        if (g_idle != nullptr && g_idle->size() < kMaxIdleWorkers) {
            g_idle->push_back(w);
            parked = true;
        }
    } catch (...) {
        // not parked: the thread ends
    }
    pthread_mutex_unlock(&g_idle_mutex);
    return parked;
}

// Off the idle list after its idle time: true, or false when a dispatcher took it meanwhile (a job is
// on its way). The list's reference is dropped here; the thread's own keeps the worker.
bool unpark(const Worker* w) noexcept {
    bool found = false;
    pthread_mutex_lock(&g_idle_mutex);
    if (g_idle != nullptr) {
        const auto it =
            std::find_if(g_idle->begin(), g_idle->end(), [w](const Ref<Worker>& idle) { return idle.get() == w; });
        if (it != g_idle->end()) {
            g_idle->erase(it);
            found = true;
        }
    }
    pthread_mutex_unlock(&g_idle_mutex);
    return found;
}

// Runs one job to its end. The worker is parked first and the caller woken after: the caller's next
// job finds this same worker idle instead of starting or waking another.
bool run_job(const Ref<WorkerJob>& job, const Ref<Worker>& w) noexcept {
    Status status;
    try {
        job->run();
    } catch (const std::bad_alloc&) {
        status = nvml_failure(NVML_ERROR_MEMORY, "query_states", "Out of memory while reading NVML.");
    } catch (...) {
        status = failure(StatusCode::kInternal, "Unexpected error while reading NVML.");
    }
    const bool parked = park(w);
    job->finish(std::move(status));
    return parked;
}

// The next job, or an empty one when the worker has been idle for its idle time (and is off the idle
// list).
Ref<WorkerJob> next_job(Worker* w) noexcept {
    Ref<WorkerJob> job;
    if (!w->handed.wait_until(monotonic_ns() + g_idle_worker_ns.load(std::memory_order_relaxed))) {
        if (unpark(w)) return job;
        w->handed.wait_until(LLONG_MAX);  // a dispatcher took it off the list: its job is coming
    }
    job.swap(w->job);
    w->handed.reset();  // before it is parked again, so before any dispatcher can hand it another
    return job;
}

void* worker_main(void* arg) {
    const Ref<Worker> w(static_cast<Worker*>(arg));  // the thread's own reference
    w->tid = static_cast<pid_t>(syscall(SYS_gettid));
    for (;;) {
        const Ref<WorkerJob> job = next_job(w.get());
        if (!job || !run_job(job, w)) break;
    }
    return nullptr;
}

// An idle worker is woken on the CPU its caller runs on, which then only waits for it: a wake-up across
// CPUs costs an inter-processor interrupt and the other CPU's wake from idle (tens of µs on a virtual
// machine, more than the instant simulator's read), a switch on one CPU a few µs. One
// sched_setaffinity when the caller has moved (or an unpin came) since. Where it cannot be pinned (a
// CPU past CPU_SETSIZE, a host whose CPUs a cpu_set_t cannot hold, a cpuset without it), it may run on
// any CPU its caller may.
void pin_to_caller(Worker* w, WorkerJob* job) noexcept {
    if (w->tid == 0) return;
    const int cpu = sched_getcpu();
    const unsigned long unpins = g_unpins.load(std::memory_order_acquire);  // before the pin: see g_unpins
    if (cpu >= 0 && cpu == w->cpu && unpins == w->pinned_at) {
        job->pinned_worker = w->tid;
        return;
    }
    cpu_set_t mask;
    // the caller's CPUs must be readable (into a cpu_set_t) for an unpin to give them back
    bool pinned = cpu >= 0 && cpu < CPU_SETSIZE && sched_getaffinity(0, sizeof mask, &mask) == 0;
    if (pinned) {
        CPU_ZERO(&mask);
        CPU_SET(cpu, &mask);
        pinned = sched_setaffinity(w->tid, sizeof mask, &mask) == 0;
    }
    if (pinned) {
        w->cpu = cpu;
        w->pinned_at = unpins;
        job->pinned_worker = w->tid;
        return;
    }
    if (w->cpu != -1) widen(w->tid);  // no pin from before stays
    w->cpu = -1;
}

}  // namespace

Status dispatch(const Ref<WorkerJob>& job) {
    Ref<Worker> w;
    pthread_mutex_lock(&g_idle_mutex);
    if (g_idle != nullptr && !g_idle->empty()) {
        w.swap(g_idle->back());  // the list's reference, kept here until the worker is woken
        g_idle->pop_back();
    }
    pthread_mutex_unlock(&g_idle_mutex);
    if (w) {
        pin_to_caller(w.get(), job.get());
        w->job = job;
        w->handed.set();
        return Status();
    }
    w = Ref<Worker>(new Worker());
    w->job = job;  // before its thread exists
    w->handed.set();
    Ref<Worker> thread_ref(w);  // the thread's
    const int rc = start_nvml_thread(worker_main, thread_ref.get());
    if (rc != 0)
        return failure(StatusCode::kOsError,
                       "Could not start a thread to read NVML with a deadline: " + errno_text(rc) + ".", rc);
    thread_ref.release();  // worker_main adopts it
    return Status();
}

void unpin(const WorkerJob& job) noexcept {
    if (job.pinned_worker == 0) return;
    widen(job.pinned_worker);
    g_unpins.fetch_add(1, std::memory_order_release);  // after the widening: see g_unpins
}

int start_nvml_thread(void* (*main)(void*), void* arg) noexcept {
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    pthread_t thread;
    const int rc = pthread_create(&thread, &attr, main, arg);
    pthread_attr_destroy(&attr);
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return rc;
}

double set_idle_worker_seconds_for_tests(double seconds) noexcept {
    return static_cast<double>(g_idle_worker_ns.exchange(static_cast<long long>(seconds * 1e9))) / 1e9;
}

}  // namespace flinkgpu
