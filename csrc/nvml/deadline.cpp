#include "nvml/deadline.hpp"

#include "base/glibc_compat.hpp"
#include "nvml/health.hpp"

#include <linux/futex.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
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

timespec timespec_of(long long ns) {
    timespec ts{};
    ts.tv_sec = static_cast<time_t>(ns / 1000000000LL);
    ts.tv_nsec = static_cast<long>(ns % 1000000000LL);
    return ts;
}

// One thread waits until another sets it: a futex word, so that a hand-off costs one wait and one wake
// (a condition variable's waiter takes its mutex back marked contended, and the unlock after it makes
// one more system call that wakes nobody). The setter wakes only a waiter that sleeps. Deadlines are
// CLOCK_MONOTONIC (FUTEX_WAIT_BITSET): a wall-clock step neither shortens nor extends a wait. Whoever
// calls set() keeps the event alive until it returns.
class Event {
public:
    // Whether it is set, once set or at `until_ns`.
    bool wait_until(long long until_ns) noexcept {
        for (;;) {
            std::uint32_t state = state_.load(std::memory_order_acquire);
            if (state == kSet) return true;
            if (state == kUnset && !state_.compare_exchange_strong(state, kWaiting, std::memory_order_acquire))
                continue;  // set meanwhile: look again
            if (now_ns() >= until_ns) return state_.load(std::memory_order_acquire) == kSet;
            const timespec until = timespec_of(until_ns);
            // returns when woken, at the deadline, on a signal, or at once when no longer kWaiting
            syscall(SYS_futex, word(), FUTEX_WAIT_BITSET_PRIVATE, kWaiting, &until, nullptr, FUTEX_BITSET_MATCH_ANY);
        }
    }
    void set() noexcept {
        if (state_.exchange(kSet, std::memory_order_acq_rel) == kWaiting)
            syscall(SYS_futex, word(), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
    }
    // For the next wait; only while no set() can come (a worker's own, before it is parked again).
    void reset() noexcept { state_.store(kUnset, std::memory_order_relaxed); }

private:
    static constexpr std::uint32_t kUnset = 0, kWaiting = 1, kSet = 2;
    static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t), "a futex word");
    std::uint32_t* word() noexcept { return reinterpret_cast<std::uint32_t*>(&state_); }  // for the kernel only
    std::atomic<std::uint32_t> state_{kUnset};
};

constexpr unsigned kNoGpu = ~0u;

// What a worker and its caller share; the worker holds it for as long as it runs, so an abandoned
// worker writes only here. Its in-flight call is atomics (set before every NVML call, cheap); the
// rest is under `mutex`. A state read's block reads the GPUs from `first_` up to `limit_`: a caller
// that hands the GPUs after a stuck one to another worker lowers `limit_` (hand_off).
class Block final : public ReadMonitor {
public:
    Block() = default;
    ~Block() override { pthread_mutex_destroy(&mutex_); }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;

    void calling(int gpu, const char* function) noexcept override {
        since_ns_.store(now_ns(), std::memory_order_relaxed);
        gpu_.store(gpu, std::memory_order_relaxed);
        function_.store(function, std::memory_order_release);
    }
    bool known_count(unsigned* count) noexcept override {
        if (!given_count_) return false;  // set before the worker starts
        *count = count_;
        return true;
    }
    void counted(unsigned count) noexcept override {
        pthread_mutex_lock(&mutex_);
        count_ = count;
        count_known_ = true;
        pthread_mutex_unlock(&mutex_);
    }
    bool skip(unsigned gpu) noexcept override {
        pthread_mutex_lock(&mutex_);
        const bool skip = abandoned_ || gpu < first_ || gpu >= limit_ ||
                          std::find(skipped_.begin(), skipped_.end(), gpu) != skipped_.end();
        if (!skip) current_ = gpu;
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

    // The worker's end: wakes the caller, if it still waits, after unlocking (the woken caller finds
    // the mutex free); the worker's own reference keeps the block alive until then.
    void finish(Status status) noexcept {
        pthread_mutex_lock(&mutex_);
        if (job_status_.ok()) job_status_ = std::move(status);
        done_ = true;
        function_.store(nullptr, std::memory_order_release);
        pthread_mutex_unlock(&mutex_);
        finished_.set();
    }

    // Waits until the worker finishes or `until_ns`; whether it finished.
    bool wait_until(long long until_ns) noexcept { return finished_.wait_until(until_ns); }

    // The deadline is over: false when the worker did not finish, and then it is abandoned (its later
    // reads go nowhere).
    bool settle() noexcept {
        pthread_mutex_lock(&mutex_);
        if (!done_) abandoned_ = true;
        const bool done = done_;
        pthread_mutex_unlock(&mutex_);
        return done;
    }

    // When the worker has been inside one call on one GPU since `since_ns` or before, and GPUs after it
    // are left (below `count`), it keeps that GPU only: true with *from, the first GPU for another worker.
    bool hand_off(long long since_ns, unsigned count, unsigned* from) noexcept {
        pthread_mutex_lock(&mutex_);
        const int gpu = gpu_.load(std::memory_order_relaxed);
        const bool stuck = !done_ && function_.load(std::memory_order_acquire) != nullptr &&
                           gpu != ReadMonitor::kLibrary && static_cast<unsigned>(gpu) == current_ &&
                           since_ns_.load(std::memory_order_relaxed) <= since_ns && current_ + 1 < limit_ &&
                           current_ + 1 < count;
        if (stuck) {
            limit_ = current_ + 1;
            *from = limit_;
        }
        pthread_mutex_unlock(&mutex_);
        return stuck;
    }

    // When the call in flight on a GPU began (0: none, or a library-wide one): when to look again.
    long long gpu_call_since_ns() const noexcept {
        if (function_.load(std::memory_order_acquire) == nullptr) return 0;
        if (gpu_.load(std::memory_order_relaxed) == ReadMonitor::kLibrary) return 0;
        return since_ns_.load(std::memory_order_relaxed);
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

    // Set before the worker starts, then only read (job: only the worker's).
    std::function<void(Block&)> job;
    pid_t pinned_worker = 0;         // the worker's thread, pinned to its caller's CPU (pin_to_caller); 0: not pinned
    std::vector<unsigned> skipped_;  // GPUs not to read: an earlier read is stuck on them
    unsigned first_ = 0;             // the first GPU to read
    bool given_count_ = false;       // count_ is given: a block handed the rest of a read

    // Under the mutex.
    std::vector<DeviceState> read_;
    Status job_status_;
    unsigned count_ = 0;
    bool count_known_ = false;
    unsigned limit_ = kNoGpu;  // the GPUs from here on are another block's

private:
    pthread_mutex_t mutex_ = PTHREAD_MUTEX_INITIALIZER;
    Event finished_;
    bool done_ = false;
    bool abandoned_ = false;
    unsigned current_ = kNoGpu;  // the GPU being read (skip() said to read it)
    std::atomic<int> gpu_{kLibrary};
    std::atomic<const char*> function_{nullptr};
    std::atomic<long long> since_ns_{0};

public:
    std::atomic<int> refs{1};  // BlockRef's count: the caller, the worker, the stuck list
};

// A counted reference (std::shared_ptr would make the binaries need glibc 2.32's
// __libc_single_threaded, beyond manylinux_2_28: base/glibc_compat.hpp) to a T with an atomic `refs`.
template <typename T>
class Ref {
public:
    Ref() = default;
    explicit Ref(T* p) : p_(p) {}
    Ref(const Ref& o) : p_(o.p_) {
        if (p_ != nullptr) p_->refs.fetch_add(1, std::memory_order_relaxed);
    }
    Ref(Ref&& o) noexcept : p_(o.p_) { o.p_ = nullptr; }
    Ref& operator=(Ref o) noexcept {
        std::swap(p_, o.p_);
        return *this;
    }
    ~Ref() {
        if (p_ != nullptr && p_->refs.fetch_sub(1, std::memory_order_acq_rel) == 1) delete p_;
    }
    void swap(Ref& o) noexcept { std::swap(p_, o.p_); }
    T* get() const noexcept { return p_; }
    T* operator->() const noexcept { return p_; }
    T& operator*() const noexcept { return *p_; }
    explicit operator bool() const noexcept { return p_ != nullptr; }

private:
    T* p_ = nullptr;
};
using BlockRef = Ref<Block>;

// A worker thread, kept for the next read while idle (starting a thread per read would cost more than
// the read itself) for at most kIdleWorkerSeconds. It runs one job at a time. Counted: its thread and
// whoever hands it a job (the idle list's reference, taken by dispatch) each hold it, so that a
// dispatcher still inside `handed.set()` never touches a worker that has ended.
struct Worker {
    BlockRef job;  // the next job: written by its dispatcher before `handed` is set
    Event handed;
    std::atomic<int> refs{1};
    pid_t tid = 0;  // set by the thread before it is first parked, read by dispatchers after that
    // Written by its dispatchers (while it is off the idle list): the CPU it was pinned to (-1: none), and
    // g_unpins then (an unpin since may have widened it).
    int cpu = -1;
    unsigned long pinned_at = 0;
};
using WorkerRef = Ref<Worker>;
constexpr std::size_t kMaxIdleWorkers = 2;  // more only while reads run concurrently

std::atomic<long long> g_idle_worker_ns{static_cast<long long>(kIdleWorkerSeconds * 1e9)};

// The abandoned workers' blocks of this process (still inside NVML or about to leave it) and the idle
// workers. A forked child has none of their threads: its handler forgets them (leaking what a vanished
// thread may hold locked). The mutex is never held across an NVML call.
pthread_mutex_t g_stuck_mutex = PTHREAD_MUTEX_INITIALIZER;
std::vector<BlockRef>* g_stuck = new std::vector<BlockRef>();
std::vector<Worker*>* g_idle = new std::vector<Worker*>();  // each holds a reference of its worker

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

// Unpins so far: a worker pinned before the last one is pinned again when it is next taken, whichever
// worker that unpin was about (it may be back on the idle list, or pinned anew, by then).
std::atomic<unsigned long> g_unpins{0};

// The worker of a block that is abandoned may run on any CPU its caller may, as a thread it started
// would: pinned to one, a call that spins would keep that CPU from everything else scheduled there.
void widen(pid_t tid) noexcept {
    cpu_set_t callers;
    if (sched_getaffinity(0, sizeof callers, &callers) == 0) (void)sched_setaffinity(tid, sizeof callers, &callers);
}

void unpin(Block& block) noexcept {
    if (block.pinned_worker == 0) return;
    widen(block.pinned_worker);
    g_unpins.fetch_add(1, std::memory_order_release);  // after the widening: see g_unpins
}

void remember_stuck(BlockRef block) {
    unpin(*block);
    pthread_mutex_lock(&g_stuck_mutex);
    try {
        if (g_stuck != nullptr) g_stuck->push_back(std::move(block));
    } catch (...) {
        // forgotten: later reads will not know to skip its GPU, nothing worse
    }
    pthread_mutex_unlock(&g_stuck_mutex);
}

// Back to the idle list (with a reference), or false when it is full (or gone in a forked child:
// not ours then).
bool park(Worker* w) noexcept {
    bool parked = false;
    pthread_mutex_lock(&g_stuck_mutex);
    try {
        if (g_idle != nullptr && g_idle->size() < kMaxIdleWorkers) {
            w->refs.fetch_add(1, std::memory_order_relaxed);
            g_idle->push_back(w);
            parked = true;
        }
    } catch (...) {
        w->refs.fetch_sub(1, std::memory_order_relaxed);
    }
    pthread_mutex_unlock(&g_stuck_mutex);
    return parked;
}

// Off the idle list after its idle time: true with the list's reference, or false when a dispatcher
// took it meanwhile (a job is on its way).
bool unpark(Worker* w) noexcept {
    bool found = false;
    pthread_mutex_lock(&g_stuck_mutex);
    if (g_idle != nullptr) {
        const auto it = std::find(g_idle->begin(), g_idle->end(), w);
        if (it != g_idle->end()) {
            g_idle->erase(it);
            found = true;
        }
    }
    pthread_mutex_unlock(&g_stuck_mutex);
    return found;
}

// Runs one job to its end. The worker is parked first and the caller woken after: the caller's next
// read finds this same worker idle instead of starting or waking another.
void run_job(const BlockRef& block, Worker* w, bool* parked) noexcept {
    Status status;
    try {
        block->job(*block);
    } catch (const std::bad_alloc&) {
        status = nvml_failure(NVML_ERROR_MEMORY, "query_states", "Out of memory while reading NVML.");
    } catch (...) {
        status = failure(StatusCode::kInternal, "Unexpected error while reading NVML.");
    }
    *parked = park(w);
    block->finish(std::move(status));
}

// The next job, or an empty one when the worker has been idle for its idle time (and is off the idle
// list, with the list's reference dropped).
BlockRef next_job(Worker* w) noexcept {
    BlockRef block;
    if (!w->handed.wait_until(now_ns() + g_idle_worker_ns.load(std::memory_order_relaxed))) {
        if (unpark(w)) {
            w->refs.fetch_sub(1, std::memory_order_relaxed);  // the list's; the thread's is left
            return block;
        }
        w->handed.wait_until(LLONG_MAX);  // a dispatcher took it off the list: its job is coming
    }
    block.swap(w->job);
    w->handed.reset();  // before it is parked again, so before any dispatcher can hand it another
    return block;
}

void* worker_main(void* arg) {
    const WorkerRef w(static_cast<Worker*>(arg));  // the thread's own reference
    w->tid = static_cast<pid_t>(syscall(SYS_gettid));
    for (;;) {
        const BlockRef block = next_job(w.get());
        if (!block) break;
        bool parked = false;
        run_job(block, w.get(), &parked);
        if (!parked) break;
    }
    return nullptr;
}

// An idle worker is woken on the CPU its caller runs on, which then only waits for it: a wake-up across
// CPUs costs an inter-processor interrupt and the other CPU's wake from idle (tens of µs on a virtual
// machine, more than the instant simulator's read), a switch on one CPU a few µs. One
// sched_setaffinity when the caller has moved (or an unpin came) since. Where it cannot be pinned (a
// CPU past CPU_SETSIZE, a host whose CPUs a cpu_set_t cannot hold, a cpuset without it), it may run on
// any CPU its caller may.
void pin_to_caller(Worker* w, Block* block) noexcept {
    if (w->tid == 0) return;
    const int cpu = sched_getcpu();
    const unsigned long unpins = g_unpins.load(std::memory_order_acquire);  // before the pin: see g_unpins
    if (cpu >= 0 && cpu == w->cpu && unpins == w->pinned_at) {
        block->pinned_worker = w->tid;
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
        block->pinned_worker = w->tid;
        return;
    }
    if (w->cpu != -1) widen(w->tid);  // no pin from before stays
    w->cpu = -1;
}

// Hands `block`'s job to an idle worker, or to a new one; the reference held here keeps the worker
// alive until it is woken.
Status dispatch(const BlockRef& block) {
    WorkerRef w;
    pthread_mutex_lock(&g_stuck_mutex);
    if (g_idle != nullptr && !g_idle->empty()) {
        w = WorkerRef(g_idle->back());  // the list's reference
        g_idle->pop_back();
    }
    pthread_mutex_unlock(&g_stuck_mutex);
    if (w) {
        pin_to_caller(w.get(), &*block);
        w->job = block;
        w->handed.set();
        return Status();
    }
    w = WorkerRef(new Worker());
    w->job = block;  // before its thread exists
    w->handed.set();
    w->refs.fetch_add(1, std::memory_order_relaxed);  // the thread's
    const int rc = start_nvml_thread(worker_main, w.get());
    if (rc != 0) {
        w->refs.fetch_sub(1, std::memory_order_relaxed);
        return failure(StatusCode::kOsError,
                       "Could not start a thread to read NVML with a deadline: " + errno_text(rc) + ".", rc);
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
// std::shared_ptr: base/glibc_compat.hpp): the job keeps it when its caller stops waiting.
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
                           std::vector<Stall>* stalls, bool* count_known, double spent_seconds,
                           unsigned* count_out) noexcept {
    try {
        out->clear();
        stalls->clear();
        *count_known = false;
        const long long deadline = deadline_after(std::max(timeout_seconds - spent_seconds, 0.001));
        *stalls = stuck_calls();
        for (const Stall& s : *stalls)
            if (s.gpu == ReadMonitor::kLibrary) return Status();  // a library-wide call is stuck: start nothing
        const ReadPlan read_plan = plan;
        const CheckSet checks = enforced;
        // `lib` lives for the life of the process (nvml/loader.hpp); the rest is copied into the job
        auto job = [&lib, owner, taskmanager, checks, read_plan](Block& b) {
            std::vector<DeviceState> unused;
            const Status st = query_states(lib, owner, taskmanager, checks, &unused, read_plan, &b);
            b.locked([&] {
                if (b.job_status_.ok()) b.job_status_ = st;
            });
        };
        std::vector<BlockRef> blocks{BlockRef(new Block())};
        for (const Stall& s : *stalls) blocks[0]->skipped_.push_back(static_cast<unsigned>(s.gpu));
        blocks[0]->job = job;
        if (Status st = dispatch(blocks[0]); !st.ok()) return st;
        // Waits for the last block, and looks again when its worker's call in flight will have lasted a
        // sixteenth of the time (a read done sooner, every warm one, is one wait and one wake). A worker
        // that has been inside one call on one GPU that long keeps that GPU, and a new block reads the
        // ones after it (one stuck thread per GPU at most: a block starts after the GPU its predecessor
        // is stuck on, and skips earlier stuck ones).
        constexpr long long kShortestStepNs = 1000000;
        const long long hand_on_ns = std::max((deadline - now_ns()) / 16, kShortestStepNs);
        long long look = now_ns() + hand_on_ns;
        for (;;) {
            if (deadline - now_ns() < kShortestStepNs) break;
            if (blocks.back()->wait_until(std::min(look, deadline))) break;
            const long long checked = now_ns();
            if (checked >= deadline) break;
            unsigned count = 0;
            bool known = false;
            blocks[0]->locked([&] {
                count = blocks[0]->count_;
                known = blocks[0]->count_known_;
            });
            unsigned from = 0;
            if (!known || !blocks.back()->hand_off(checked - hand_on_ns, count, &from)) {
                // a call that has lasted that long but cannot be handed on (the last GPU, the count):
                // a step later, in case another comes
                const long long since = blocks.back()->gpu_call_since_ns();
                look = since + hand_on_ns > checked ? since + hand_on_ns : checked + hand_on_ns;
                continue;
            }
            BlockRef next(new Block());
            next->skipped_ = blocks[0]->skipped_;
            next->first_ = from;
            next->count_ = count;
            next->given_count_ = true;
            next->job = job;
            if (!dispatch(next).ok()) break;  // no thread for the rest: they stay the stuck one's, unread
            blocks.push_back(std::move(next));
            look = checked + hand_on_ns;
        }
        // Every block to its end or the deadline: the GPUs of one that missed it are unknown.
        struct Part {
            bool done = false;
            bool stalled = false;
            Stall now;
            unsigned first = 0, limit = kNoGpu;
            std::string in_flight;  // why its stuck GPU is unknown
        };
        std::vector<Part> parts(blocks.size());
        std::vector<DeviceState> read;
        Status status;
        unsigned count = 0;
        for (std::size_t i = 0; i < blocks.size(); ++i) {
            Block& b = *blocks[i];
            Part& part = parts[i];
            b.wait_until(deadline);
            part.done = b.settle();
            part.stalled = !part.done && b.in_flight(&part.now);
            if (!part.done) remember_stuck(blocks[i]);
            b.locked([&] {
                for (DeviceState& s : b.read_) read.push_back(std::move(s));
                if (part.done && status.ok()) status = b.job_status_;
                if (i == 0) {
                    count = b.count_;
                    *count_known = b.count_known_;
                }
                part.first = b.first_;
                part.limit = b.limit_;
            });
        }
        if (!status.ok()) return status;
        if (count_out != nullptr) *count_out = count;
        const std::size_t earlier_stalls = stalls->size();
        for (const Part& part : parts)
            if (part.stalled) stalls->push_back(part.now);
        if (!*count_known) return Status();
        // a driver serialises calls on its lock: a call stuck since before may be what this one waits for
        for (std::size_t i = 0; i < parts.size(); ++i) {
            Part& part = parts[i];
            if (!part.stalled) continue;
            part.in_flight = stall_text(part.now, timeout_seconds);
            const Stall* behind = earlier_stalls > 0 ? &(*stalls)[0] : nullptr;
            for (std::size_t j = i; behind == nullptr && j-- > 0;)
                if (parts[j].stalled) behind = &parts[j].now;
            if (behind != nullptr) {
                part.in_flight +=
                    " (behind " +
                    (behind->gpu == ReadMonitor::kLibrary ? std::string()
                                                          : "GPU " + std::to_string(behind->gpu) + "'s ") +
                    behind->function + ", which has not returned for " + duration_text(behind->seconds) + ")";
            }
        }
        // Every GPU in index order: read, or unknown with the reason.
        auto earlier = [&](unsigned gpu) -> const Stall* {
            for (std::size_t i = 0; i < earlier_stalls; ++i)
                if ((*stalls)[i].gpu == static_cast<int>(gpu)) return &(*stalls)[i];
            return nullptr;
        };
        auto part_of = [&](unsigned gpu) -> const Part& {
            for (std::size_t i = parts.size(); i-- > 1;)
                if (gpu >= parts[i].first) return parts[i];
            return parts[0];
        };
        out->reserve(read.size() + count);
        std::size_t next = 0;
        for (unsigned gpu = 0; gpu < count; ++gpu) {
            bool any = false;
            while (next < read.size() && read[next].nvml_index == gpu) {
                out->push_back(std::move(read[next++]));
                any = true;
            }
            if (any) continue;
            if (plan.scope.skips(gpu)) continue;  // not to be read
            const Part& part = part_of(gpu);
            if (const Stall* s = earlier(gpu)) {
                out->push_back(unknown_state(gpu, stall_text(*s, timeout_seconds), enforced));
            } else if (part.stalled && part.now.gpu == static_cast<int>(gpu)) {
                out->push_back(unknown_state(gpu, part.in_flight, enforced));
            } else if (part.stalled) {
                out->push_back(unknown_state(
                    gpu,
                    "not read: " +
                        (part.now.gpu == ReadMonitor::kLibrary ? std::string()
                                                               : "GPU " + std::to_string(part.now.gpu) + "'s ") +
                        part.in_flight,
                    enforced));
            } else if (!part.done) {
                out->push_back(unknown_state(gpu, "not read in time", enforced));
            }
        }
        return Status();
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "query_states", "Out of memory while reading the GPUs' state.");
    }
}

bool run_within(double timeout_seconds, const char* function, std::function<void()> job, Stall* stall, Status* status,
                int gpu) noexcept {
    try {
        *status = Status();
        stall->function.clear();
        const long long deadline = deadline_after(timeout_seconds);
        for (Stall& s : stuck_calls()) {
            if (s.gpu != ReadMonitor::kLibrary && s.gpu != gpu) continue;
            *stall = std::move(s);  // the library, or this GPU, is still stuck from before: start no other
            return false;
        }
        BlockRef block(new Block());
        block->job = [job = std::move(job)](Block&) { job(); };
        // in flight from now: a deadline that passes before the worker even starts is a stall of the
        // job, never "it finished"
        block->calling(gpu, function);
        if (Status st = dispatch(block); !st.ok()) {
            *status = std::move(st);
            return false;
        }
        block->wait_until(deadline);
        if (block->settle()) return true;
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

double set_idle_worker_seconds_for_tests(double seconds) noexcept {
    return static_cast<double>(g_idle_worker_ns.exchange(static_cast<long long>(seconds * 1e9))) / 1e9;
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

Status enumerate_within(const NvmlLibrary& lib, double timeout_seconds, Enumeration* found, Stall* stall,
                        const std::optional<std::vector<unsigned>>& only) noexcept {
    try {
        const Counted<Enumerated> enumerated;
        Status started;
        // `lib` lives for the life of the process (nvml/loader.hpp); `only` is copied: the call may outlive this one
        const bool one = only && only->size() == 1;
        const int gpu = one ? static_cast<int>(only->front()) : ReadMonitor::kLibrary;
        const bool returned = run_within(
            timeout_seconds, one ? "the enumeration of the GPU (its uuid, name, PCI bus id)" : "the device enumeration",
            [enumerated, &lib, only] { enumerated->status = enumerate_devices(lib, &enumerated->found, only); }, stall,
            &started, gpu);
        if (returned) *found = std::move(enumerated->found);
        return step_status(returned, started, *stall, timeout_seconds, lib.path(), enumerated->status);
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "enumerate_devices", "Out of memory while enumerating the GPUs.");
    }
}

}  // namespace flinkgpu
