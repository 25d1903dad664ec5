// The health verdict on a device's readings (csrc/nvml/health.*).
#include "nvml/health.hpp"

#include "tests/check.hpp"

using namespace flinkgpu;

namespace {

// Readings with every check answered, nothing found.
HealthReadings answered_all() {
    HealthReadings r;
    r.answered.fill(Outcome::kOk);
    return r;
}

}  // namespace

TEST_CASE(unhealthy_findings_come_before_degraded_ones) {
    // Health verdict: unhealthy findings before degraded ones, the first one is the health.
    DeviceState s;
    s.readings = answered_all();
    s.readings.remap_pending = true;
    s.readings.recovery_action = NVML_GPU_RECOVERY_ACTION_NODE_REBOOT;
    judge_health(all_checks(), &s);
    CHECK(s.health == Health::kUnhealthy);
    CHECK_EQ(s.health_text, std::string("unhealthy: GPU recovery action: reboot the node"));
    CHECK_EQ(s.findings.size(), static_cast<std::size_t>(2));
    s.readings = answered_all();
    s.readings.ecc_uncorrected_volatile = 1;
    judge_health(all_checks(), &s);
    CHECK_EQ(s.health_text, std::string("unhealthy: 1 uncorrectable volatile ECC error"));
    s.readings = answered_all();
    judge_health(all_checks(), &s);
    CHECK(s.health == Health::kOk && s.findings.empty() && s.health_text == "ok");
}

TEST_CASE(a_check_that_was_not_read_finds_nothing) {
    DeviceState s;
    // A check that was not read finds nothing, whatever its reading says, and says so.
    s.readings = HealthReadings();
    s.readings.remap_failed = true;
    judge_health(all_checks(), &s);
    CHECK(s.health == Health::kOk);
    CHECK(s.checks[static_cast<std::size_t>(Check::kRemappedRows)].outcome == Outcome::kNotSupported);
}

TEST_CASE(recovery_actions_rank_by_their_class) {
    DeviceState s;
    // Recovery actions by class (issue 23: DCGM's and the DRA driver's classes).
    struct ActionCase {
        unsigned action;
        Health health;
        const char* text;
    };
    const ActionCase actions[] = {
        {NVML_GPU_RECOVERY_ACTION_NONE, Health::kOk, "ok"},
        {NVML_GPU_RECOVERY_ACTION_GPU_RESET, Health::kUnhealthy, "unhealthy: GPU recovery action: reset the GPU"},
        {NVML_GPU_RECOVERY_ACTION_NODE_REBOOT, Health::kUnhealthy, "unhealthy: GPU recovery action: reboot the node"},
        {NVML_GPU_RECOVERY_ACTION_DRAIN_P2P, Health::kDegraded,
         "degraded: GPU recovery action: drain peer-to-peer traffic"},
        {NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET, Health::kUnhealthy,
         "unhealthy: GPU recovery action: drain peer-to-peer traffic and reset the GPU"},
        {NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN, Health::kOk, "ok"},
        {NVML_GPU_RECOVERY_ACTION_BUS_RESET, Health::kUnhealthy,
         "unhealthy: GPU recovery action: reset the GPU's PCIe bus"},
        {NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT, Health::kUnhealthy,
         "unhealthy: GPU recovery action: reboot the system"},
        {42, Health::kUnhealthy,
         "unhealthy: GPU recovery action 42 (unknown to this build: treated as needing a reset)"},
    };
    for (const ActionCase& c : actions) {
        s.readings = answered_all();
        s.readings.recovery_action = c.action;
        judge_health(all_checks(), &s);
        CHECK(s.health == c.health);
        CHECK_EQ(s.health_text, std::string(c.text));
        CHECK_EQ(s.warnings.size(), static_cast<std::size_t>(c.action == NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN));
    }
}

TEST_CASE(the_nvlink_fabric_never_requires_a_health_summary) {
    DeviceState s;
    // NVLink fabric: never requires a health summary or cluster UUID.
    struct FabricCase {
        unsigned state;
        int status;
        unsigned summary;
        Health health;
        const char* starts;
    };
    const FabricCase fabrics[] = {
        {NVML_GPU_FABRIC_STATE_NOT_SUPPORTED, NVML_SUCCESS, 0, Health::kOk, "ok"},
        {NVML_GPU_FABRIC_STATE_NOT_STARTED, NVML_SUCCESS, 0, Health::kUnhealthy,
         "unhealthy: NVLink fabric registration not started: CUDA would fail with error 802"},
        {NVML_GPU_FABRIC_STATE_IN_PROGRESS, NVML_SUCCESS, 0, Health::kUnhealthy,
         "unhealthy: NVLink fabric registration in progress: transient"},
        {NVML_GPU_FABRIC_STATE_COMPLETED, NVML_SUCCESS, NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED, Health::kOk,
         "ok"},
        {NVML_GPU_FABRIC_STATE_COMPLETED, NVML_SUCCESS, NVML_GPU_FABRIC_HEALTH_SUMMARY_HEALTHY, Health::kOk, "ok"},
        {NVML_GPU_FABRIC_STATE_COMPLETED, NVML_ERROR_UNKNOWN, 0, Health::kDegraded, "degraded: no NVLink peer-to-peer"},
        {NVML_GPU_FABRIC_STATE_COMPLETED, NVML_SUCCESS, NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY, Health::kDegraded,
         "degraded: no NVLink peer-to-peer (fabric health summary: unhealthy)"},
    };
    for (const FabricCase& c : fabrics) {
        s.readings = answered_all();
        s.readings.fabric.state = c.state;
        s.readings.fabric.status = c.status;
        s.readings.fabric.health_summary = c.summary;
        judge_health(all_checks(), &s);
        CHECK(s.health == c.health);
        CHECK_EQ(s.health_text.rfind(c.starts, 0), static_cast<std::size_t>(0));
    }
}

TEST_CASE(a_check_not_enforced_still_reports_its_finding) {
    DeviceState s;
    // A check not enforced still reports its finding, but health ignores it; lost is always enforced.
    s.readings = answered_all();
    s.readings.inforom_corrupted = true;
    CheckSet without_inforom = all_checks();
    without_inforom.reset(static_cast<std::size_t>(Check::kInforom));
    judge_health(without_inforom, &s);
    CHECK(s.health == Health::kOk);
    const CheckResult& inforom = s.checks[static_cast<std::size_t>(Check::kInforom)];
    CHECK(inforom.outcome == Outcome::kFinding && !inforom.enforced && inforom.verdict == Health::kUnhealthy);
    CHECK_EQ(inforom.finding, std::string("InfoROM corrupted"));
    s.readings.lost_code = NVML_ERROR_GPU_IS_LOST;
    judge_health(CheckSet(), &s);
    CHECK(s.health == Health::kUnhealthy);
}

TEST_CASE(nvlinks_some_inactive_degrade_all_inactive_only_in_a_fabric) {
    DeviceState s;
    s.readings = answered_all();
    s.readings.nvlinks = 18;
    s.readings.nvlinks_inactive = 4;
    judge_health(all_checks(), &s);
    CHECK_EQ(s.health_text, std::string("degraded: 4 of 18 NVLinks inactive"));
    s.readings.nvlinks_inactive = 18;  // a PCIe board without its bridge: its links cannot be used
    judge_health(all_checks(), &s);
    CHECK(s.health == Health::kOk);
    const CheckResult& nvlink = s.checks[static_cast<std::size_t>(Check::kNvlink)];
    CHECK(nvlink.outcome == Outcome::kNotApplicable && nvlink.finding == "no active NVLink");
    s.readings.nvlink_fabric = true;  // cut off its NVSwitch fabric
    judge_health(all_checks(), &s);
    CHECK_EQ(s.health_text, std::string("degraded: all 18 NVLinks inactive: cut off its NVSwitch fabric"));
    s.readings.nvlinks = 0;  // no NVLink at all
    judge_health(all_checks(), &s);
    CHECK(s.health == Health::kOk);
    CHECK(s.checks[static_cast<std::size_t>(Check::kNvlink)].outcome == Outcome::kNotApplicable);
}

TEST_CASE(a_check_added_after_the_read_keeps_what_the_read_decided) {
    // the read made it unhealthy beyond the checks (a MIG GPU without instances): the nvlink check adds to that
    DeviceState s;
    s.readings = answered_all();
    judge_health(all_checks(), &s);
    s.health = Health::kUnhealthy;
    s.health_text = "unhealthy: MIG mode is enabled but it has no MIG instances";
    s.findings = {s.health_text};
    s.readings.nvlinks = 4;
    s.readings.nvlinks_inactive = 1;
    judge_added_check(all_checks(), Check::kNvlink, &s);
    CHECK(s.health == Health::kUnhealthy);
    CHECK_EQ(s.health_text, std::string("unhealthy: MIG mode is enabled but it has no MIG instances"));
    CHECK(s.findings.size() == 2 && s.findings[1] == "degraded: 1 of 4 NVLinks inactive");
    // on a healthy GPU it is the verdict; left out of the checks, it is shown but decides nothing
    DeviceState t;
    t.readings = s.readings;
    judge_health(all_checks(), &t);
    t.readings.nvlinks_inactive = 2;
    judge_added_check(all_checks(), Check::kNvlink, &t);
    CHECK(t.findings == std::vector<std::string>{"degraded: 2 of 4 NVLinks inactive"});  // judged again: one
    t.readings.nvlinks_inactive = 0;
    judge_added_check(all_checks(), Check::kNvlink, &t);
    CHECK(t.health == Health::kOk && t.health_text == "ok" && t.findings.empty());
    CheckSet without = all_checks();
    without.reset(static_cast<std::size_t>(Check::kNvlink));
    DeviceState u;
    u.readings = s.readings;
    judge_health(without, &u);
    CHECK(u.health == Health::kOk);
    CHECK(u.checks[static_cast<std::size_t>(Check::kNvlink)].outcome == Outcome::kFinding);
}

int main(int argc, char** argv) { return check::run(argc, argv); }
