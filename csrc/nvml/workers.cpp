#include "nvml/workers.hpp"

#include "base/event.hpp"
#include "base/glibc_compat.hpp"

#include <nvml.h>
#include <pthread.h>
#include <signal.h>

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
    for (;;) {
        const Ref<WorkerJob> job = next_job(w.get());
        if (!job || !run_job(job, w)) break;
    }
    return nullptr;
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
