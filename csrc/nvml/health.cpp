#include "nvml/health.hpp"

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

namespace flinkgpu {
namespace {

// What a recovery action asks for, and how bad it is for handing the GPU out (the DRA driver's and
// DCGM's classes): nullptr for NONE.
struct RecoveryClass {
    const char* text;
    Health verdict;
};
RecoveryClass recovery_class(unsigned action) {
    switch (action) {
        case NVML_GPU_RECOVERY_ACTION_NONE: return {nullptr, Health::kOk};
        case NVML_GPU_RECOVERY_ACTION_GPU_RESET: return {"reset the GPU", Health::kUnhealthy};
        case NVML_GPU_RECOVERY_ACTION_NODE_REBOOT: return {"reboot the node", Health::kUnhealthy};
        case NVML_GPU_RECOVERY_ACTION_DRAIN_P2P: return {"drain peer-to-peer traffic", Health::kDegraded};
        case NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET:
            return {"drain peer-to-peer traffic and reset the GPU", Health::kUnhealthy};
        case NVML_GPU_RECOVERY_ACTION_RECOVER_IMEX_DOMAIN:
            return {"recover the IMEX domain (not a fault of this GPU)", Health::kOk};
        case NVML_GPU_RECOVERY_ACTION_BUS_RESET: return {"reset the GPU's PCIe bus", Health::kUnhealthy};
        case NVML_GPU_RECOVERY_ACTION_SYSTEM_REBOOT: return {"reboot the system", Health::kUnhealthy};
        default: return {"", Health::kUnhealthy};  // unknown to this build: assume the worst
    }
}

// The finding of one check on `r`, "" for none.
std::pair<std::string, Health> finding(Check check, const HealthReadings& r) {
    using F = std::pair<std::string, Health>;
    switch (check) {
        case Check::kInforom: return r.inforom_corrupted ? F{"InfoROM corrupted", Health::kUnhealthy} : F{};
        case Check::kRemappedRows:
            if (r.remap_failed) return {"row remapping failed", Health::kUnhealthy};
            if (r.remap_pending) return {"row remapping pending", Health::kDegraded};
            return {};
        case Check::kEcc:
            if (r.ecc_uncorrected_volatile == 0) return {};
            return {std::to_string(r.ecc_uncorrected_volatile) + " uncorrectable volatile ECC error" +
                        (r.ecc_uncorrected_volatile == 1 ? "" : "s"),
                    Health::kUnhealthy};
        case Check::kRecoveryAction: {
            const RecoveryClass c = recovery_class(r.recovery_action);
            if (c.text == nullptr) return {};
            if (c.text[0] == '\0')
                return {"GPU recovery action " + std::to_string(r.recovery_action) +
                            " (unknown to this build: treated as needing a reset)",
                        c.verdict};
            return {std::string("GPU recovery action: ") + c.text, c.verdict};
        }
        case Check::kFabric:
            switch (r.fabric.state) {
                case NVML_GPU_FABRIC_STATE_NOT_STARTED:
                    return {
                        "NVLink fabric registration not started: CUDA would fail with error 802; is the "
                        "Fabric Manager running?",
                        Health::kUnhealthy};
                case NVML_GPU_FABRIC_STATE_IN_PROGRESS:
                    return {
                        "NVLink fabric registration in progress: transient, the GPU is handed out once it "
                        "completes",
                        Health::kUnhealthy};
                case NVML_GPU_FABRIC_STATE_COMPLETED:
                    if (r.fabric.status != NVML_SUCCESS)
                        return {std::string("no NVLink peer-to-peer (fabric registration completed with ") +
                                    nvml_code_name(r.fabric.status) + ")",
                                Health::kDegraded};
                    // never required: a healthy HGX H100 on R580 reads N/A here and an all-zero cluster UUID
                    if (r.fabric.health_summary == NVML_GPU_FABRIC_HEALTH_SUMMARY_UNHEALTHY)
                        return {"no NVLink peer-to-peer (fabric health summary: unhealthy)", Health::kDegraded};
                    return {};
                default: return {};
            }
        case Check::kRetiredPages: return r.pages_pending ? F{"page retirement pending", Health::kDegraded} : F{};
        case Check::kNvlink:
            if (r.nvlinks_inactive == 0) return {};
            if (r.nvlinks_inactive < r.nvlinks)
                return {std::to_string(r.nvlinks_inactive) + " of " + std::to_string(r.nvlinks) + " NVLinks inactive",
                        Health::kDegraded};
            return {"all " + std::to_string(r.nvlinks) + " NVLinks inactive: cut off its NVSwitch fabric",
                    Health::kDegraded};
        case Check::kCount: break;
    }
    return {};
}

}  // namespace

namespace {

// Check `c`'s result on `r`: its outcome as read, and its finding where it has one.
CheckResult judge_check(const CheckSet& enforced, std::size_t c, const HealthReadings& r) {
    CheckResult result;
    result.enforced = enforced.test(c);
    result.outcome = r.answered[c];
    if (result.outcome != Outcome::kOk) return result;
    // a GPU without NVLink, or a PCIe board without its bridge (links it cannot use): nothing to judge
    if (static_cast<Check>(c) == Check::kNvlink &&
        (r.nvlinks == 0 || (r.nvlinks_inactive == r.nvlinks && !r.nvlink_fabric))) {
        result.outcome = Outcome::kNotApplicable;
        if (r.nvlinks > 0) result.finding = "no active NVLink";
        return result;
    }
    auto [text, verdict] = finding(static_cast<Check>(c), r);
    if (text.empty()) return result;
    result.outcome = Outcome::kFinding;
    result.verdict = verdict;
    result.finding = text;
    return result;
}

}  // namespace

void judge_added_check(const CheckSet& enforced, Check check, DeviceState* state) {
    if (!state->readings.unknown.empty()) return;  // nothing was read: no check has an outcome
    const auto c = static_cast<std::size_t>(check);
    CheckResult& result = state->checks[c];
    std::vector<std::string>& findings = state->findings;
    // what this check said before goes
    if (result.outcome == Outcome::kFinding && result.enforced) {
        const std::string old = result.finding;
        findings.erase(
            std::remove_if(findings.begin(), findings.end(),
                           [&](const std::string& f) { return f == "unhealthy: " + old || f == "degraded: " + old; }),
            findings.end());
        state->warnings.erase(std::remove(state->warnings.begin(), state->warnings.end(), old), state->warnings.end());
    }
    result = judge_check(enforced, c, state->readings);
    if (result.outcome == Outcome::kFinding && result.enforced) {
        if (result.verdict == Health::kOk) {
            state->warnings.push_back(result.finding);
        } else {
            const bool bad = result.verdict == Health::kUnhealthy;
            // unhealthy findings first
            auto at = findings.end();
            if (bad)
                at = std::find_if(findings.begin(), findings.end(),
                                  [](const std::string& f) { return f.rfind("unhealthy: ", 0) != 0; });
            findings.insert(at, (bad ? "unhealthy: " : "degraded: ") + result.finding);
        }
    }
    // the verdict of all findings, the read's own beyond the checks included
    const auto any = [&](const char* prefix) {
        return std::any_of(findings.begin(), findings.end(),
                           [&](const std::string& f) { return f.rfind(prefix, 0) == 0; });
    };
    state->health = any("unhealthy: ") ? Health::kUnhealthy : any("degraded: ") ? Health::kDegraded : Health::kOk;
    state->health_text = findings.empty() ? "ok" : findings.front();
}

void judge_health(const CheckSet& enforced, DeviceState* state) {
    const HealthReadings& r = state->readings;
    if (!r.unknown.empty()) {  // nothing was read: no check has an outcome
        state->warnings.clear();
        for (std::size_t c = 0; c < kCheckCount; ++c) {
            state->checks[c] = CheckResult();
            state->checks[c].enforced = enforced.test(c);
        }
        state->health = Health::kUnknown;
        state->health_text = "unknown: " + r.unknown;
        state->findings.assign(1, state->health_text);
        return;
    }
    std::vector<std::string> bad, degraded;
    const char* function = r.lost_function ? r.lost_function : "a state query";
    if (r.lost_code == NVML_ERROR_GPU_IS_LOST) {
        bad.push_back(std::string("GPU is lost (") + function + " returned NVML_ERROR_GPU_IS_LOST)");
    } else if (r.lost_code == NVML_ERROR_RESET_REQUIRED) {
        bad.push_back(std::string("GPU reset required (") + function + " returned NVML_ERROR_RESET_REQUIRED)");
    } else if (r.lost_code != NVML_SUCCESS) {
        bad.push_back(std::string("GPU no longer answers (") + function + " returned " + nvml_code_name(r.lost_code) +
                      ")");
    }
    state->warnings.clear();
    for (std::size_t c = 0; c < kCheckCount; ++c) {
        const CheckResult& result = state->checks[c] = judge_check(enforced, c, r);
        if (result.outcome != Outcome::kFinding || !result.enforced) continue;
        if (result.verdict == Health::kUnhealthy) bad.push_back(result.finding);
        else if (result.verdict == Health::kDegraded) degraded.push_back(result.finding);
        else state->warnings.push_back(result.finding);
    }
    state->findings.clear();
    for (const auto& f : bad) state->findings.push_back("unhealthy: " + f);
    for (const auto& f : degraded) state->findings.push_back("degraded: " + f);
    state->health = !bad.empty() ? Health::kUnhealthy : !degraded.empty() ? Health::kDegraded : Health::kOk;
    state->health_text = state->findings.empty() ? "ok" : state->findings.front();
}

}  // namespace flinkgpu
