#include "nvml/choice.hpp"

#include "base/gpu_index.hpp"
#include "nvml/health.hpp"

#include <algorithm>
#include <cstdlib>
#include <new>

namespace flinkgpu {
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

// Java's trim: chars <= U+0020 at either end.
std::string_view java_trimmed(std::string_view text) noexcept {
    while (!text.empty() && static_cast<unsigned char>(text.front()) <= 0x20) text.remove_prefix(1);
    while (!text.empty() && static_cast<unsigned char>(text.back()) <= 0x20) text.remove_suffix(1);
    return text;
}

}  // namespace

bool parse_topology_policy(std::string_view text, TopologyPolicy* out) noexcept {
    text = java_trimmed(text);
    if (is_word(text, "prefer")) *out = TopologyPolicy::kPrefer;
    else if (is_word(text, "ignore")) *out = TopologyPolicy::kIgnore;
    else return false;
    return true;
}

bool parse_busy_policy(std::string_view text, BusyPolicy* out) noexcept {
    text = java_trimmed(text);
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
        if (s.health == Health::kUnhealthy || s.health == Health::kUnknown) {
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
    // States come in index order (a choice's do): then only the ranks need sorting, stably.
    auto by_index = [](const Candidate& a, const Candidate& b) { return compare_indices(a.index, b.index) < 0; };
    if (!std::is_sorted(candidates.begin(), candidates.end(), by_index))
        std::stable_sort(candidates.begin(), candidates.end(), by_index);
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Candidate& a, const Candidate& b) { return a.rank < b.rank; });
    for (const Candidate& c : candidates) {
        r.indices.push_back(c.index);
        r.ranks.push_back(c.rank);
    }
    auto out_by_index = [](const auto& a, const auto& b) { return compare_indices(a.first, b.first) < 0; };
    if (!std::is_sorted(r.left_out.begin(), r.left_out.end(), out_by_index))
        std::stable_sort(r.left_out.begin(), r.left_out.end(), out_by_index);
    return r;
}

}  // namespace flinkgpu

namespace flinkgpu {

void judge_nvlinks(const Topology& topology, const CheckSet& enforced, std::vector<DeviceState>* states) {
    for (DeviceState& s : *states) {
        const auto found = topology.nvlink.find(s.nvml_index);
        if (s.mig_slot || !s.readings.unknown.empty() || found == topology.nvlink.end()) continue;
        HealthReadings& r = s.readings;
        r.answered[static_cast<std::size_t>(Check::kNvlink)] =
            found->second.known ? Outcome::kOk : Outcome::kNotSupported;
        r.nvlinks = found->second.count;
        r.nvlinks_inactive = found->second.inactive;
        // a link to an NVSwitch, or a fabric registration (an inactive link may not say where it leads)
        r.nvlink_fabric = found->second.to_switch || r.fabric.state != NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
        judge_added_check(enforced, Check::kNvlink, &s);
    }
}

ReadPlan read_plan(BusyPolicy policy) noexcept {
    ReadPlan plan;
    plan.processes = policy != BusyPolicy::kIgnore;  // ignore never looks at them
    return plan;
}

Status choose_gpus(const NvmlLibrary& lib, const std::vector<std::string>& enumerated, pid_t owner, pid_t taskmanager,
                   BusyPolicy policy, const CheckSet& enforced, double timeout_seconds, Choice* out,
                   double spent_seconds, bool fresh_inforom, const ReadScope& scope,
                   const Topology* topology) noexcept {
    try {
        out->states.clear();
        out->unread.clear();
        std::vector<DeviceState> now;
        bool count_known = false;
        unsigned count = 0;
        ReadPlan plan = read_plan(policy);
        plan.fresh_inforom = fresh_inforom;
        plan.scope = scope;
        if (const Status st = query_states_within(lib, owner, taskmanager, enforced, plan, timeout_seconds, &now,
                                                  &out->stalls, &count_known, spent_seconds, &count);
            !st.ok())
            return st;
        if (scope.every_read && !count_known) {
            // No enumeration to name the devices by, and not even their count was read: NVML did not answer.
            for (const Stall& s : out->stalls)
                if (s.gpu == ReadMonitor::kLibrary) return stall_failure(s, timeout_seconds, lib.path());
            return nvml_failure(NVML_ERROR_TIMEOUT, "nvmlDeviceGetCount_v2", "NVML did not say how many GPUs it has.");
        }
        if (scope.every_read && count_known && scope.scoped()) {
            // the GPUs the scope did not read have no state
            std::vector<bool> read(count, false);
            for (const DeviceState& s : now)
                if (s.nvml_index < count) read[s.nvml_index] = true;
            for (unsigned gpu = 0; gpu < count; ++gpu)
                if (!read[gpu]) out->unread.push_back(std::to_string(gpu));
        }
        // Not even the count was read: every device is unknown for the library-wide call that stalled.
        std::string uncounted;
        for (const Stall& s : out->stalls)
            if (!count_known && s.gpu == ReadMonitor::kLibrary)
                uncounted = "not read: " + stall_text(s, timeout_seconds);
        out->states.reserve(enumerated.size());
        if (scope.every_read) out->states = std::move(now);
        std::size_t next = 0;  // both are in index order: a walk, searching only where they differ
        for (const std::string& index : scope.every_read ? std::vector<std::string>() : enumerated) {
            if (next < now.size() && now[next].index == index) {
                out->states.push_back(std::move(now[next++]));
                continue;
            }
            auto found = std::find_if(now.begin(), now.end(), [&](const DeviceState& s) { return s.index == index; });
            if (found != now.end()) {
                next = static_cast<std::size_t>(found - now.begin()) + 1;
                out->states.push_back(std::move(*found));
                continue;
            }
            // Gone since the enumeration: its GPU refused its handle or MIG layout (one state for
            // the GPU), or the MIG unit is no longer there. Unless a scoped read did not read its GPU.
            const std::size_t colon = index.find(':');
            const std::string gpu = index.substr(0, colon);
            auto parent = std::find_if(now.begin(), now.end(), [&](const DeviceState& s) { return s.index == gpu; });
            if (scope.scoped() && count_known && parent == now.end() &&
                std::none_of(now.begin(), now.end(),
                             [&](const DeviceState& s) { return std::to_string(s.nvml_index) == gpu; })) {
                out->unread.push_back(index);
                continue;
            }
            DeviceState gone;
            if (!count_known) {
                gone.readings.unknown = uncounted.empty() ? "not read in time" : uncounted;
                gone.processes_read = false;
                judge_health(enforced, &gone);
            } else if (parent != now.end() &&
                       (parent->readings.lost_code != NVML_SUCCESS || parent->health == Health::kUnknown)) {
                gone = *parent;
            } else {
                gone.readings.lost_code = NVML_ERROR_NOT_FOUND;
                gone.readings.lost_function =
                    colon == std::string::npos ? "nvmlDeviceGetCount_v2" : "nvmlDeviceGetMigDeviceHandleByIndex";
                judge_health(enforced, &gone);
            }
            gone.index = index;
            gone.nvml_index = static_cast<unsigned>(std::strtoul(gpu.c_str(), nullptr, 10));
            gone.mig_slot.reset();
            if (colon != std::string::npos)
                gone.mig_slot = static_cast<unsigned>(std::strtoul(index.c_str() + colon + 1, nullptr, 10));
            out->states.push_back(std::move(gone));
        }
        for (const DeviceState& s : out->states)
            if (!s.mig_slot &&
                (s.readings.lost_code == NVML_ERROR_GPU_IS_LOST || s.readings.lost_code == NVML_ERROR_RESET_REQUIRED))
                forget_topology(lib, s.nvml_index);
        if (topology != nullptr) judge_nvlinks(*topology, enforced, &out->states);
        out->ranking = rank_gpus(out->states, policy);
        // Nothing usable while a cached InfoROM answer keeps a GPU out: it may be stale (the GPU was
        // reset since), so the choice is made again with InfoROM read now.
        bool cached_inforom_finding = false;
        for (const DeviceState& s : out->states)
            cached_inforom_finding =
                cached_inforom_finding || (s.readings.inforom_cached && s.readings.inforom_corrupted);
        if (out->ranking.indices.empty() && cached_inforom_finding && !fresh_inforom)
            return choose_gpus(lib, enumerated, owner, taskmanager, policy, enforced, timeout_seconds, out,
                               spent_seconds, true, scope, topology);
        return Status();
    } catch (const std::bad_alloc&) {
        return nvml_failure(NVML_ERROR_MEMORY, "choose_gpus", "Out of memory while choosing GPUs.");
    }
}

}  // namespace flinkgpu
