#include "nvml/deadline.hpp"

#include "base/event.hpp"
#include "base/glibc_compat.hpp"
#include "nvml/health.hpp"
#include "nvml/workers.hpp"

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <new>
#include <utility>

namespace flinkgpu {
namespace {

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

constexpr unsigned kNoGpu = ~0u;

// What a worker and its caller share; the worker holds it for as long as it runs, so an abandoned
// worker writes only here. Its in-flight call is atomics (set before every NVML call, cheap); the
// rest is under `mutex`. A state read's block reads the GPUs from `first_` up to `limit_`: a caller
// that hands the GPUs after a stuck one to another worker lowers `limit_` (hand_off).
class Block final : public ReadMonitor, public WorkerJob {
public:
    Block() = default;
    ~Block() override { pthread_mutex_destroy(&mutex_); }
    Block(const Block&) = delete;
    Block& operator=(const Block&) = delete;

    void run() override { job(*this); }

    void calling(int gpu, const char* function) noexcept override {
        since_ns_.store(monotonic_ns(), std::memory_order_relaxed);
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
    void finish(Status status) noexcept override {
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
        stall->seconds = static_cast<double>(monotonic_ns() - since_ns_.load(std::memory_order_relaxed)) / 1e9;
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
};

using BlockRef = Ref<Block>;  // the caller, the worker, the stuck list

// The abandoned workers' blocks of this process (still inside NVML or about to leave it). A forked child
// has none of their threads: its handler forgets them (leaking what a vanished thread may hold locked).
// The mutex is never held across an NVML call.
pthread_mutex_t g_stuck_mutex = PTHREAD_MUTEX_INITIALIZER;
std::vector<BlockRef>* g_stuck = new std::vector<BlockRef>();

void stuck_prepare() { pthread_mutex_lock(&g_stuck_mutex); }
void stuck_parent() { pthread_mutex_unlock(&g_stuck_mutex); }
void stuck_child() {
    g_stuck = new (std::nothrow) std::vector<BlockRef>();  // the old one leaks on purpose
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

long long deadline_after(double seconds) {
    const double ns = std::min(seconds, 1e9) * 1e9;  // ~31 years: "never" without overflowing
    return monotonic_ns() + static_cast<long long>(ns);
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

// What a library-wide step's job hands its caller: the job keeps it when its caller stops waiting.
struct Opened : Counted {
    const NvmlLibrary* lib = nullptr;
    Status status;
};
struct Enumerated : Counted {
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

// The steps of query_states_within.

using ReadJob = std::function<void(Block&)>;

// A block that reads the GPUs from `first` on with `job`, skipping `skipped`.
BlockRef read_block(const ReadJob& job, const std::vector<unsigned>& skipped, unsigned first = 0) {
    BlockRef block(new Block());
    block->skipped_ = skipped;
    block->first_ = first;
    block->job = job;
    return block;
}

// Waits for the last block, and looks again when its worker's call in flight will have lasted a
// sixteenth of the time (a read done sooner, every warm one, is one wait and one wake). A worker that
// has been inside one call on one GPU that long keeps that GPU, and a new block reads the ones after it
// (one stuck thread per GPU at most: a block starts after the GPU its predecessor is stuck on, and skips
// earlier stuck ones).
void hand_on(std::vector<BlockRef>* blocks, long long deadline, const ReadJob& job) {
    constexpr long long kShortestStepNs = 1000000;
    const long long hand_on_ns = std::max((deadline - monotonic_ns()) / 16, kShortestStepNs);
    long long look = monotonic_ns() + hand_on_ns;
    Block& first = *blocks->front();
    for (;;) {
        if (deadline - monotonic_ns() < kShortestStepNs) return;
        if (blocks->back()->wait_until(std::min(look, deadline))) return;
        const long long checked = monotonic_ns();
        if (checked >= deadline) return;
        unsigned count = 0;
        bool known = false;
        first.locked([&] {
            count = first.count_;
            known = first.count_known_;
        });
        unsigned from = 0;
        if (!known || !blocks->back()->hand_off(checked - hand_on_ns, count, &from)) {
            // a call that has lasted that long but cannot be handed on (the last GPU, the count):
            // a step later, in case another comes
            const long long since = blocks->back()->gpu_call_since_ns();
            look = since + hand_on_ns > checked ? since + hand_on_ns : checked + hand_on_ns;
            continue;
        }
        BlockRef next = read_block(job, first.skipped_, from);
        next->count_ = count;
        next->given_count_ = true;
        if (!dispatch(next).ok()) return;  // no thread for the rest: they stay the stuck one's, unread
        blocks->push_back(std::move(next));
        look = checked + hand_on_ns;
    }
}

// One block at the deadline.
struct Part {
    bool done = false;
    bool stalled = false;
    Stall now;
    unsigned first = 0, limit = kNoGpu;
    std::string in_flight;  // why its stuck GPU is unknown
};

// What the blocks read by the deadline.
struct Gathered {
    std::vector<Part> parts;  // one per block
    std::vector<DeviceState> read;
    Status status;  // the first failure of a block that finished
    unsigned count = 0;
    bool count_known = false;
};

// Every block to its end or the deadline: one that missed it is abandoned (remember_stuck).
Gathered gather(const std::vector<BlockRef>& blocks, long long deadline) {
    Gathered g;
    g.parts.resize(blocks.size());
    for (std::size_t i = 0; i < blocks.size(); ++i) {
        Block& b = *blocks[i];
        Part& part = g.parts[i];
        b.wait_until(deadline);
        part.done = b.settle();
        part.stalled = !part.done && b.in_flight(&part.now);
        if (!part.done) remember_stuck(blocks[i]);
        b.locked([&] {
            for (DeviceState& s : b.read_) g.read.push_back(std::move(s));
            if (part.done && g.status.ok()) g.status = b.job_status_;
            if (i == 0) {
                g.count = b.count_;
                g.count_known = b.count_known_;
            }
            part.first = b.first_;
            part.limit = b.limit_;
        });
    }
    return g;
}

// "GPU 3's " for a call about GPU 3, "" for one about the whole library.
std::string whose(const Stall& stall) {
    return stall.gpu == ReadMonitor::kLibrary ? std::string() : "GPU " + std::to_string(stall.gpu) + "'s ";
}

// Why each stalled part's GPU is unknown. A driver serialises calls on its lock: a call stuck since
// before (the first of `stalls`' `earlier` ones), or else the last stalled part before it, may be what
// this one waits for.
void explain_stalls(std::vector<Part>* parts, const std::vector<Stall>& stalls, std::size_t earlier,
                    double timeout_seconds) {
    for (std::size_t i = 0; i < parts->size(); ++i) {
        Part& part = (*parts)[i];
        if (!part.stalled) continue;
        part.in_flight = stall_text(part.now, timeout_seconds);
        const Stall* behind = earlier > 0 ? &stalls[0] : nullptr;
        for (std::size_t j = i; behind == nullptr && j-- > 0;)
            if ((*parts)[j].stalled) behind = &(*parts)[j].now;
        if (behind != nullptr)
            part.in_flight += " (behind " + whose(*behind) + behind->function + ", which has not returned for " +
                              duration_text(behind->seconds) + ")";
    }
}

// Every GPU below g.count in index order into `out`: read, or unknown with the reason (a GPU the
// plan's scope skips has no state). `stalls`' first `earlier` are the calls stuck from before.
void place_states(Gathered* g, const std::vector<Stall>& stalls, std::size_t earlier, const ReadPlan& plan,
                  const CheckSet& enforced, double timeout_seconds, std::vector<DeviceState>* out) {
    auto earlier_stall = [&](unsigned gpu) -> const Stall* {
        for (std::size_t i = 0; i < earlier; ++i)
            if (stalls[i].gpu == static_cast<int>(gpu)) return &stalls[i];
        return nullptr;
    };
    auto part_of = [&](unsigned gpu) -> const Part& {
        for (std::size_t i = g->parts.size(); i-- > 1;)
            if (gpu >= g->parts[i].first) return g->parts[i];
        return g->parts[0];
    };
    out->reserve(g->read.size() + g->count);
    std::size_t next = 0;
    for (unsigned gpu = 0; gpu < g->count; ++gpu) {
        bool any = false;
        while (next < g->read.size() && g->read[next].nvml_index == gpu) {
            out->push_back(std::move(g->read[next++]));
            any = true;
        }
        if (any || plan.scope.skips(gpu)) continue;  // read, or not to be read
        const Part& part = part_of(gpu);
        if (const Stall* s = earlier_stall(gpu)) {
            out->push_back(unknown_state(gpu, stall_text(*s, timeout_seconds), enforced));
        } else if (part.stalled && part.now.gpu == static_cast<int>(gpu)) {
            out->push_back(unknown_state(gpu, part.in_flight, enforced));
        } else if (part.stalled) {
            out->push_back(unknown_state(gpu, "not read: " + whose(part.now) + part.in_flight, enforced));
        } else if (!part.done) {
            out->push_back(unknown_state(gpu, "not read in time", enforced));
        }
    }
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
        std::vector<unsigned> skipped;
        for (const Stall& s : *stalls) {
            if (s.gpu == ReadMonitor::kLibrary) return Status();  // a library-wide call is stuck: start nothing
            skipped.push_back(static_cast<unsigned>(s.gpu));
        }
        // `lib` lives for the life of the process (nvml/loader.hpp); the rest is copied into the job
        const ReadJob job = [&lib, owner, taskmanager, checks = enforced, read_plan = plan](Block& b) {
            std::vector<DeviceState> unused;
            const Status st = query_states(lib, owner, taskmanager, checks, &unused, read_plan, &b);
            b.locked([&] {
                if (b.job_status_.ok()) b.job_status_ = st;
            });
        };
        std::vector<BlockRef> blocks{read_block(job, skipped)};
        if (Status st = dispatch(blocks[0]); !st.ok()) return st;
        hand_on(&blocks, deadline, job);
        Gathered gathered = gather(blocks, deadline);
        *count_known = gathered.count_known;
        if (!gathered.status.ok()) return gathered.status;
        if (count_out != nullptr) *count_out = gathered.count;
        const std::size_t earlier = stalls->size();
        for (const Part& part : gathered.parts)
            if (part.stalled) stalls->push_back(part.now);
        if (!*count_known) return Status();
        explain_stalls(&gathered.parts, *stalls, earlier, timeout_seconds);
        place_states(&gathered, *stalls, earlier, plan, enforced, timeout_seconds, out);
        return Status();
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "query_states", "Out of memory while reading the GPUs' state.");
    }
}

bool run_within(double timeout_seconds, const char* function, std::function<void()> job, Stall* stall, Status* status,
                int gpu) noexcept {
    try {
        return run_within(timeout_seconds, function, [job = std::move(job)](ReadMonitor&) { job(); }, stall, status,
                          gpu);
    } catch (const std::bad_alloc&) {
        *status = nvml_failure(NVML_ERROR_MEMORY, function, "Out of memory while reading NVML.");
        return false;
    }
}

bool run_within(double timeout_seconds, const char* function, std::function<void(ReadMonitor&)> job, Stall* stall,
                Status* status, int gpu) noexcept {
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
        block->job = [job = std::move(job)](Block& self) { job(self); };
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
        const Ref<Opened> opened(new Opened());
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
        const Ref<Enumerated> enumerated(new Enumerated());
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
