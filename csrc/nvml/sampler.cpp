#include "nvml/sampler.hpp"

#include "base/glibc_compat.hpp"
#include "nvml/choice.hpp"
#include "nvml/deadline.hpp"
#include "nvml/workers.hpp"

#include <pthread.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

namespace flinkgpu {
namespace {

using Clock = std::chrono::steady_clock;

// An interval or a wait this long is "never"; a longer one would overflow steady_clock's nanoseconds.
constexpr std::chrono::milliseconds kLongestWait = std::chrono::hours(24 * 365 * 100);
// The health read's bound: the sample's interval, at most NVML's default deadline, at least this.
constexpr std::chrono::milliseconds kHealthReadLimit{static_cast<long long>(kDefaultNvmlTimeoutSeconds * 1000)};
constexpr std::chrono::milliseconds kShortestHealthRead{100};

bool is_lost(int code) { return code == NVML_ERROR_GPU_IS_LOST || code == NVML_ERROR_RESET_REQUIRED; }

// The gauge's number for the state path's verdict; a verdict it does not know (a state read that
// did not come back in time, say) is unknown.
GaugeHealth gauge_health(Health health) {
    switch (health) {
        case Health::kOk: return GaugeHealth::kOk;
        case Health::kDegraded: return GaugeHealth::kDegraded;
        case Health::kUnhealthy: return GaugeHealth::kUnhealthy;
        case Health::kUnknown: return GaugeHealth::kUnknown;  // its state read did not return in time
        default: return GaugeHealth::kUnknown;
    }
}

// One GPU of one library (the GPU "<i>" and its MIG units "<i>:<slot>"): its own thread reads it, so
// that a GPU whose queries hang holds up only its own gauges. The thread is this GPU's only one: a
// read handed to it that has not returned (late) gets no successor, so a stuck GPU never piles up
// threads. Everything here is under the sampler's mutex.
struct Reader {
    std::string path, gpu;  // gpu: the index up to its ':'
    std::condition_variable wake;
    const NvmlLibrary* lib = nullptr;  // for the read handed to it
    bool running = false;              // its thread exists in this process
    bool busy = false;                 // a read is handed to it and has not returned
    bool late = false;                 // ... and has not returned within kSampleMargin
    bool state_stuck = false;          // the health read's state read is stuck on this GPU (nvml/deadline.hpp)
    unsigned long long round = 0;      // the sample the read handed to it belongs to
};

// One watched index. `path` and `index` never change; `reader` is set by the pacer; the reader's
// fields are its Reader's thread's alone; the rest is under the sampler's mutex.
struct Entry {
    std::string path, index;
    Reader* reader = nullptr;
    // the snapshot
    SampledGpu shown;
    bool sampled = false;
    SteadyTime sampled_at;
    SampledGpu reading;        // the last reading: health kOk answered, kUnhealthy lost, kUnknown not read
    bool health_read = false;  // a health read answered for it (a GPU watched later gets one at once)
    bool health_known = false;
    Health health = Health::kOk;
    // the reader's
    MetricDevice device;
    unsigned long device_generation = 0;  // 0: not resolved in this process
    SampledGpu next;                      // the reading being taken
};

// What `e`'s gauges show, from its last reading, its reader's state and its health findings.
void show(Entry* e) {
    const bool blocked = e->reader != nullptr && (e->reader->late || e->reader->state_stuck);
    if (blocked || e->reading.health == GaugeHealth::kUnknown) {
        e->shown = SampledGpu();
    } else if (e->reading.health == GaugeHealth::kUnhealthy) {
        e->shown = e->reading;  // lost: -1
    } else {
        e->shown = e->reading;
        e->shown.health = e->health_known ? gauge_health(e->health) : GaugeHealth::kUnknown;
    }
}

std::string gpu_of(const std::string& index) { return index.substr(0, index.find(':')); }

// The process's sampler: a pacer thread, which never calls NVML itself, and one reader thread per
// watched GPU (docs/design.md §9.3). Each sample, the pacer opens the libraries (bounded, through
// nvml/deadline.hpp), hands every GPU that is free its read, waits for them at most kSampleMargin (a
// GPU not back by then is late: shown unknown until its read returns), then reads the health
// findings when due through the choice's state path, bounded by the same margin.
class Sampler {
public:
    bool watch(const std::string& path, std::string_view index, std::chrono::milliseconds interval) {
        std::lock_guard<std::mutex> lock(mutex_);
        interval_ = std::clamp(interval, kMinMetricsInterval, kLongestWait);
        if (find(path, index) == nullptr) {
            entries_.emplace_back();
            entries_.back().path = path;
            entries_.back().index = std::string(index);
            requested_ = true;  // its first values now, not an interval later
            wake_.notify_all();
        }
        return ensure_running();
    }

    SampledGpu sampled(const std::string& path, std::string_view index, SteadyTime now) {
        std::lock_guard<std::mutex> lock(mutex_);
        const Entry* e = find(path, index);
        if (e == nullptr) return SampledGpu();
        ensure_running();  // a fork()ed child's first gauge call
        if (!e->sampled || now - e->sampled_at > interval_ + kSampleMargin) return SampledGpu();
        return e->shown;
    }

    // A sample that starts after this request completes with every GPU's read back (one that ends
    // while a late read is still out, which it could not hand out again, is followed by another).
    bool sample_now(std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!ensure_running()) return false;
        unsigned long long wanted = started_ + 1;  // one that starts after this request
        requested_ = true;
        wake_.notify_all();
        const SteadyTime deadline = Clock::now() + std::min(timeout, kLongestWait);
        auto reads_out = [&] {
            for (const Reader& r : readers_)
                if (r.busy) return true;
            return false;
        };
        while (whole_ < wanted) {
            if (completed_ >= wanted && !reads_out()) {  // the late read is back: one more, with it
                wanted = started_ + 1;
                requested_ = true;
                wake_.notify_all();
            }
            if (Clock::now() >= deadline) return false;
            wait_until(&done_, &lock, deadline);
        }
        return true;
    }

    unsigned long long completed() {
        std::lock_guard<std::mutex> lock(mutex_);
        return counted_;
    }

    // At exit: no new sample, and the reads under way (if any) are given a moment to end, so that no
    // thread is inside the driver library while the process tears it down.
    void stop() {
        std::unique_lock<std::mutex> lock(mutex_);
        stopping_ = true;
        wake_.notify_all();
        done_.notify_all();  // the pacer, waiting for reads
        for (Reader& r : readers_) r.wake.notify_all();
        const SteadyTime deadline = Clock::now() + std::chrono::milliseconds(500);
        auto under_way = [&] {
            if (sampling_) return true;
            for (const Reader& r : readers_)
                if (r.busy && r.running) return true;
            return false;
        };
        while (under_way() && Clock::now() < deadline) wait_until(&done_, &lock, deadline);
    }

    // fork(): the forking thread holds the mutex across it, so that the child gets a consistent
    // copy; the child starts from that copy with no threads (they are started again on demand).
    void lock_for_fork() { mutex_.lock(); }
    void unlock_after_fork() { mutex_.unlock(); }
    Sampler* copy_in_child() {
        auto* fresh = new (std::nothrow) Sampler();
        if (fresh == nullptr) return nullptr;
        fresh->interval_ = interval_;
        fresh->abandoned_ = this;  // never freed: its condition variables may be mid-wait in no thread
        for (const Entry& e : entries_) {
            fresh->entries_.emplace_back();
            fresh->entries_.back().path = e.path;
            fresh->entries_.back().index = e.index;
        }
        return fresh;
    }

private:
    struct ReaderStart {
        Sampler* sampler;
        Reader* reader;
    };

    static void* pacer_main(void* self) {
        static_cast<Sampler*>(self)->pace();
        return nullptr;
    }
    static void* reader_main(void* arg) {
        const ReaderStart start = *static_cast<ReaderStart*>(arg);
        delete static_cast<ReaderStart*>(arg);
        start.sampler->read_loop(start.reader);
        return nullptr;
    }

    Entry* find(const std::string& path, std::string_view index) {
        for (Entry& e : entries_)
            if (e.index == index && e.path == path) return &e;
        return nullptr;
    }

    // With mutex_ held.
    bool ensure_running() {
        if (running_) return true;
        if (stopping_) return false;
        if (start_nvml_thread(&Sampler::pacer_main, this) != 0) return false;
        running_ = true;
        return true;
    }

    // pthread_cond_timedwait on the realtime clock: the steady-clock wait libstdc++ inlines needs
    // pthread_cond_clockwait (GLIBC_2.30, beyond manylinux_2_28). Callers re-check the steady clock.
    static void wait_until(std::condition_variable* cv, std::unique_lock<std::mutex>* lock, SteadyTime deadline) {
        const auto left = deadline - Clock::now();
        cv->wait_until(*lock, std::chrono::system_clock::now() +
                                  std::chrono::duration_cast<std::chrono::system_clock::duration>(left));
    }

    // With mutex_ held: the reader of `e`'s GPU, made on first use (a deque: entries keep pointers).
    Reader* reader_for(Entry* e) {
        if (e->reader != nullptr) return e->reader;
        const std::string gpu = gpu_of(e->index);
        for (Reader& r : readers_)
            if (r.gpu == gpu && r.path == e->path) return e->reader = &r;
        readers_.emplace_back();
        readers_.back().path = e->path;
        readers_.back().gpu = gpu;
        return e->reader = &readers_.back();
    }

    // With mutex_ held: hands `r` the read of sample `round`; false when its thread cannot be started.
    bool hand_out(Reader* r, const NvmlLibrary* lib, unsigned long long round) {
        r->lib = lib;
        r->round = round;
        r->busy = true;
        if (r->running) {
            r->wake.notify_all();
            return true;
        }
        auto* start = new (std::nothrow) ReaderStart{this, r};
        if (start == nullptr || start_nvml_thread(&Sampler::reader_main, start) != 0) {
            delete start;
            r->busy = false;
            return false;
        }
        r->running = true;
        return true;
    }

    // One GPU's thread: reads its watched indices whenever the pacer hands it a read, then publishes.
    void read_loop(Reader* r) noexcept {
        std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
        try {
            lock.lock();
            std::vector<Entry*> mine;
            unsigned long long taken = 0;
            for (;;) {
                // a timed wait, not wait(): libstdc++ 13 versions wait() GLIBCXX_3.4.30, past manylinux_2_28
                while (!stopping_ && !(r->busy && r->round != taken))
                    wait_until(&r->wake, &lock, Clock::now() + std::chrono::hours(1));
                if (stopping_) break;
                taken = r->round;
                mine.clear();
                for (Entry& e : entries_)
                    if (e.reader == r) mine.push_back(&e);
                const NvmlLibrary* lib = r->lib;
                lock.unlock();
                const unsigned long generation = NvmlLibrary::process_generation();
                for (Entry* e : mine) read_gpu(*lib, generation, e);  // NVML: without the mutex
                lock.lock();
                const SteadyTime end = Clock::now();
                r->busy = false;
                r->late = false;
                for (Entry* e : mine) {
                    e->reading = e->next;
                    e->sampled = true;
                    e->sampled_at = end;
                    show(e);
                }
                done_.notify_all();
            }
        } catch (...) {  // out of memory: this reader ends; the pacer starts another
            if (!lock.owns_lock()) lock.lock();
        }
        r->running = false;
        r->busy = false;
        done_.notify_all();
    }

    void pace() noexcept {
        std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
        try {
            lock.lock();
            for (;;) {
                while (!stopping_ && !requested_ && Clock::now() < next_due_) wait_until(&wake_, &lock, next_due_);
                if (stopping_) break;
                requested_ = false;
                const unsigned long long round = ++started_;
                sampling_ = true;
                const SteadyTime start = Clock::now();
                bool health_due = !health_read_ || start - health_read_at_ >= kHealthReadInterval;
                std::vector<std::string> paths;
                for (Entry& e : entries_) {
                    // a GPU still late is left out of a health read anyway: none is due for it until
                    // it answers (then at once), so a stuck GPU costs no health read per sample
                    const bool late = reader_for(&e)->late;  // made on first use
                    health_due = health_due || (!e.health_read && !late);
                    if (std::find(paths.begin(), paths.end(), e.path) == paths.end()) paths.push_back(e.path);
                }
                // the libraries: bounded, without the mutex
                std::vector<const NvmlLibrary*> libs;
                for (const std::string& path : paths) {
                    lock.unlock();
                    const NvmlLibrary* lib = open(path);
                    lock.lock();
                    libs.push_back(lib);
                }
                for (std::size_t p = 0; p < paths.size(); ++p) hand_out_reads(paths[p], libs[p], round, start);
                // the reads: each GPU's at most kSampleMargin; one not back is late (and stays its
                // GPU's only thread until it returns)
                const SteadyTime reads_due = start + kSampleMargin;
                auto out = [&] {
                    for (const Reader& r : readers_)
                        if (r.busy && r.round == round) return true;
                    return false;
                };
                while (!stopping_ && out() && Clock::now() < reads_due) wait_until(&done_, &lock, reads_due);
                for (Reader& r : readers_) {
                    if (!r.busy || r.late) continue;
                    r.late = true;
                    for (Entry& e : entries_) {
                        if (e.reader != &r) continue;
                        // its findings are from before it slowed down: unknown until a health read
                        // reaches it (its next reading would show them, for as long as it stays slow)
                        e.health_known = false;
                        e.health_read = false;
                        show(&e);
                    }
                }
                // the findings by start + the interval (at most nvml's default timeout), so that the next
                // sample is not held up: every GPU that answers stays within interval + kSampleMargin
                const SteadyTime health_due_by =
                    std::max(start + std::min(interval_, kHealthReadLimit), Clock::now() + kShortestHealthRead);
                bool health_done = health_due;
                if (health_due) {
                    for (std::size_t p = 0; p < paths.size(); ++p)
                        health_done = read_health(paths[p], libs[p], health_due_by, &lock) && health_done;
                }
                if (health_done) {
                    health_read_ = true;
                    health_read_at_ = start;
                }
                ++completed_;
                // counted once every GPU has been read: a GPU whose first read is late has no values yet
                bool all_read = true;
                for (const Entry& e : entries_) all_read = all_read && e.sampled;
                if (all_read) ++counted_;
                bool reads_out = false;
                for (const Reader& r : readers_) reads_out = reads_out || r.busy;
                if (!reads_out) whole_ = round;
                sampling_ = false;
                next_due_ = start + interval_;
                done_.notify_all();
            }
        } catch (...) {  // out of memory: the pacer ends; the next call starts another
            if (!lock.owns_lock()) lock.lock();
        }
        running_ = false;
        sampling_ = false;
        done_.notify_all();
    }

    // Without mutex_: the library at `path`, opened once per process (nvml/deadline.hpp bounds the
    // dlopen and nvmlInit: a stuck init answers at once afterwards); nullptr when it cannot be had.
    const NvmlLibrary* open(const std::string& path) {
        {
            std::lock_guard<std::mutex> guard(mutex_);
            for (const auto& [opened_path, lib] : libs_)
                if (opened_path == path) return lib;
        }
        const NvmlLibrary* lib = nullptr;
        Stall stall;
        if (!open_within(path, kDefaultNvmlTimeoutSeconds, &lib, &stall).ok() || lib == nullptr) return nullptr;
        std::lock_guard<std::mutex> guard(mutex_);
        libs_.emplace_back(path, lib);
        return lib;
    }

    // With mutex_ held: the reads of `path`'s GPUs for sample `round`. A GPU whose read is still out
    // (late) or whose state read is stuck gets none: its gauges stay unknown.
    void hand_out_reads(const std::string& path, const NvmlLibrary* lib, unsigned long long round, SteadyTime now) {
        for (Reader& r : readers_) {
            if (r.path != path || r.busy || r.state_stuck) continue;
            if (lib != nullptr && hand_out(&r, lib, round)) continue;
            for (Entry& e : entries_) {  // NVML cannot be had, or no thread: unknown
                if (e.reader != &r) continue;
                e.reading = SampledGpu();
                e.sampled = true;
                e.sampled_at = now;
                show(&e);
            }
        }
    }

    // With mutex_ held (released across the NVML read): the health findings of `path`'s GPUs, one
    // choice's state read within the time left to `due_by`. A GPU whose read is late is left out
    // (the state read would likely stick on it too: a second thread on it) and its health is
    // unknown until one reaches it; false then, or when some GPU's findings did not come. A GPU the state read is stuck
    // on is unknown and gets no reads until a later health read finds it answering (it stays in:
    // nvml/deadline.hpp answers it at once while its stuck call is out); one the read did not reach
    // keeps its last findings.
    bool read_health(const std::string& path, const NvmlLibrary* lib, SteadyTime due_by,
                     std::unique_lock<std::mutex>* lock) {
        if (lib == nullptr) return false;
        std::vector<Entry*> group;
        std::vector<std::string> indices;
        bool all = true;
        for (Entry& e : entries_) {
            if (e.path != path) continue;
            if (reader_for(&e)->late) {
                all = false;  // its health stays unknown (above), read first at the next sample
                continue;
            }
            group.push_back(&e);
            indices.push_back(e.index);
        }
        if (group.empty()) return false;
        lock->unlock();
        Choice choice;
        // busy-gpus ignore: no process list (the costliest query) for a health gauge
        const double budget = std::max(std::chrono::duration<double>(due_by - Clock::now()).count(), 0.001);
        const Status status =
            choose_gpus(*lib, indices, getpid(), 0, BusyPolicy::kIgnore, all_checks(), budget, &choice);
        lock->lock();
        for (Reader& r : readers_) {
            // only the readers of GPUs this read asked about: a late one's stays as it was
            if (r.path != path ||
                std::none_of(group.begin(), group.end(), [&](const Entry* e) { return e->reader == &r; }))
                continue;
            r.state_stuck = false;
            for (const Stall& s : choice.stalls)
                if (s.gpu != ReadMonitor::kLibrary && std::to_string(s.gpu) == r.gpu) r.state_stuck = true;
        }
        for (std::size_t i = 0; i < group.size(); ++i) {
            Entry* e = group[i];
            const bool answered = status.ok() && i < choice.states.size() &&
                                  choice.states[i].health != Health::kUnknown && !e->reader->state_stuck;
            if (answered) {
                e->health = choice.states[i].health;
                e->health_known = true;
            } else if (!status.ok() || e->reader->state_stuck) {
                e->health_known = false;
                if (e->reader->state_stuck) e->reading = SampledGpu();  // shown again once read again
            }  // else not reached in time: its last findings stand
            e->health_read = answered;  // else read again at the next sample
            all = all && answered;
            show(e);
        }
        return all;
    }

    static void read_gpu(const NvmlLibrary& lib, unsigned long generation, Entry* e) {
        SampledGpu& out = e->next;
        out = SampledGpu();
        out.health = GaugeHealth::kUnhealthy;  // lost, until it answers
        if (e->device_generation != generation) {
            // not cached while refused: a MIG instance may be created later
            if (!find_metric_device(lib, e->index, &e->device)) return;  // its handle is refused: lost, or gone
            e->device_generation = generation;
        }
        for (int m = 0; m < kMetricCount; ++m) {
            long long value = -1;
            const int code = read_metric_code(lib, e->device, static_cast<Metric>(m), &value);
            if (is_lost(code)) {
                out = SampledGpu();
                out.health = GaugeHealth::kUnhealthy;
                return;
            }
            out.values[m] = value;
        }
        out.health = GaugeHealth::kOk;  // answered: show() adds the findings
    }

    std::mutex mutex_;
    std::condition_variable wake_;  // the pacer waits on it: a request, a stop, a new GPU
    std::condition_variable done_;  // a read or a sample completed
    std::deque<Entry> entries_;     // deques: threads keep pointers while others append
    std::deque<Reader> readers_;
    std::vector<std::pair<std::string, const NvmlLibrary*>> libs_;  // opened in this process
    std::chrono::milliseconds interval_ = kDefaultMetricsInterval;
    SteadyTime next_due_;  // the epoch: the first sample at once
    bool requested_ = false, stopping_ = false, running_ = false, sampling_ = false;
    bool health_read_ = false;
    SteadyTime health_read_at_;
    unsigned long long started_ = 0, completed_ = 0;
    unsigned long long whole_ = 0;    // the last sample that ended with no read out (sample_now)
    unsigned long long counted_ = 0;  // completed_samples(): the samples after every GPU's first reading
    Sampler* abandoned_ = nullptr;    // the parent's sampler, in a fork()ed child
};

std::atomic<Sampler*> g_sampler{nullptr};

void prepare_fork() {
    if (Sampler* s = g_sampler.load()) s->lock_for_fork();
}
void after_fork_in_parent() {
    if (Sampler* s = g_sampler.load()) s->unlock_after_fork();
}
void after_fork_in_child() {
    Sampler* s = g_sampler.load();
    if (s == nullptr) return;
    Sampler* fresh = s->copy_in_child();
    s->unlock_after_fork();
    if (fresh != nullptr) g_sampler.store(fresh);
}
void stop_at_exit() {
    if (Sampler* s = g_sampler.load()) s->stop();
}

// The process's sampler, made on first use; nullptr when out of memory.
Sampler* sampler() {
    Sampler* s = g_sampler.load();
    if (s != nullptr) return s;
    // A function-local static, not std::call_once (pthread_once is a GLIBC_2.34 symbol).
    static const bool registered = [] {
        pthread_atfork(prepare_fork, after_fork_in_parent, after_fork_in_child);
        std::atexit(stop_at_exit);
        return true;
    }();
    (void)registered;
    auto* fresh = new (std::nothrow) Sampler();
    if (fresh == nullptr) return nullptr;
    Sampler* expected = nullptr;
    if (!g_sampler.compare_exchange_strong(expected, fresh)) {
        delete fresh;
        return expected;
    }
    return fresh;
}

}  // namespace

bool watch_gpu_metrics(const std::string& library_path, std::string_view index,
                       std::chrono::milliseconds interval) noexcept {
    try {
        Sampler* s = sampler();
        return s != nullptr && s->watch(library_path, index, interval);
    } catch (...) {  // bad_alloc, or a mutex the system refused
        return false;
    }
}

SampledGpu sampled_gpu(const std::string& library_path, std::string_view index, SteadyTime now) noexcept {
    try {
        Sampler* s = g_sampler.load();
        return s != nullptr ? s->sampled(library_path, index, now) : SampledGpu();
    } catch (...) {
        return SampledGpu();
    }
}

bool sample_gpu_metrics_now(std::chrono::milliseconds timeout) noexcept {
    try {
        Sampler* s = sampler();
        return s != nullptr && s->sample_now(timeout);
    } catch (...) {
        return false;
    }
}

unsigned long long completed_samples() noexcept {
    try {
        Sampler* s = g_sampler.load();
        return s != nullptr ? s->completed() : 0;
    } catch (...) {
        return 0;
    }
}

}  // namespace flinkgpu
