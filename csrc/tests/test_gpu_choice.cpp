// The ranking of candidates under each busy-gpus policy (csrc/gpu_choice.*).
#include "gpu_choice.hpp"

#include "check.hpp"

using namespace flinkgpu;

namespace {

DeviceState gpu(unsigned index, Health health, bool busy) {
    DeviceState s;
    s.index = std::to_string(index);
    s.health = health;
    s.health_text = health == Health::kOk ? "ok" : health == Health::kDegraded ? "degraded: row remapping pending"
                                                                                : "unhealthy: InfoROM corrupted";
    s.busy = busy;
    if (busy) s.processes.push_back({77, 1, ProcessKind::kCompute, false, false});
    return s;
}

using Indices = std::vector<std::string>;

}  // namespace

int main() {
    BusyPolicy p = BusyPolicy::kIgnore;
    CHECK(parse_busy_policy("avoid", &p) && p == BusyPolicy::kAvoid);
    CHECK(parse_busy_policy("exclude", &p) && p == BusyPolicy::kExclude);
    CHECK(parse_busy_policy("ignore", &p) && p == BusyPolicy::kIgnore);
    // case and surrounding blanks ignored, as for the busy-gpus parameter: one rule for both
    CHECK(parse_busy_policy("EXCLUDE", &p) && p == BusyPolicy::kExclude);
    CHECK(parse_busy_policy(" Ignore\t", &p) && p == BusyPolicy::kIgnore);
    CHECK(!parse_busy_policy("", &p) && !parse_busy_policy("avoids", &p) && !parse_busy_policy("ex clude", &p));

    // 0 degraded+busy, 1 healthy+busy, 2 unhealthy, 3 degraded, 4 healthy, ..., 10 healthy
    std::vector<DeviceState> states = {gpu(0, Health::kDegraded, true), gpu(1, Health::kOk, true),
                                       gpu(2, Health::kUnhealthy, false), gpu(3, Health::kDegraded, false),
                                       gpu(4, Health::kOk, false), gpu(10, Health::kOk, false)};
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
    CHECK_EQ(r.left_out[0].second, std::string("busy: foreign process 77 (compute, not visible in this pid namespace)"));
    CHECK_EQ(r.left_out[1].first, std::string("1"));
    CHECK_EQ(r.left_out[2].first, std::string("2"));

    r = rank_gpus(states, BusyPolicy::kIgnore);  // Flink's order, degraded still last
    CHECK(r.indices == (Indices{"1", "4", "10", "0", "3"}));
    CHECK(r.ranks == (std::vector<int>{0, 0, 0, 2, 2}));

    // Health verdict: unhealthy findings before degraded ones, the first one is the health.
    DeviceState s;
    s.readings.remap_pending = true;
    s.readings.recovery_action = NVML_GPU_RECOVERY_ACTION_NODE_REBOOT;
    judge_health(&s);
    CHECK(s.health == Health::kUnhealthy);
    CHECK_EQ(s.health_text, std::string("unhealthy: GPU recovery action: reboot the node"));
    CHECK_EQ(s.findings.size(), static_cast<std::size_t>(2));
    s.readings = HealthReadings();
    s.readings.ecc_uncorrected_volatile = 1;
    judge_health(&s);
    CHECK_EQ(s.health_text, std::string("unhealthy: 1 uncorrectable volatile ECC error"));
    s.readings = HealthReadings();
    judge_health(&s);
    CHECK(s.health == Health::kOk && s.findings.empty() && s.health_text == "ok");
    return check::finish("test_gpu_choice");
}
