#include "gpu_choice.hpp"

#include "gpu_index.hpp"

#include <algorithm>

namespace flinkgpu {
namespace {

const char* recovery_action_text(unsigned action) {
    switch (action) {
        case NVML_GPU_RECOVERY_ACTION_GPU_RESET: return "reset the GPU";
        case NVML_GPU_RECOVERY_ACTION_NODE_REBOOT: return "reboot the node";
        case NVML_GPU_RECOVERY_ACTION_DRAIN_P2P: return "drain peer-to-peer traffic";
        case NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET: return "drain peer-to-peer traffic and reset the GPU";
        default: return nullptr;
    }
}

}  // namespace

void judge_health(DeviceState* state) {
    const HealthReadings& r = state->readings;
    std::vector<std::string> bad, degraded;
    if (r.lost_code == NVML_ERROR_GPU_IS_LOST) {
        bad.push_back(std::string("GPU is lost (") + (r.lost_function ? r.lost_function : "a state query") +
                      " returned NVML_ERROR_GPU_IS_LOST)");
    } else if (r.lost_code == NVML_ERROR_RESET_REQUIRED) {
        bad.push_back(std::string("GPU reset required (") + (r.lost_function ? r.lost_function : "a state query") +
                      " returned NVML_ERROR_RESET_REQUIRED)");
    }
    if (r.inforom_corrupted) bad.push_back("InfoROM corrupted");
    if (r.remap_failed) bad.push_back("row remapping failed");
    if (r.ecc_uncorrected_volatile > 0)
        bad.push_back(std::to_string(r.ecc_uncorrected_volatile) + " uncorrectable volatile ECC error" +
                      (r.ecc_uncorrected_volatile == 1 ? "" : "s"));
    if (r.recovery_action != NVML_GPU_RECOVERY_ACTION_NONE) {
        const char* what = recovery_action_text(r.recovery_action);
        bad.push_back(std::string("GPU recovery action: ") +
                      (what ? what : "action " + std::to_string(r.recovery_action)));
    }
    if (r.remap_pending) degraded.push_back("row remapping pending");
    if (r.pages_pending) degraded.push_back("page retirement pending");
    state->findings.clear();
    for (const auto& f : bad) state->findings.push_back("unhealthy: " + f);
    for (const auto& f : degraded) state->findings.push_back("degraded: " + f);
    state->health = !bad.empty() ? Health::kUnhealthy : !degraded.empty() ? Health::kDegraded : Health::kOk;
    state->health_text = state->findings.empty() ? "ok" : state->findings.front();
}

namespace {

// Whether `text` is `word` (lower case), ASCII case ignored.
bool is_word(std::string_view text, std::string_view word) noexcept {
    if (text.size() != word.size()) return false;
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i] >= 'A' && text[i] <= 'Z' ? static_cast<char>(text[i] - 'A' + 'a') : text[i];
        if (c != word[i]) return false;
    }
    return true;
}

}  // namespace

bool parse_busy_policy(std::string_view text, BusyPolicy* out) noexcept {
    while (!text.empty() && static_cast<unsigned char>(text.front()) <= 0x20) text.remove_prefix(1);
    while (!text.empty() && static_cast<unsigned char>(text.back()) <= 0x20) text.remove_suffix(1);
    if (is_word(text, "avoid")) *out = BusyPolicy::kAvoid;
    else if (is_word(text, "exclude")) *out = BusyPolicy::kExclude;
    else if (is_word(text, "ignore")) *out = BusyPolicy::kIgnore;
    else return false;
    return true;
}

std::string busy_reason(const DeviceState& state) {
    std::string list;
    std::size_t count = 0;
    for (const GpuProcess& p : state.processes) {
        if (p.own) continue;
        if (count++ > 0) list += ", ";
        list += std::to_string(p.pid) + " (" + process_kind_name(p.kind);
        if (!p.visible) list += ", not visible in this pid namespace";
        list += ")";
    }
    if (count == 0) return std::string();
    return std::string(count == 1 ? "busy: foreign process " : "busy: foreign processes ") + list;
}

Ranking rank_gpus(const std::vector<DeviceState>& states, BusyPolicy policy) {
    struct Candidate {
        std::string index;
        int rank;
    };
    std::vector<Candidate> candidates;
    Ranking r;
    for (const DeviceState& s : states) {
        const std::string& index = s.index;
        if (s.health == Health::kUnhealthy) {
            r.left_out.emplace_back(index, s.health_text);
            continue;
        }
        const bool busy = s.busy && policy != BusyPolicy::kIgnore;
        if (busy && policy == BusyPolicy::kExclude) {
            r.left_out.emplace_back(index, busy_reason(s));
            continue;
        }
        candidates.push_back({index, (s.health == Health::kDegraded ? 2 : 0) + (busy ? 1 : 0)});
    }
    std::stable_sort(candidates.begin(), candidates.end(), [](const Candidate& a, const Candidate& b) {
        if (a.rank != b.rank) return a.rank < b.rank;
        return compare_indices(a.index, b.index) < 0;
    });
    for (const Candidate& c : candidates) {
        r.indices.push_back(c.index);
        r.ranks.push_back(c.rank);
    }
    std::stable_sort(r.left_out.begin(), r.left_out.end(),
                     [](const auto& a, const auto& b) { return compare_indices(a.first, b.first) < 0; });
    return r;
}

}  // namespace flinkgpu
