#include "nvml_deadline.hpp"

#include "glibc_compat.hpp"
#include "gpu_choice.hpp"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <new>
#include <utility>

namespace flinkgpu {
namespace {

long long now_ns() {
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
}

std::string duration_text(double seconds) {
    char buf[48];
    if (seconds < 0.9995) {
        std::snprintf(buf, sizeof buf, "%.0f ms", std::max(0.0, seconds * 1000.0));
    } else {
        const double tenths = std::round(seconds * 10.0) / 10.0;
        std::snprintf(buf, sizeof buf, tenths == std::floor(tenths) ? "%.0f s" : "%.1f s", tenths);
    }
    return buf;
}

// What a worker and its caller share; the worker holds it for as long as it runs, so an abandoned
// worker writes only here. Its in-flight call is atomics (set before every NVML call, cheap); the
// rest is under `mutex`.
class Block final : public ReadMonitor {
public:
    Block() {
        pthread_condattr_t attr;
        pthread_condattr_init(&attr);
        pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);  // a wall-clock step neither shortens nor extends a wait
        pthread_cond_init(&cond_, &attr);
        pthread_condattr_destroy(&attr);
    }
    ~Block() override {
        pthread_cond_destroy(&cond_);
        pthread_mutex_destroy(&mutex_);
    }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;

    void calling(int gpu, const char* function) noexcept override {
        since_ns_.store(now_ns(), std::memory_order_relaxed);
        gpu_.store(gpu, std::memory_order_relaxed);
        function_.store(function, std::memory_order_release);
    }
    void counted(unsigned count) noexcept override {
        pthread_mutex_lock(&mutex_);
        count_ = count;
        count_known_ = true;
        pthread_mutex_unlock(&mutex_);
    }
    bool skip(unsigned gpu) noexcept override {
        pthread_mutex_lock(&mutex_);
        const bool skip = abandoned_ || std::find(skipped_.begin(), skipped_.end(), gpu) != skipped_.end();
        pthread_mutex_unlock(&mutex_);
        return skip;
    }
    bool gpu_read(std::vector<DeviceState>* states) noexcept override {
        pthread_mutex_lock(&mutex_);
        bool go_on = !abandoned_;
        if (go_on) {
            try {
                for (DeviceState& s : *states) read_.push_back(std::move(s));
            } catch (...) {
                go_on = false;
                job_status_ =
                    nvml_failure(NVML_ERROR_MEMORY, "query_states", "Out of memory while reading the GPUs' state.");
            }
        }
        pthread_mutex_unlock(&mutex_);
        return go_on;
    }

    // The worker's end: wakes the caller, if it still waits.
    void finish(Status status) noexcept {
        pthread_mutex_lock(&mutex_);
        if (job_status_.ok()) job_status_ = std::move(status);
        done_ = true;
        function_.store(nullptr, std::memory_order_release);
        pthread_cond_signal(&cond_);
        pthread_mutex_unlock(&mutex_);
    }

    bool abandoned() noexcept {
        pthread_mutex_lock(&mutex_);
        const bool a = abandoned_;
        pthread_mutex_unlock(&mutex_);
        return a;
    }

    // Waits until the worker finishes or `deadline_ns`; false when it did not finish, and then it is
    // abandoned (its later reads go nowhere).
    bool wait(long long deadline_ns) noexcept {
        timespec until{};
        until.tv_sec = static_cast<time_t>(deadline_ns / 1000000000LL);
        until.tv_nsec = static_cast<long>(deadline_ns % 1000000000LL);
        pthread_mutex_lock(&mutex_);
        while (!done_) {
            if (pthread_cond_timedwait(&cond_, &mutex_, &until) != 0 && !done_) {
                abandoned_ = true;
                break;
            }
        }
        const bool done = done_;
        pthread_mutex_unlock(&mutex_);
        return done;
    }

    // The call in flight now: false when there is none (the worker finished, or is between calls of
    // an abandoned read that no longer matters).
    bool in_flight(Stall* stall) const noexcept {
        const char* function = function_.load(std::memory_order_acquire);
        if (function == nullptr) return false;
        stall->gpu = gpu_.load(std::memory_order_relaxed);
        try {
            stall->function = function;
        } catch (...) {
            stall->function.clear();
        }
        stall->seconds = static_cast<double>(now_ns() - since_ns_.load(std::memory_order_relaxed)) / 1e9;
        return true;
    }

    // Under the mutex: what the caller takes once the wait is over.
    template <typename Fn>
    void locked(Fn fn) noexcept {
        pthread_mutex_lock(&mutex_);
        fn();
        pthread_mutex_unlock(&mutex_);
    }

    std::function<void(Block&)> job;  // set before the worker starts, then only the worker's
    std::vector<unsigned> skipped_;   // GPUs not to read: an earlier read is stuck on them
    std::vector<DeviceState> read_;
    Status job_status_;
    unsigned count_ = 0;
    bool count_known_ = false;

private:
    pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond_;
    bool done_ = false;
    bool abandoned_ = false;
    std::atomic<int> gpu_{kLibrary};
    std::atomic<const char*> function_{nullptr};
    std::atomic<long long> since_ns_{0};

public:
    std::atomic<int> refs{1};  // BlockRef's count: the caller, the worker, the stuck list
};

// A counted reference to a Block (std::shared_ptr would make the binaries need glibc 2.32's
// __libc_single_threaded, beyond manylinux_2_28: glibc_compat.hpp).
class BlockRef {
public:
    BlockRef() = default;
    explicit BlockRef(Block* b) : p_(b) {}
    BlockRef(const BlockRef& o) : p_(o.p_) {
        if (p_ != nullptr) p_->refs.fetch_add(1, std::memory_order_relaxed);
    }
    BlockRef(BlockRef&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    BlockRef& operator=(BlockRef o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    ~BlockRef() {
        if (p_ != nullptr && p_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
    }
    void swap(BlockRef& o) noexcept { std::swap(p_, o.p_); }
    Block* operator->() const noexcept { return p_; }
    Block& operator*() const noexcept { return *p_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }

private:
    Block* p_ = nullptr;
};

// A worker thread, kept for the next read while idle (starting a thread per read would cost more than
// the read itself). It runs one job at a time; after a job it missed the deadline of, it ends.
struct Worker {
    pthread_mutex_t mutex = PTHREAD_MUTEX_INITIALIZER;
    pthread_cond_t cond = PTHREAD_COND_INITIALIZER;
    BlockRef job;  // the next job, under `mutex`
};
constexpr std::size_t kMaxIdleWorkers = 2;  // more only while reads run concurrently

// The abandoned workers' blocks of this process (still inside NVML or about to leave it) and the idle
// workers. A forked child has none of their threads: its handler forgets them (leaking what a vanished
// thread may hold locked). The mutex is never held across an NVML call.
pthread_mutex_t g_stuck_mutex = PTHREAD_MUTEX_INITIALIZER;
std::vector<BlockRef>* g_stuck = new std::vector<BlockRef>();
std::vector<Worker*>* g_idle = new std::vector<Worker*>();

void stuck_prepare() { pthread_mutex_lock(&g_stuck_mutex); }
void stuck_parent() { pthread_mutex_unlock(&g_stuck_mutex); }
void stuck_child() {
    // the old ones leak on purpose
    g_stuck = new (std::nothrow) std::vector<BlockRef>();
    g_idle = new (std::nothrow) std::vector<Worker*>();
    pthread_mutex_unlock(&g_stuck_mutex);
}
struct StuckAtfork {
    StuckAtfork() { pthread_atfork(stuck_prepare, stuck_parent, stuck_child); }
};
const StuckAtfork g_stuck_atfork;

// The calls abandoned workers are stuck in now; finished ones are forgotten.
std::vector<Stall> stuck_calls() {
    std::vector<Stall> calls;
    pthread_mutex_lock(&g_stuck_mutex);
    try {
        if (g_stuck != nullptr) {
            std::vector<BlockRef>& stuck = *g_stuck;
            for (std::size_t i = 0; i < stuck.size();) {
                Stall s;
                if (!stuck[i]->in_flight(&s)) {
                    stuck.erase(stuck.begin() + static_cast<std::ptrdiff_t>(i));
                    continue;
                }
                s.earlier = true;
                calls.push_back(std::move(s));
                ++i;
            }
        }
    } catch (...) {
        pthread_mutex_unlock(&g_stuck_mutex);
        throw;
    }
    pthread_mutex_unlock(&g_stuck_mutex);
    return calls;
}

void remember_stuck(BlockRef block) {
    pthread_mutex_lock(&g_stuck_mutex);
    try {
        if (g_stuck != nullptr) g_stuck->push_back(std::move(block));
    } catch (...) {
        // forgotten: later reads will not know to skip its GPU, nothing worse
    }
    pthread_mutex_unlock(&g_stuck_mutex);
}

// Runs one job to its end; the job's block tells its caller.
void run_job(const BlockRef& block) noexcept {
    Status status;
    try {
        block->job(*block);
    } catch (const std::bad_alloc&) {
        status = nvml_failure(NVML_ERROR_MEMORY, "query_states", "Out of memory while reading NVML.");
    } catch (...) {
        status = failure(StatusCode::kInternal, "Unexpected error while reading NVML.");
    }
    block->finish(std::move(status));
}

// Back to the idle list, or false when it is full (or gone in a forked child: not ours then).
bool park(Worker* w) noexcept {
    bool parked = false;
    pthread_mutex_lock(&g_stuck_mutex);
    try {
        if (g_idle != nullptr && g_idle->size() < kMaxIdleWorkers) {
            g_idle->push_back(w);
            parked = true;
        }
    } catch (...) {
    }
    pthread_mutex_unlock(&g_stuck_mutex);
    return parked;
}

void* worker_main(void* arg) {
    auto* w = static_cast<Worker*>(arg);
    for (;;) {
        BlockRef block;
        pthread_mutex_lock(&w->mutex);
        while (!w->job) pthread_cond_wait(&w->cond, &w->mutex);
        block.swap(w->job);
        pthread_mutex_unlock(&w->mutex);
        run_job(block);
        // a job past its deadline: its caller has moved on to another worker; this one ends
        if (block->abandoned() || !park(w)) break;
    }
    pthread_cond_destroy(&w->cond);
    pthread_mutex_destroy(&w->mutex);
    delete w;
    return nullptr;
}

Status start_worker(Worker* w) {
    const int rc = start_nvml_thread(worker_main, w);
    if (rc != 0) {
        return failure(StatusCode::kOsError,
                       "Could not start a thread to read NVML with a deadline: " + errno_text(rc) + ".", rc);
    }
    return Status();
}

// Hands `block`'s job to an idle worker, or to a new one.
Status dispatch(const BlockRef& block) {
    Worker* w = nullptr;
    pthread_mutex_lock(&g_stuck_mutex);
    if (g_idle != nullptr && !g_idle->empty()) {
        w = g_idle->back();
        g_idle->pop_back();
    }
    pthread_mutex_unlock(&g_stuck_mutex);
    bool fresh = false;
    if (w == nullptr) {
        w = new Worker();
        fresh = true;
    }
    pthread_mutex_lock(&w->mutex);
    w->job = block;
    pthread_cond_signal(&w->cond);
    pthread_mutex_unlock(&w->mutex);
    if (fresh) {
        if (Status st = start_worker(w); !st.ok()) {
            delete w;
            return st;
        }
    }
    return Status();
}

long long deadline_after(double seconds) {
    const double ns = std::min(seconds, 1e9) * 1e9;  // ~31 years: "never" without overflowing
    return now_ns() + static_cast<long long>(ns);
}

// The state of GPU `gpu` that was not read: health unknown, saying why.
DeviceState unknown_state(unsigned gpu, const std::string& why, const CheckSet& enforced) {
    DeviceState s;
    s.index = std::to_string(gpu);
    s.nvml_index = gpu;
    s.readings.unknown = why;
    s.processes_read = false;
    judge_health(enforced, &s);
    return s;
}

// A value shared by a library-wide step's caller and its job, counted as BlockRef counts (no
// std::shared_ptr: glibc_compat.hpp): the job keeps it when its caller stops waiting.
template <typename T>
class Counted {
public:
    Counted() : p_(new Box()) {}
    Counted(const Counted& o) noexcept : p_(o.p_) { p_->refs.fetch_add(1, std::memory_order_relaxed); }
    Counted& operator=(const Counted&) = delete;
    ~Counted() {
        if (p_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
    }
    T* operator->() const noexcept { return &p_->value; }

private:
    struct Box {
        std::atomic<int> refs{1};
        T value;
    };
    Box* p_;
};

struct Opened {
    const NvmlLibrary* lib = nullptr;
    Status status;
};
struct Enumerated {
    Enumeration found;
    Status status;
};

// What run_within's answer means for a step on `library_path`: its job's own status once it returned.
Status step_status(bool returned, const Status& started, const Stall& stall, double timeout_seconds,
                   const std::string& library_path, const Status& job_status) {
    if (returned) return job_status;
    if (!started.ok()) return started;
    return stall_failure(stall, timeout_seconds, library_path);
}

}  // namespace

std::string stall_text(const Stall& stall, double timeout_seconds) {
    const std::string call = stall.function.empty() ? std::string("an NVML call") : stall.function;
    if (stall.earlier) return call + " has not returned for " + duration_text(stall.seconds);
    return call + " did not return within " + duration_text(timeout_seconds);
}

Status query_states_within(const NvmlLibrary& lib, pid_t owner, pid_t taskmanager, const CheckSet& enforced,
                           const ReadPlan& plan, double timeout_seconds, std::vector<DeviceState>* out,
                           std::vector<Stall>* stalls, bool* count_known, double spent_seconds) noexcept {
    try {
        out->clear();
        stalls->clear();
        *count_known = false;
        const long long deadline = deadline_after(std::max(timeout_seconds - spent_seconds, 0.001));
        *stalls = stuck_calls();
        for (const Stall& s : *stalls)
            if (s.gpu == ReadMonitor::kLibrary) return Status();  // a library-wide call is stuck: start nothing
        BlockRef block(new Block());
        for (const Stall& s : *stalls) block->skipped_.push_back(static_cast<unsigned>(s.gpu));
        const ReadPlan read_plan = plan;
        const CheckSet checks = enforced;
        // `lib` lives for the life of the process (nvml_loader.hpp); the rest is copied into the job
        block->job = [&lib, owner, taskmanager, checks, read_plan](Block& b) {
            std::vector<DeviceState> unused;
            const Status st = query_states(lib, owner, taskmanager, checks, &unused, read_plan, &b);
            b.locked([&] {
                if (b.job_status_.ok()) b.job_status_ = st;
            });
        };
        if (Status st = dispatch(block); !st.ok()) return st;
        const bool done = block->wait(deadline);
        Stall now;
        const bool stalled = !done && block->in_flight(&now);
        if (!done) remember_stuck(block);
        Status status;
        std::vector<DeviceState> read;
        unsigned count = 0;
        block->locked([&] {
            read.swap(block->read_);
            status = block->job_status_;
            count = block->count_;
            *count_known = block->count_known_;
        });
        if (done && !status.ok()) return status;
        if (stalled) stalls->push_back(now);
        if (!*count_known) return Status();
        // Every GPU in index order: read, or unknown with the reason.
        auto earlier = [&](unsigned gpu) -> const Stall* {
            for (const Stall& s : *stalls)
                if (s.earlier && s.gpu == static_cast<int>(gpu)) return &s;
            return nullptr;
        };
        std::string not_reached, in_flight;
        if (stalled) {
            in_flight = stall_text(now, timeout_seconds);
            // a driver serialises calls on its lock: a call stuck since before may be what this one waits for
            for (const Stall& s : *stalls) {
                if (!s.earlier) continue;
                in_flight += " (behind " +
                             (s.gpu == ReadMonitor::kLibrary ? std::string() : "GPU " + std::to_string(s.gpu) + "'s ") +
                             s.function + ", which has not returned for " + duration_text(s.seconds) + ")";
                break;
            }
            not_reached =
                "not read: " +
                (now.gpu == ReadMonitor::kLibrary ? std::string() : "GPU " + std::to_string(now.gpu) + "'s ") +
                in_flight;
        }
        out->reserve(read.size() + count);
        std::size_t next = 0;
        for (unsigned gpu = 0; gpu < count; ++gpu) {
            bool any = false;
            while (next < read.size() && read[next].nvml_index == gpu) {
                out->push_back(std::move(read[next++]));
                any = true;
            }
            if (any) continue;
            if (const Stall* s = earlier(gpu)) {
                out->push_back(unknown_state(gpu, stall_text(*s, timeout_seconds), enforced));
            } else if (stalled && now.gpu == static_cast<int>(gpu)) {
                out->push_back(unknown_state(gpu, in_flight, enforced));
            } else if (!done) {
                out->push_back(unknown_state(gpu, not_reached.empty() ? "not read in time" : not_reached, enforced));
            }
        }
        return Status();
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "query_states", "Out of memory while reading the GPUs' state.");
    }
}

bool run_within(double timeout_seconds, const char* function, std::function<void()> job, Stall* stall,
                Status* status) noexcept {
    try {
        *status = Status();
        stall->function.clear();
        const long long deadline = deadline_after(timeout_seconds);
        for (Stall& s : stuck_calls()) {
            if (s.gpu != ReadMonitor::kLibrary) continue;
            *stall = std::move(s);  // the same step is still stuck from before: start no other
            return false;
        }
        BlockRef block(new Block());
        block->job = [job = std::move(job)](Block&) { job(); };
        // in flight from now: a deadline that passes before the worker even starts is a stall of the
        // job, never "it finished"
        block->calling(ReadMonitor::kLibrary, function);
        if (Status st = dispatch(block); !st.ok()) {
            *status = std::move(st);
            return false;
        }
        if (block->wait(deadline)) return true;
        if (!block->in_flight(stall)) return true;  // it finished just now
        remember_stuck(block);
        return false;
    } catch (const std::bad_alloc&) {
        *status = nvml_failure(NVML_ERROR_MEMORY, function, "Out of memory while reading NVML.");
        return false;
    }
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

bool nvml_call_outstanding() noexcept {
    try {
        return !stuck_calls().empty();
    } catch (...) {
        return true;
    }
}

Status stall_failure(const Stall& stall, double timeout_seconds, const std::string& library_path) noexcept {
    const char* function = stall.function.empty() ? "nvmlInit_v2" : stall.function.c_str();
    try {
        return nvml_failure(NVML_ERROR_TIMEOUT, function,
                            "NVML did not answer: " + stall_text(stall, timeout_seconds) + " (library '" +
                                library_path + "', timeout " + duration_text(timeout_seconds) +
                                "). The NVIDIA driver may hang: check dmesg for Xid errors and nvidia-smi; this "
                                "process calls NVML again only once the stalled call returns.");
    } catch (...) {
        return nvml_failure(NVML_ERROR_TIMEOUT, function, "NVML did not answer in time.");
    }
}

Status open_within(const std::string& library_path, double timeout_seconds, const NvmlLibrary** lib,
                   Stall* stall) noexcept {
    try {
        *lib = nullptr;
        const std::string path = NvmlLibrary::resolve_path(library_path);
        const Counted<Opened> opened;
        Status started;
        // the path is copied into the job: it may outlive this call
        const bool returned = run_within(timeout_seconds, "nvmlInit_v2", [opened, path] {
            opened->lib = NvmlLibrary::acquire(path, &opened->status);
        }, stall, &started);
        if (returned) *lib = opened->lib;
        if (!returned && started.ok() && !stall->earlier) NvmlLibrary::abandon_init();
        return step_status(returned, started, *stall, timeout_seconds, path, opened->status);
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "nvmlInit_v2", "Out of memory while loading NVML.");
    }
}

Status enumerate_within(const NvmlLibrary& lib, double timeout_seconds, Enumeration* found, Stall* stall) noexcept {
    try {
        const Counted<Enumerated> enumerated;
        Status started;
        // `lib` lives for the life of the process (nvml_loader.hpp)
        const bool returned = run_within(timeout_seconds, "the device enumeration", [enumerated, &lib] {
            enumerated->status = enumerate_devices(lib, &enumerated->found);
        }, stall, &started);
        if (returned) *found = std::move(enumerated->found);
        return step_status(returned, started, *stall, timeout_seconds, lib.path(), enumerated->status);
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "enumerate_devices", "Out of memory while enumerating the GPUs.");
    }
}

}  // namespace flinkgpu
