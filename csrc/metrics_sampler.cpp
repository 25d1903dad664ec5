#include "metrics_sampler.hpp"

#include "glibc_compat.hpp"
#include "gpu_choice.hpp"
#include "nvml_deadline.hpp"

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

// One watched GPU. `path` and `index` never change; the snapshot fields are guarded by the
// sampler's mutex; the reader's fields are touched by the reader thread alone.
struct Entry {
    std::string path, index;
    // the snapshot
    SampledGpu shown;
    bool sampled = false;
    SteadyTime sampled_at;
    // the reader's
    MetricDevice device;
    unsigned long device_generation = 0;  // 0: not resolved in this process
    bool health_read = false;             // a health read answered for it (a GPU watched later gets one at once)
    bool health_known = false;
    Health health = Health::kOk;
    SampledGpu next;  // the sample being taken
};

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

    bool sample_now(std::chrono::milliseconds timeout) {
        std::unique_lock<std::mutex> lock(mutex_);
        if (!ensure_running()) return false;
        const unsigned long long wanted = started_ + 1;  // one that starts after this request
        requested_ = true;
        wake_.notify_all();
        const SteadyTime deadline = Clock::now() + std::min(timeout, kLongestWait);
        while (completed_ < wanted) {
            if (Clock::now() >= deadline) return false;
            wait_until(&done_, &lock, deadline);
        }
        return true;
    }

    unsigned long long completed() {
        std::lock_guard<std::mutex> lock(mutex_);
        return completed_;
    }

    // At exit: no new sample, and the one under way (if any) is given a moment to end, so that the
    // reader is not inside the driver library while the process tears it down.
    void stop() {
        std::unique_lock<std::mutex> lock(mutex_);
        stopping_ = true;
        wake_.notify_all();
        const SteadyTime deadline = Clock::now() + std::chrono::milliseconds(500);
        while (sampling_ && Clock::now() < deadline) wait_until(&done_, &lock, deadline);
    }

    // fork(): the forking thread holds the mutex across it, so that the child gets a consistent
    // copy; the child starts from that copy with no reader (it is started again on demand).
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
    static void* thread_main(void* self) {
        static_cast<Sampler*>(self)->run();
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
        if (start_nvml_thread(&Sampler::thread_main, this) != 0) return false;
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

    void run() noexcept {
        std::unique_lock<std::mutex> lock(mutex_, std::defer_lock);
        try {
            lock.lock();
            for (;;) {
                while (!stopping_ && !requested_ && Clock::now() < next_due_) wait_until(&wake_, &lock, next_due_);
                if (stopping_) break;
                requested_ = false;
                ++started_;
                sampling_ = true;
                const SteadyTime start = Clock::now();
                bool health_due = !health_read_ || start - health_read_at_ >= kHealthReadInterval;
                std::vector<Entry*> work;
                work.reserve(entries_.size());
                for (Entry& e : entries_) {
                    work.push_back(&e);
                    health_due = health_due || !e.health_read;
                }
                lock.unlock();
                take_sample(work, health_due);  // NVML: without the mutex
                lock.lock();
                const SteadyTime end = Clock::now();
                for (Entry* e : work) {
                    e->shown = e->next;
                    e->sampled = true;
                    e->sampled_at = end;
                }
                if (health_due) {
                    health_read_ = true;
                    health_read_at_ = start;
                }
                ++completed_;
                sampling_ = false;
                next_due_ = start + interval_;
                done_.notify_all();
            }
        } catch (...) {  // out of memory: this reader ends; the next call starts another
            if (!lock.owns_lock()) lock.lock();
        }
        running_ = false;
        sampling_ = false;
        done_.notify_all();
    }

    // One sample of every watched GPU, per library: the health findings when due (one choice's
    // state read for the library's watched GPUs), then each GPU's readings.
    static void take_sample(const std::vector<Entry*>& work, bool health_due) {
        std::vector<bool> done(work.size(), false);
        for (std::size_t first = 0; first < work.size(); ++first) {
            if (done[first]) continue;
            std::vector<Entry*> group;
            for (std::size_t i = first; i < work.size(); ++i) {
                if (!done[i] && work[i]->path == work[first]->path) {
                    group.push_back(work[i]);
                    done[i] = true;
                }
            }
            Status status;
            const NvmlLibrary* lib = NvmlLibrary::acquire(group.front()->path, &status);
            if (lib == nullptr) {
                for (Entry* e : group) e->next = SampledGpu();  // NVML cannot be had: unknown
                continue;
            }
            if (health_due) read_health(*lib, group);
            const unsigned long generation = NvmlLibrary::process_generation();
            for (Entry* e : group) read_gpu(*lib, generation, e);
        }
    }

    static void read_health(const NvmlLibrary& lib, const std::vector<Entry*>& group) {
        std::vector<std::string> indices;
        indices.reserve(group.size());
        for (const Entry* e : group) indices.push_back(e->index);
        Choice choice;
        // busy-gpus ignore: no process list (the costliest query) for a health gauge; a GPU stuck in its
        // state read is unknown after the deadline, and the next samples do not start another read on it
        const Status status = choose_gpus(lib, indices, getpid(), 0, BusyPolicy::kIgnore, all_checks(),
                                          kDefaultNvmlTimeoutSeconds, &choice);
        for (std::size_t i = 0; i < group.size(); ++i) {
            group[i]->health_known = status.ok() && i < choice.states.size();
            group[i]->health_read = group[i]->health_known;  // else read again at the next sample
            if (group[i]->health_known) group[i]->health = choice.states[i].health;
        }
    }

    static void read_gpu(const NvmlLibrary& lib, unsigned long generation, Entry* e) {
        SampledGpu& out = e->next;
        out = SampledGpu();
        if (e->device_generation != generation) {
            // not cached while refused: a MIG instance may be created later
            if (!find_metric_device(lib, e->index, &e->device)) {
                out.health = GaugeHealth::kUnhealthy;  // its handle is refused: lost, or gone
                return;
            }
            e->device_generation = generation;
        }
        bool lost = false;
        for (int m = 0; m < kMetricCount; ++m) {
            long long value = -1;
            const int code = read_metric_code(lib, e->device, static_cast<Metric>(m), &value);
            if (is_lost(code)) {
                lost = true;
                break;
            }
            out.values[m] = value;
        }
        if (lost) {
            out = SampledGpu();
            out.health = GaugeHealth::kUnhealthy;
            return;
        }
        out.health = e->health_known ? gauge_health(e->health) : GaugeHealth::kUnknown;
    }

    std::mutex mutex_;
    std::condition_variable wake_;  // the reader waits on it: a request, a stop, a new GPU
    std::condition_variable done_;  // a sample completed
    std::deque<Entry> entries_;     // a deque: the reader keeps pointers while others append
    std::chrono::milliseconds interval_ = kDefaultMetricsInterval;
    SteadyTime next_due_;  // the epoch: the first sample at once
    bool requested_ = false, stopping_ = false, running_ = false, sampling_ = false;
    bool health_read_ = false;
    SteadyTime health_read_at_;
    unsigned long long started_ = 0, completed_ = 0;
    Sampler* abandoned_ = nullptr;  // the parent's sampler, in a fork()ed child
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
