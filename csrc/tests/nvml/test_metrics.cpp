// Live readings (csrc/nvml/metrics.*): the names and units, the index grammar, and the readings
// against the simulator (current and R535-era builds) and an old driver without the queries.
#include "nvml/loader.hpp"
#include "nvml/metrics.hpp"

#include <unistd.h>

#include <climits>
#include <cstdlib>
#include <functional>
#include <string>

#include "tests/check.hpp"
#include "tests/simulated.hpp"

using namespace flinkgpu;

namespace {

using simulated::env;
using simulated::with_spec;

// The reading of `metric` on the device `index`; -2 when the index is not found.
long long reading(const NvmlLibrary& lib, const char* index, Metric metric) {
    MetricDevice device;
    if (!find_metric_device(lib, index, &device)) return -2;
    return read_metric(lib, device, metric);
}

bool within(long long v, long long low, long long high) { return v >= low && v <= high; }

}  // namespace

TEST_CASE(metric_names_parse_in_the_order_of_the_enum) {
    // Names, in the order of the enum, and nothing else parses.
    const char* const names[] = {"utilization", "memory.used", "temperature", "power"};
    for (int i = 0; i < kMetricCount; ++i) {
        Metric m = Metric::kCount;
        CHECK(parse_metric(names[i], &m));
        CHECK(m == static_cast<Metric>(i));
        CHECK_EQ(std::string(metric_name(m)), std::string(names[i]));
    }
    Metric unused = Metric::kCount;
    CHECK(!parse_metric("", &unused) && !parse_metric("Power", &unused) && !parse_metric("memory", &unused));
    CHECK(!parse_metric(std::string_view("power\0x", 7), &unused));
}

TEST_CASE(units_are_whole_mib_and_rounded_watts) {
    // Units: MiB rounded down, watts rounded to nearest, no overflow at the top.
    CHECK_EQ(mib_from_bytes(0), 0LL);
    CHECK_EQ(mib_from_bytes((1ULL << 20) - 1), 0LL);
    CHECK_EQ(mib_from_bytes(3ULL << 20 | 5), 3LL);
    CHECK_EQ(mib_from_bytes(ULLONG_MAX), static_cast<long long>(ULLONG_MAX >> 20));
    CHECK_EQ(watts_from_milliwatts(0), 0LL);
    CHECK_EQ(watts_from_milliwatts(499), 0LL);
    CHECK_EQ(watts_from_milliwatts(500), 1LL);
    CHECK_EQ(watts_from_milliwatts(250499), 250LL);
    CHECK_EQ(watts_from_milliwatts(250500), 251LL);
    CHECK_EQ(watts_from_milliwatts(UINT_MAX), 4294967LL);
}

TEST_CASE(pinned_readings_on_the_current_and_the_r535_driver) {
    const std::string sim = env("FLINK_GPU_TEST_SIMULATOR"), r535 = env("FLINK_GPU_TEST_SIMULATOR_R535");
    // Pinned readings on the current driver (nvmlDeviceGetTemperatureV) and the R535-era one
    // (only nvmlDeviceGetTemperature); memory from the v2 query.
    const char* const pinned =
        R"({"devices": [{"utilization": 37, "temperature": 55, "power": 250.5, "memory_used": 3145733},)"
        R"({"utilization": 0, "temperature": 0, "power": 0}], "process_struct": "%s"})";
    for (const auto& [library, layout] : {std::pair(sim, "v2"), std::pair(r535, "r535")}) {
        std::string spec = pinned;
        spec.replace(spec.find("%s"), 2, layout);
        const bool current = std::string(layout) == "v2";
        CHECK_EQ(with_spec(library, spec,
                           [current](const NvmlLibrary& lib) {
            CHECK_EQ(lib.api().device_get_temperature_v != nullptr, current);
            CHECK(lib.api().device_get_temperature != nullptr);  // also where V exists: V may be refused
            CHECK_EQ(reading(lib, "0", Metric::kUtilization), 37LL);
            CHECK_EQ(reading(lib, "0", Metric::kTemperature), 55LL);
            CHECK_EQ(reading(lib, "0", Metric::kPower), 251LL);
            CHECK_EQ(reading(lib, "0", Metric::kMemoryUsed), 3LL);
            for (const Metric m : {Metric::kUtilization, Metric::kTemperature, Metric::kPower, Metric::kMemoryUsed})
                CHECK_EQ(reading(lib, "1", m), 0LL);  // zero is a reading, not "none"
        }),
                 0);
    }
}

TEST_CASE(unpinned_readings_follow_the_load_curve) {
    const std::string sim = env("FLINK_GPU_TEST_SIMULATOR");
    // Unpinned readings follow the load curve within its ranges.
    CHECK_EQ(with_spec(sim, R"({"devices": [{}, {}, {}]})",
                       [](const NvmlLibrary& lib) {
        for (const char* index : {"0", "1", "2"}) {
            CHECK(within(reading(lib, index, Metric::kUtilization), 0, 100));
            CHECK(within(reading(lib, index, Metric::kTemperature), 30, 80));
            CHECK(within(reading(lib, index, Metric::kPower), 50, 700));
            CHECK_EQ(reading(lib, index, Metric::kMemoryUsed), 0LL);
        }
    }),
             0);
}

TEST_CASE(the_index_grammar_is_canonical_decimal) {
    const std::string sim = env("FLINK_GPU_TEST_SIMULATOR");
    // The index grammar: canonical decimal numbers, "<gpu>" or "<gpu>:<slot>", a device that exists.
    CHECK_EQ(with_spec(sim, R"({"devices": [{}, {}]})",
                       [](const NvmlLibrary& lib) {
        MetricDevice device;
        CHECK(find_metric_device(lib, "1", &device) && !device.mig_unit && device.handle == device.gpu);
        for (const char* bad : {"", "2", "01", "+1", "-1", " 1", "1 ", "1:", ":1", "a", "0x1", "4294967296",
                                "99999999999999999999", "0:0", "1:01"})
            CHECK(!find_metric_device(lib, bad, &device));
        CHECK(!find_metric_device(lib, std::string_view("1\0", 2), &device));
    }),
             0);
}

TEST_CASE(every_fault_is_no_reading) {
    const std::string sim = env("FLINK_GPU_TEST_SIMULATOR");
    // Every fault is no reading: NOT_SUPPORTED, NO_PERMISSION, a lost GPU, a state error.
    const char* const faults =
        R"({"devices": [{"not_supported": ["utilization", "temperature", "power", "memory", "memory_v2"]},)"
        R"({"no_permission": ["utilization", "temperature", "power", "memory", "memory_v2"]},)"
        R"({"fault": "GPU_IS_LOST"}, {"health": {"state_error": "GPU_IS_LOST"}},)"
        R"({"health": {"state_error": "RESET_REQUIRED"}}, {"fault": "NO_PERMISSION"},)"
        R"({"not_supported": ["memory_v2"], "memory_used": 2097152}]})";
    CHECK_EQ(with_spec(sim, faults,
                       [](const NvmlLibrary& lib) {
        for (const char* index : {"0", "1", "2", "3", "4"})
            for (const Metric m : {Metric::kUtilization, Metric::kTemperature, Metric::kPower, Metric::kMemoryUsed})
                CHECK_EQ(reading(lib, index, m), -1LL);
        CHECK_EQ(reading(lib, "5", Metric::kPower), -2LL);      // its handle is refused
        CHECK_EQ(reading(lib, "6", Metric::kMemoryUsed), 2LL);  // the original query answers
    }),
             0);
}

TEST_CASE(a_mig_units_memory_is_its_own_and_its_temperature_and_power_its_gpus) {
    const std::string sim = env("FLINK_GPU_TEST_SIMULATOR");
    // MIG: a unit's memory is its own, its temperature and power its GPU's, no utilization; the GPU
    // in MIG mode has no utilization either.
    const char* const mig =
        R"({"devices": [{"temperature": 61, "power": 300, "utilization": 50, "memory_used": 1048576,)"
        R"("mig": {"mode": "enabled", "instances": [{"slot": 2, "memory_used": 5242880}, {"slot": 4}]}}]})";
    CHECK_EQ(with_spec(sim, mig,
                       [](const NvmlLibrary& lib) {
        MetricDevice unit;
        CHECK(find_metric_device(lib, "0:2", &unit) && unit.mig_unit && unit.handle != unit.gpu);
        CHECK_EQ(reading(lib, "0:2", Metric::kMemoryUsed), 5LL);
        CHECK_EQ(reading(lib, "0:4", Metric::kMemoryUsed), 0LL);
        CHECK_EQ(reading(lib, "0:2", Metric::kTemperature), 61LL);
        CHECK_EQ(reading(lib, "0:2", Metric::kPower), 300LL);
        CHECK_EQ(reading(lib, "0:2", Metric::kUtilization), -1LL);
        CHECK_EQ(reading(lib, "0", Metric::kUtilization), -1LL);
        CHECK_EQ(reading(lib, "0", Metric::kTemperature), 61LL);
        CHECK_EQ(reading(lib, "0:3", Metric::kPower), -2LL);  // an empty slot
        // the unit's own handle has no temperature or power (what the parent is read for)
        MetricDevice own = unit;
        own.gpu = unit.handle;
        CHECK_EQ(read_metric(lib, own, Metric::kTemperature), -1LL);
        CHECK_EQ(read_metric(lib, own, Metric::kPower), -1LL);
    }),
             0);
    CHECK_EQ(with_spec(sim, R"({"devices": [{}]})",
                       [](const NvmlLibrary& lib) {
        CHECK_EQ(reading(lib, "0:0", Metric::kMemoryUsed), -2LL);  // not in MIG mode
    }),
             0);
}

TEST_CASE(an_old_driver_without_the_reading_queries) {
    // An old driver without the reading queries: no readings, memory from the original query.
    if (!env("FLINK_GPU_TEST_FAKE_NVML").empty()) {
        CHECK_EQ(with_spec(env("FLINK_GPU_TEST_FAKE_NVML"), "{}",
                           [](const NvmlLibrary& lib) {
            for (const Metric m : {Metric::kUtilization, Metric::kTemperature, Metric::kPower})
                CHECK_EQ(reading(lib, "0", m), -1LL);
            CHECK_EQ(reading(lib, "0", Metric::kMemoryUsed), 0LL);
            CHECK_EQ(reading(lib, "0:0", Metric::kMemoryUsed), -2LL);  // no MIG entry points
        }),
                 0);
    }
}

TEST_CASE(a_reading_gives_the_nvml_code_that_says_why_it_is_missing) {
    const std::string sim = env("FLINK_GPU_TEST_SIMULATOR");
    const char* const spec =
        R"({"devices": [{"power": 100}, {"fault": "GPU_IS_LOST"}, {"health": {"state_error": "RESET_REQUIRED"}},)"
        R"({"not_supported": ["power"]}]})";
    CHECK_EQ(with_spec(sim, spec,
                       [](const NvmlLibrary& lib) {
        MetricDevice device;
        long long value = 7;
        CHECK(find_metric_device(lib, "0", &device));
        CHECK_EQ(read_metric_code(lib, device, Metric::kPower, &value), static_cast<int>(NVML_SUCCESS));
        CHECK_EQ(value, 100LL);
        CHECK(find_metric_device(lib, "1", &device));
        CHECK_EQ(read_metric_code(lib, device, Metric::kPower, &value), static_cast<int>(NVML_ERROR_GPU_IS_LOST));
        CHECK_EQ(value, -1LL);
        CHECK(find_metric_device(lib, "2", &device));
        CHECK_EQ(read_metric_code(lib, device, Metric::kTemperature, &value),
                 static_cast<int>(NVML_ERROR_RESET_REQUIRED));
        CHECK(find_metric_device(lib, "3", &device));
        CHECK_EQ(read_metric_code(lib, device, Metric::kPower, &value), static_cast<int>(NVML_ERROR_NOT_SUPPORTED));
        CHECK_EQ(value, -1LL);
    }),
             0);
}

int main(int argc, char** argv) {
    if (env("FLINK_GPU_TEST_SIMULATOR").empty() || env("FLINK_GPU_TEST_SIMULATOR_R535").empty()) return 2;
    return check::run(argc, argv);
}
