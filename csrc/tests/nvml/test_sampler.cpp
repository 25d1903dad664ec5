// The process's metrics sampler (csrc/nvml/sampler.*): gauges read its snapshot, which one reader
// refreshes; health per GPU; what is not read in time is unknown; a fork()ed child samples for itself.
// Each case runs in a forked child with its own simulator spec (NVML reads it once per process).
#include "nvml/loader.hpp"
#include "nvml/sampler.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <string>
#include <thread>

#include "tests/check.hpp"
#include "tests/simulated.hpp"

using namespace flinkgpu;
using namespace std::chrono_literals;

namespace {

using simulated::env;
using simulated::with_spec;

const std::chrono::milliseconds kWait = 10s;  // for a sample that must complete: generous, never waited out

// The sampled values of `index`, -2 for each when it is not watched... as the gauges show them now.
SampledGpu shown(const std::string& library, const char* index) {
    return sampled_gpu(library, index, std::chrono::steady_clock::now());
}

bool values_are(const SampledGpu& s, long long utilization, long long memory, long long temperature, long long power) {
    return s.values[0] == utilization && s.values[1] == memory && s.values[2] == temperature && s.values[3] == power;
}

bool unknown(const SampledGpu& s) { return s.health == GaugeHealth::kUnknown && values_are(s, -1, -1, -1, -1); }

int run_spec(const std::string& spec, void (*body)(const std::string& library)) {
    const std::string library = env("FLINK_GPU_TEST_SIMULATOR");
    return with_spec(library, spec, [&](const NvmlLibrary&) { body(library); });
}

const char* const kPinned =
    R"({"devices": [{"utilization": 37, "temperature": 55, "power": 250.5, "memory_used": 3145733},)"
    R"({"utilization": 5, "temperature": 40, "power": 100, "health": {"row_remap_pending": true}},)"
    R"({"utilization": 6, "temperature": 41, "power": 101, "health": {"inforom_corrupted": true}},)"
    R"({"fault": "GPU_IS_LOST"}, {"health": {"state_error": "RESET_REQUIRED"}}]})";

// Waits (polling; `limit` only bounds it) until `condition` holds; false when it never did.
template <typename Condition>
bool wait_for(Condition condition, std::chrono::seconds limit = 60s) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (!condition()) {
        if (std::chrono::steady_clock::now() >= deadline) return false;
        std::this_thread::sleep_for(5ms);
    }
    return true;
}

// A simulator spec whose `family` queries on GPU 1 hang while `file` exists, outside the driver's
// lock (a GPU stuck in its own channel): four GPUs with pinned readings.
std::string hanging_spec(const char* family, const std::string& file) {
    return std::string(R"({"driver_lock": false, "hang": [{"query": ")") + family +
           R"(", "device": 1, "while_exists": ")" + file +
           R"("}], "devices": [)"
           R"({"utilization": 10, "temperature": 40, "power": 100}, {"utilization": 11, "temperature": 41, "power": 101},)"
           R"({"utilization": 12, "temperature": 42, "power": 102}, {"utilization": 13, "temperature": 43, "power": 103}]})";
}

std::string g_hang_file;  // for the bodies (plain function pointers)

bool shows(const std::string& lib, const char* index, long long base, GaugeHealth health) {
    const SampledGpu s = shown(lib, index);
    return values_are(s, base, 0, base + 30, base + 90) && s.health == health;
}

}  // namespace

TEST_CASE(gauges_show_the_last_sample_with_each_gpus_health) {
    CHECK_EQ(run_spec(kPinned,
                      [](const std::string& lib) {
        for (const char* index : {"0", "1", "2", "3", "4", "5"}) CHECK(watch_gpu_metrics(lib, index, 1h));
        CHECK(sample_gpu_metrics_now(kWait));
        const SampledGpu ok = shown(lib, "0");
        CHECK(values_are(ok, 37, 3, 55, 251));
        CHECK(ok.health == GaugeHealth::kOk);
        const SampledGpu degraded = shown(lib, "1");  // read as usual, health says why to look
        CHECK(values_are(degraded, 5, 0, 40, 100));
        CHECK(degraded.health == GaugeHealth::kDegraded);
        const SampledGpu unhealthy = shown(lib, "2");  // still answering: its values are shown
        CHECK(values_are(unhealthy, 6, 0, 41, 101));
        CHECK(unhealthy.health == GaugeHealth::kUnhealthy);
        for (const char* lost : {"3", "4", "5"}) {  // GPU_IS_LOST, RESET_REQUIRED, no such GPU
            const SampledGpu s = shown(lib, lost);
            CHECK(values_are(s, -1, -1, -1, -1));
            CHECK(s.health == GaugeHealth::kUnhealthy);
        }
    }),
             0);
}

TEST_CASE(a_gpu_not_watched_is_unknown) {
    CHECK_EQ(run_spec(kPinned,
                      [](const std::string& lib) {
        CHECK(unknown(shown(lib, "0")));  // no sampler yet
        CHECK(watch_gpu_metrics(lib, "0", 1h));
        CHECK(sample_gpu_metrics_now(kWait));
        CHECK(unknown(shown(lib, "1")));
        CHECK(unknown(shown(lib + ".other", "0")));  // another library's GPU 0
    }),
             0);
}

TEST_CASE(a_sample_older_than_the_interval_and_the_margin_is_unknown) {
    CHECK_EQ(run_spec(kPinned,
                      [](const std::string& lib) {
        CHECK(watch_gpu_metrics(lib, "0", 3s));
        CHECK(sample_gpu_metrics_now(kWait));
        const auto now = std::chrono::steady_clock::now();
        CHECK(sampled_gpu(lib, "0", now + 3s + kSampleMargin - 100ms).health == GaugeHealth::kOk);
        CHECK(unknown(sampled_gpu(lib, "0", now + 3s + kSampleMargin + 1ms)));
    }),
             0);
}

TEST_CASE(the_interval_is_never_below_the_minimum) {
    CHECK_EQ(run_spec(kPinned,
                      [](const std::string& lib) {
        CHECK(watch_gpu_metrics(lib, "0", 10ms));
        CHECK(sample_gpu_metrics_now(kWait));
        // 10 ms would make it stale after 1.01 s; the minimum of 1 s after 2 s
        const auto now = std::chrono::steady_clock::now();
        CHECK(sampled_gpu(lib, "0", now + kMinMetricsInterval + kSampleMargin - 100ms).health == GaugeHealth::kOk);
    }),
             0);
}

TEST_CASE(gauge_reads_take_no_sample) {
    CHECK_EQ(run_spec(kPinned,
                      [](const std::string& lib) {
        CHECK(watch_gpu_metrics(lib, "0", 1h));
        CHECK(sample_gpu_metrics_now(kWait));
        const unsigned long long before = completed_samples();
        for (int i = 0; i < 10000; ++i) CHECK(shown(lib, "0").health == GaugeHealth::kOk);
        CHECK_EQ(completed_samples(), before);
        CHECK(sample_gpu_metrics_now(kWait));  // only the trigger (or the pace) takes one
        CHECK_EQ(completed_samples(), before + 1);
    }),
             0);
}

TEST_CASE(an_nvml_that_cannot_be_loaded_is_unknown) {
    CHECK_EQ(run_spec(kPinned,
                      [](const std::string&) {
        const std::string missing = "/nonexistent/libnvidia-ml.so.1";
        CHECK(watch_gpu_metrics(missing, "0", 1h));
        CHECK(sample_gpu_metrics_now(kWait));
        CHECK(unknown(shown(missing, "0")));
    }),
             0);
}

TEST_CASE(a_forked_child_samples_with_a_reader_of_its_own) {
    CHECK_EQ(run_spec(kPinned,
                      [](const std::string& lib) {
        CHECK(watch_gpu_metrics(lib, "0", 1h));
        CHECK(sample_gpu_metrics_now(kWait));
        const pid_t child = fork();
        if (child == 0) {
            // the parent's reader does not exist here: the child's first call starts one,
            // which resolves the GPU's handles again for this process
            const bool sampled = sample_gpu_metrics_now(kWait);
            const SampledGpu s = shown(lib, "0");
            _exit(sampled && completed_samples() == 1 && values_are(s, 37, 3, 55, 251) && s.health == GaugeHealth::kOk
                      ? 0
                      : 1);
        }
        int status = -1;
        CHECK(child > 0 && waitpid(child, &status, 0) == child);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
        CHECK(sample_gpu_metrics_now(kWait));  // the parent's reader goes on
    }),
             0);
}

TEST_CASE(a_gpu_whose_readings_hang_is_unknown_and_the_others_are_read_on) {
    g_hang_file = "/tmp/flink-gpu-sampler-hang-" + std::to_string(getpid());
    CHECK_EQ(run_spec(hanging_spec("power", g_hang_file),
                      [](const std::string& lib) {
        for (const char* index : {"0", "1", "2"}) CHECK(watch_gpu_metrics(lib, index, 1h));
        CHECK(sample_gpu_metrics_now(kWait));
        std::ofstream(g_hang_file).put('x');
        const unsigned long long before = completed_samples();
        (void)sample_gpu_metrics_now(0ms);                              // a trigger: GPU 1's power query sticks
        CHECK(wait_for([&] { return completed_samples() > before; }));  // the sample completes without it
        CHECK(unknown(shown(lib, "1")));
        CHECK(shows(lib, "0", 10, GaugeHealth::kOk) && shows(lib, "2", 12, GaugeHealth::kOk));
        // the next sample reads GPUs 0 and 2 again (renewed after `asked`), GPU 1 not (its read is out)
        const auto asked = std::chrono::steady_clock::now();
        CHECK(sampled_gpu(lib, "0", asked + 1h + kSampleMargin).health == GaugeHealth::kUnknown);  // read before
        (void)sample_gpu_metrics_now(0ms);
        CHECK(wait_for([&] { return completed_samples() > before + 1; }));
        CHECK(sampled_gpu(lib, "0", asked + 1h + kSampleMargin).health == GaugeHealth::kOk);
        CHECK(sampled_gpu(lib, "2", asked + 1h + kSampleMargin).health == GaugeHealth::kOk);
        CHECK(unknown(shown(lib, "1")));
        std::remove(g_hang_file.c_str());
        // released: its read returns and it is read again; its health (unknown since its read was late)
        // with the first health read that finds it answering, which may be the next sample's
        CHECK(wait_for([&] { return sample_gpu_metrics_now(kWait) && shows(lib, "1", 11, GaugeHealth::kOk); }));
    }),
             0);
    std::remove(g_hang_file.c_str());
}

TEST_CASE(a_gpu_whose_state_read_hangs_is_unknown_and_the_others_keep_their_findings) {
    g_hang_file = "/tmp/flink-gpu-sampler-hang-" + std::to_string(getpid());
    CHECK_EQ(run_spec(hanging_spec("field_values", g_hang_file),
                      [](const std::string& lib) {
        for (const char* index : {"0", "1", "2"}) CHECK(watch_gpu_metrics(lib, index, 1h));
        CHECK(sample_gpu_metrics_now(kWait));
        std::ofstream(g_hang_file).put('x');
        // a GPU watched now gets its findings at once: a health read, which sticks in GPU 1's state
        const unsigned long long before = completed_samples();
        CHECK(watch_gpu_metrics(lib, "3", 1h));
        CHECK(wait_for([&] { return completed_samples() > before; }));
        CHECK(unknown(shown(lib, "1")));
        // GPU 0 was read before it, GPU 2 not reached: its earlier findings stand
        CHECK(shows(lib, "0", 10, GaugeHealth::kOk) && shows(lib, "2", 12, GaugeHealth::kOk));
        // the next health read passes GPU 1 by (the stuck state read is its one thread) and reads GPU 3
        CHECK(wait_for([&] {
            (void)sample_gpu_metrics_now(0ms);
            return shows(lib, "3", 13, GaugeHealth::kOk);
        }));
        CHECK(unknown(shown(lib, "1")));
        CHECK(shows(lib, "0", 10, GaugeHealth::kOk) && shows(lib, "2", 12, GaugeHealth::kOk));
        std::remove(g_hang_file.c_str());
        CHECK(wait_for([&] {  // released: a health read finds it answering, then it is read again
            (void)sample_gpu_metrics_now(0ms);
            return shows(lib, "1", 11, GaugeHealth::kOk);
        }));
    }),
             0);
    std::remove(g_hang_file.c_str());
}

int main(int argc, char** argv) { return check::run(argc, argv); }
