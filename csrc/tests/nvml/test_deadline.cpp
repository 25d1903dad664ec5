// NVML reads with a deadline (csrc/nvml/deadline.*) against a library whose calls hang
// (csrc/tests/fake_nvml_hang.cpp, FLINK_GPU_TEST_FAKE_NVML_HANG): a call past its deadline makes its
// GPU unknown, naming the call; a GPU still stuck is unknown at once with no call repeated on it; it
// is read again once the call returns; a forked child starts afresh.
#include "nvml/choice.hpp"
#include "nvml/deadline.hpp"
#include "nvml/loader.hpp"
#include "nvml/workers.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tests/check.hpp"
#include "tests/simulated.hpp"

using namespace flinkgpu;

namespace {

std::string library() {
    const char* p = std::getenv("FLINK_GPU_TEST_FAKE_NVML_HANG");
    return p ? p : "";
}

// The fake's call counter (fake_calls), through the already loaded library.
int calls(const char* query, int gpu) {
    void* handle = dlopen(library().c_str(), RTLD_NOW | RTLD_NOLOAD);
    if (handle == nullptr) return -1;
    auto fn = reinterpret_cast<int (*)(const char*, int)>(dlsym(handle, "fake_calls"));
    const int n = fn != nullptr ? fn(query, gpu) : -1;
    dlclose(handle);
    return n;
}

// A hang of `query` (on `gpu`, or every GPU for -1) for as long as the returned file exists.
std::string hang(const char* query, int gpu) {
    char path[] = "/tmp/flink-gpu-hang-XXXXXX";
    const int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    setenv("FAKE_NVML_HANG_FILE", path, 1);
    setenv("FAKE_NVML_HANG_QUERY", query, 1);
    setenv("FAKE_NVML_HANG_GPU", gpu < 0 ? "" : std::to_string(gpu).c_str(), 1);
    return path;
}

// Releases the hang and waits (on the calls' own end, not on a clock) until no read is stuck.
void release(const std::string& file) {
    unlink(file.c_str());
    while (nvml_call_outstanding()) sched_yield();
}

// Runs `body` in a forked child (the fake's counters and the stuck reads are per process).
int in_child(void (*body)(const NvmlLibrary&)) { return simulated::in_child(library(), body); }

struct Read {
    Status status;
    std::vector<DeviceState> states;
    std::vector<Stall> stalls;
    bool count_known = false;
};

Read read(const NvmlLibrary& lib, double timeout) {
    Read r;
    r.status =
        query_states_within(lib, getpid(), 0, all_checks(), ReadPlan(), timeout, &r.states, &r.stalls, &r.count_known);
    return r;
}

bool starts_with(const std::string& text, const std::string& prefix) {
    return text.compare(0, prefix.size(), prefix) == 0;
}

// A job that waits inside "NVML" until the test opens the gate; it counts its runs.
struct Gate {
    std::mutex m;
    std::condition_variable cv;
    bool is_open = false;
    int runs = 0;

    void wait() {
        std::unique_lock<std::mutex> lock(m);
        ++runs;
        cv.wait(lock, [&] { return is_open; });
    }
    void open() {
        {
            std::lock_guard<std::mutex> lock(m);
            is_open = true;
        }
        cv.notify_all();
    }
    template <typename T>
    T read(const T& field) {
        std::lock_guard<std::mutex> lock(m);
        return field;
    }
};

}  // namespace

TEST_CASE(a_read_past_its_deadline_makes_its_gpu_unknown_naming_the_query) {
    CHECK_EQ(in_child([](const NvmlLibrary& lib) {
        const std::string file = hang("remapped-rows", 1);
        // long compared with any scheduling delay: the second worker starts a sixteenth into it
        const Read r = read(lib, 10.0);
        CHECK(r.status.ok());
        CHECK(r.count_known);
        CHECK_EQ(r.states.size(), static_cast<std::size_t>(4));
        if (r.states.size() != 4) return;
        CHECK(r.states[0].health == Health::kOk);
        CHECK(r.states[1].health == Health::kUnknown);
        CHECK_EQ(r.states[1].health_text, std::string("unknown: nvmlDeviceGetRemappedRows did not return within 10 s"));
        // the GPUs after it were read by another worker, within the same deadline
        CHECK(r.states[2].health == Health::kOk);
        CHECK(r.states[3].health == Health::kOk);
        CHECK_EQ(r.stalls.size(), static_cast<std::size_t>(1));
        if (!r.stalls.empty()) {
            CHECK_EQ(r.stalls[0].gpu, 1);
            CHECK_EQ(r.stalls[0].function, std::string("nvmlDeviceGetRemappedRows"));
            CHECK(!r.stalls[0].earlier);
        }
        CHECK(nvml_call_outstanding());
        // never handed out
        const Ranking ranking = rank_gpus(r.states, BusyPolicy::kAvoid);
        CHECK_EQ(ranking.indices, (std::vector<std::string>{"0", "2", "3"}));
        CHECK_EQ(ranking.left_out.size(), static_cast<std::size_t>(1));
        release(file);
    }),
             0);
}

TEST_CASE(a_gpu_still_stuck_is_unknown_at_once_and_its_call_is_not_repeated) {
    CHECK_EQ(in_child([](const NvmlLibrary& lib) {
        const std::string file = hang("remapped-rows", 1);
        read(lib, 1.0);
        const int gpu2_reads = calls("remapped-rows", 2);  // 1 when the first handed on in time, else 0
        const Read again = read(lib, 30.0);                // returns without waiting for GPU 1
        CHECK(again.status.ok());
        CHECK_EQ(again.states.size(), static_cast<std::size_t>(4));
        if (again.states.size() != 4) return;
        CHECK(again.states[0].health == Health::kOk);
        CHECK(again.states[2].health == Health::kOk);
        CHECK(again.states[3].health == Health::kOk);
        CHECK(again.states[1].health == Health::kUnknown);
        CHECK(starts_with(again.states[1].health_text, "unknown: nvmlDeviceGetRemappedRows has not returned for "));
        CHECK_EQ(again.stalls.size(), static_cast<std::size_t>(1));
        if (!again.stalls.empty()) CHECK(again.stalls[0].earlier);
        CHECK_EQ(calls("remapped-rows", 1), 1);               // no second thread went into it
        CHECK_EQ(calls("remapped-rows", 2), gpu2_reads + 1);  // read again
        release(file);
    }),
             0);
}

TEST_CASE(once_the_stuck_call_returns_its_gpu_is_read_again) {
    CHECK_EQ(in_child([](const NvmlLibrary& lib) {
        const std::string file = hang("remapped-rows", 1);
        read(lib, 1.0);
        release(file);
        CHECK(!nvml_call_outstanding());
        const Read after = read(lib, 30.0);
        CHECK(after.stalls.empty());
        CHECK_EQ(after.states.size(), static_cast<std::size_t>(4));
        for (const DeviceState& s : after.states) CHECK(s.health == Health::kOk);
        CHECK_EQ(calls("remapped-rows", 1), 2);
    }),
             0);
}

TEST_CASE(a_stalled_count_leaves_every_gpu_unknown_and_starts_nothing_more) {
    CHECK_EQ(in_child([](const NvmlLibrary& lib) {
        const std::string file = hang("count", -1);
        Choice choice;
        CHECK(choose_gpus(lib, {"0", "1", "2", "3"}, getpid(), 0, BusyPolicy::kAvoid, all_checks(), 1.0, &choice).ok());
        CHECK_EQ(choice.states.size(), static_cast<std::size_t>(4));
        for (const DeviceState& s : choice.states) {
            CHECK(s.health == Health::kUnknown);
            CHECK_EQ(s.health_text, std::string("unknown: not read: nvmlDeviceGetCount_v2 did not return within 1 s"));
        }
        CHECK(choice.ranking.indices.empty());
        Choice again;
        CHECK(choose_gpus(lib, {"0", "1", "2", "3"}, getpid(), 0, BusyPolicy::kAvoid, all_checks(), 30.0, &again).ok());
        CHECK_EQ(again.states.size(), static_cast<std::size_t>(4));
        if (!again.states.empty())
            CHECK(starts_with(again.states[0].health_text,
                              "unknown: not read: nvmlDeviceGetCount_v2 has not returned for "));
        CHECK_EQ(calls("count", -1), 1);
        release(file);
    }),
             0);
}

TEST_CASE(a_forked_child_has_no_stuck_reads_and_reads_every_gpu) {
    CHECK_EQ(in_child([](const NvmlLibrary&) {
        const std::string file = hang("remapped-rows", 1);
        Status st;
        read(*NvmlLibrary::acquire(library(), &st), 1.0);
        CHECK(nvml_call_outstanding());
        std::fflush(nullptr);
        const pid_t child = fork();
        if (child == 0) {
            unsetenv("FAKE_NVML_HANG_QUERY");  // this "driver" answers in the child
            Status cst;
            const NvmlLibrary* lib = NvmlLibrary::acquire(library(), &cst);
            if (lib == nullptr || nvml_call_outstanding()) _exit(1);
            const Read r = read(*lib, 30.0);
            bool ok = r.stalls.empty() && r.states.size() == 4;
            for (const DeviceState& s : r.states) ok = ok && s.health == Health::kOk;
            _exit(ok ? 0 : 2);
        }
        int status = 0;
        waitpid(child, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        release(file);
    }),
             0);
}

TEST_CASE(a_library_wide_step_past_its_deadline_is_named_and_not_started_twice) {
    auto gate = std::make_shared<Gate>();
    auto job = [gate] { gate->wait(); };
    Stall stall;
    Status st;
    CHECK(!run_within(1.0, "nvmlInit_v2", job, &stall, &st));
    CHECK(st.ok());
    CHECK_EQ(stall.function, std::string("nvmlInit_v2"));
    CHECK_EQ(stall_text(stall, 1.0), std::string("nvmlInit_v2 did not return within 1 s"));
    CHECK(nvml_call_outstanding());
    Stall again;
    CHECK(!run_within(30.0, "nvmlInit_v2", job, &again, &st));
    CHECK(again.earlier);
    CHECK_EQ(gate->read(gate->runs), 1);
    gate->open();
    while (nvml_call_outstanding()) sched_yield();
    CHECK(run_within(30.0, "nvmlInit_v2", [] {}, &stall, &st));
}

TEST_CASE(a_step_about_one_gpu_stuck_keeps_that_gpu_from_later_steps_and_not_the_others) {
    auto gate = std::make_shared<Gate>();
    auto job = [gate] { gate->wait(); };
    Stall stall;
    Status st;
    CHECK(!run_within(0.2, "the enumeration of GPU 3", job, &stall, &st, 3));
    CHECK_EQ(stall.gpu, 3);
    // GPU 3 again: answered at once with the stall, nothing started; another GPU and the library go on
    Stall again;
    CHECK(!run_within(30.0, "the enumeration of GPU 3", [] {}, &again, &st, 3));
    CHECK(again.earlier && again.gpu == 3);
    CHECK(run_within(30.0, "the enumeration of GPU 4", [] {}, &again, &st, 4));
    CHECK(run_within(30.0, "the device enumeration", [] {}, &again, &st));
    gate->open();
    while (nvml_call_outstanding()) sched_yield();
    CHECK(run_within(30.0, "the enumeration of GPU 3", [] {}, &stall, &st, 3));
}

TEST_CASE(a_read_stalled_behind_a_stuck_call_names_that_call_too) {
    CHECK_EQ(in_child([](const NvmlLibrary& lib) {
        const std::string file = hang("remapped-rows", 1);
        read(lib, 1.0);                       // GPU 1 is stuck
        setenv("FAKE_NVML_HANG_GPU", "", 1);  // now every GPU's: as behind a driver's lock
        const Read again = read(lib, 10.0);   // GPU 2's worker starts a sixteenth after GPU 0's call
        CHECK_EQ(again.states.size(), static_cast<std::size_t>(4));
        if (again.states.size() != 4) return;
        CHECK(starts_with(again.states[0].health_text,
                          "unknown: nvmlDeviceGetRemappedRows did not return within 10 s (behind GPU 1's "
                          "nvmlDeviceGetRemappedRows, which has not returned for "));
        CHECK(starts_with(again.states[2].health_text,
                          "unknown: nvmlDeviceGetRemappedRows did not return within 10 s (behind GPU 1's"));
        release(file);
    }),
             0);
}

// The threads of this process now (/proc/self/task).
std::size_t threads() {
    std::size_t n = 0;
    if (DIR* dir = opendir("/proc/self/task")) {
        while (const dirent* e = readdir(dir))
            if (e->d_name[0] != '.') ++n;
        closedir(dir);
    }
    return n;
}

// Polls (an upper bound only) until `done`; whether it came.
template <typename Fn>
bool eventually(Fn done) {
    for (int i = 0; i < 10000; ++i) {
        if (done()) return true;
        usleep(1000);
    }
    return done();
}

TEST_CASE(a_driver_stuck_on_every_gpu_gets_one_thread_per_gpu_and_no_more) {
    CHECK_EQ(in_child([](const NvmlLibrary& lib) {
        setenv("FAKE_NVML_GPUS", "8", 1);                    // a host of 8
        const std::string file = hang("remapped-rows", -1);  // every GPU's: as behind a driver's lock
        const std::size_t before = threads();
        // each GPU's worker hands on once its call has lasted a sixteenth: the last starts about 4.4 s in
        const Read r = read(lib, 10.0);
        CHECK_EQ(r.stalls.size(), static_cast<std::size_t>(8));
        CHECK_EQ(r.states.size(), static_cast<std::size_t>(8));
        for (std::size_t i = 1; i < r.states.size(); ++i) {
            CHECK(starts_with(r.states[i].health_text,
                              "unknown: nvmlDeviceGetRemappedRows did not return within "
                              "10 s (behind GPU " +
                                  std::to_string(i - 1) + "'s nvmlDeviceGetRemappedRows"));
        }
        CHECK_EQ(threads(), before + 8);
        const Read again = read(lib, 30.0);  // every GPU is still stuck: at once, none read again
        CHECK_EQ(again.stalls.size(), static_cast<std::size_t>(8));
        CHECK_EQ(threads(), before + 9);  // one more, for the count: idle now, not stuck
        for (int gpu = 0; gpu < 8; ++gpu) CHECK_EQ(calls("remapped-rows", gpu), 1);
        release(file);
    }),
             0);
}

TEST_CASE(warm_reads_reuse_one_worker_and_an_idle_worker_ends) {
    CHECK_EQ(in_child([](const NvmlLibrary& lib) {
        const std::size_t before = threads();
        set_idle_worker_seconds_for_tests(30.0);
        for (int i = 0; i < 200; ++i) CHECK(read(lib, 30.0).status.ok());
        // the worker is back on the idle list before its caller wakes: the next read finds it there
        CHECK_EQ(threads(), before + 1);
        set_idle_worker_seconds_for_tests(0.05);
        CHECK(read(lib, 30.0).status.ok());  // parks with the short idle time
        CHECK(eventually([&] { return threads() == before; }));
        CHECK(read(lib, 30.0).status.ok());  // a new one when needed
        CHECK(eventually([&] { return threads() == before; }));
    }),
             0);
}

TEST_CASE(an_open_whose_nvml_init_hangs_fails_in_time_and_a_second_answers_at_once) {
    std::fflush(nullptr);
    const pid_t child = fork();  // a process that has not initialised the library yet
    if (child == 0) {
        const std::string file = hang("init", -1);
        const NvmlLibrary* lib = nullptr;
        Stall stall;
        const Status st = open_within(library(), 1.0, &lib, &stall);
        CHECK(lib == nullptr);
        CHECK(st.code == StatusCode::kNvml);
        CHECK_EQ(st.nvml_code, static_cast<int>(NVML_ERROR_TIMEOUT));
        CHECK_EQ(st.function, std::string("nvmlInit_v2"));
        CHECK(starts_with(st.message, "NVML did not answer: nvmlInit_v2 did not return within 1 s (library '" +
                                          library() + "', timeout 1 s). "));
        CHECK(st.message.find("dmesg") != std::string::npos);
        // the first is still stuck holding the loader's init lock: the second waits for neither
        Stall again;
        const Status second = open_within(library(), 30.0, &lib, &again);
        CHECK(again.earlier);
        CHECK(starts_with(second.message, "NVML did not answer: nvmlInit_v2 has not returned for "));
        CHECK_EQ(calls("init", -1), 1);
        release(file);
        CHECK(open_within(library(), 30.0, &lib, &stall).ok());
        CHECK(lib != nullptr);
        _exit(check::failures());
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_CASE(a_process_whose_open_stalled_still_forks_and_its_child_opens_afresh) {
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) {
        const std::string file = hang("init", -1);
        const NvmlLibrary* lib = nullptr;
        Stall stall;
        CHECK_EQ(open_within(library(), 1.0, &lib, &stall).nvml_code, static_cast<int>(NVML_ERROR_TIMEOUT));
        // the stuck nvmlInit holds the loader's init lock: a fork must not wait for it
        std::fflush(nullptr);
        const pid_t grandchild = fork();
        if (grandchild == 0) {
            unsetenv("FAKE_NVML_HANG_QUERY");  // this "driver" answers in the child
            const NvmlLibrary* opened = nullptr;
            Stall none;
            const Status st = open_within(library(), 30.0, &opened, &none);
            _exit(st.ok() && opened != nullptr && !nvml_call_outstanding() ? 0 : 1);
        }
        int status = 0;
        waitpid(grandchild, &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        release(file);
        _exit(check::failures());
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_CASE(an_enumeration_that_hangs_fails_in_time_and_a_second_answers_at_once) {
    CHECK_EQ(in_child([](const NvmlLibrary& lib) {
        const std::string file = hang("count", -1);
        Enumeration found;
        Stall stall;
        const Status st = enumerate_within(lib, 1.0, &found, &stall);
        CHECK_EQ(st.nvml_code, static_cast<int>(NVML_ERROR_TIMEOUT));
        CHECK_EQ(st.function, std::string("the device enumeration"));
        CHECK(starts_with(st.message, "NVML did not answer: the device enumeration did not return within 1 s"));
        const Status second = enumerate_within(lib, 30.0, &found, &stall);
        CHECK(stall.earlier);
        CHECK_EQ(second.nvml_code, static_cast<int>(NVML_ERROR_TIMEOUT));
        CHECK_EQ(calls("count", -1), 1);
        release(file);
        CHECK(enumerate_within(lib, 30.0, &found, &stall).ok());
        CHECK_EQ(found.devices.size(), static_cast<std::size_t>(4));
    }),
             0);
}

int main(int argc, char** argv) { return check::run(argc, argv); }
