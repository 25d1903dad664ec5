// The process's metrics sampler (csrc/metrics_sampler.*): gauges read its snapshot, which one reader
// refreshes; health per GPU; what is not read in time is unknown; a fork()ed child samples for itself.
// Each case runs in a forked child with its own simulator spec (NVML reads it once per process).
#include "metrics_sampler.hpp"
#include "nvml_loader.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>

#include "check.hpp"
#include "simulated.hpp"

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

int main(int argc, char** argv) { return check::run(argc, argv); }
