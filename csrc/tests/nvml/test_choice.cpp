// The ranking of candidates under each busy-gpus policy (csrc/nvml/choice.*).
#include "nvml/choice.hpp"
#include "nvml/health.hpp"

#include "tests/check.hpp"

using namespace flinkgpu;

namespace {

DeviceState gpu(unsigned index, Health health, bool busy) {
    DeviceState s;
    s.index = std::to_string(index);
    s.health = health;
    s.health_text = health == Health::kOk         ? "ok"
                    : health == Health::kDegraded ? "degraded: row remapping pending"
                                                  : "unhealthy: InfoROM corrupted";
    s.busy = busy;
    if (busy) s.processes.push_back({77, 1, ProcessKind::kCompute, false, false});
    return s;
}

using Indices = std::vector<std::string>;

}  // namespace

TEST_CASE(busy_gpus_values_read_with_case_and_blanks_ignored) {
    BusyPolicy p = BusyPolicy::kIgnore;
    CHECK(parse_busy_policy("avoid", &p) && p == BusyPolicy::kAvoid);
    CHECK(parse_busy_policy("exclude", &p) && p == BusyPolicy::kExclude);
    CHECK(parse_busy_policy("ignore", &p) && p == BusyPolicy::kIgnore);
    // case and surrounding blanks ignored, as for the busy-gpus parameter: one rule for both
    CHECK(parse_busy_policy("EXCLUDE", &p) && p == BusyPolicy::kExclude);
    CHECK(parse_busy_policy(" Ignore\t", &p) && p == BusyPolicy::kIgnore);
    CHECK(!parse_busy_policy("", &p) && !parse_busy_policy("avoids", &p) && !parse_busy_policy("ex clude", &p));
}

TEST_CASE(candidates_rank_by_health_then_busy_under_each_policy) {
    // 0 degraded+busy, 1 healthy+busy, 2 unhealthy, 3 degraded, 4 healthy, ..., 10 healthy
    std::vector<DeviceState> states = {gpu(0, Health::kDegraded, true),   gpu(1, Health::kOk, true),
                                       gpu(2, Health::kUnhealthy, false), gpu(3, Health::kDegraded, false),
                                       gpu(4, Health::kOk, false),        gpu(10, Health::kOk, false)};
    Ranking r = rank_gpus(states, BusyPolicy::kAvoid);
    CHECK(r.indices == (Indices{"4", "10", "1", "3", "0"}));
    CHECK(r.ranks == (std::vector<int>{0, 0, 1, 2, 3}));
    CHECK_EQ(r.left_out.size(), static_cast<std::size_t>(1));
    CHECK_EQ(r.left_out[0].first, std::string("2"));
    CHECK_EQ(r.left_out[0].second, std::string("unhealthy: InfoROM corrupted"));

    r = rank_gpus(states, BusyPolicy::kExclude);
    CHECK(r.indices == (Indices{"4", "10", "3"}));
    CHECK_EQ(r.left_out.size(), static_cast<std::size_t>(3));
    CHECK_EQ(r.left_out[0].first, std::string("0"));
    CHECK_EQ(r.left_out[0].second,
             std::string("busy: foreign process 77 (compute, not visible in this pid namespace)"));
    CHECK_EQ(r.left_out[1].first, std::string("1"));
    CHECK_EQ(r.left_out[2].first, std::string("2"));

    r = rank_gpus(states, BusyPolicy::kIgnore);  // Flink's order, degraded still last
    CHECK(r.indices == (Indices{"1", "4", "10", "0", "3"}));
    CHECK(r.ranks == (std::vector<int>{0, 0, 0, 2, 2}));
    // states in any order rank the same: lowest index first within a class
    std::vector<DeviceState> reversed(states.rbegin(), states.rend());
    CHECK(rank_gpus(reversed, BusyPolicy::kIgnore).indices == r.indices);
    CHECK(rank_gpus(reversed, BusyPolicy::kIgnore).left_out == r.left_out);
}

TEST_CASE(a_gpu_not_read_in_time_is_unknown_and_never_offered) {
    DeviceState late;
    late.index = "1";
    late.nvml_index = 1;
    late.readings.unknown = "nvmlDeviceGetRemappedRows did not return within 5 s";
    judge_health(all_checks(), &late);
    CHECK(late.health == Health::kUnknown);
    CHECK_EQ(late.health_text, std::string("unknown: nvmlDeviceGetRemappedRows did not return within 5 s"));
    for (const CheckResult& c : late.checks) CHECK(c.outcome == Outcome::kNotSupported);
    for (BusyPolicy policy : {BusyPolicy::kAvoid, BusyPolicy::kExclude, BusyPolicy::kIgnore}) {
        const Ranking r = rank_gpus({gpu(0, Health::kOk, false), late}, policy);
        CHECK(r.indices == (Indices{"0"}));
        CHECK_EQ(r.left_out.size(), static_cast<std::size_t>(1));
        if (!r.left_out.empty()) {
            CHECK_EQ(r.left_out[0].first, std::string("1"));
            CHECK_EQ(r.left_out[0].second, late.health_text);
        }
    }
}

int main(int argc, char** argv) { return check::run(argc, argv); }
