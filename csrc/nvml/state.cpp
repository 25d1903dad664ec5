#include "nvml/state.hpp"

#include <algorithm>

namespace flinkgpu {

const char* check_name(Check check) noexcept {
    switch (check) {
        case Check::kInforom: return "inforom";
        case Check::kRemappedRows: return "remapped-rows";
        case Check::kEcc: return "ecc";
        case Check::kRecoveryAction: return "recovery-action";
        case Check::kFabric: return "fabric";
        case Check::kRetiredPages: return "retired-pages";
        case Check::kNvlink: return "nvlink";
        case Check::kCount: break;
    }
    return "?";
}

const char* outcome_name(Outcome outcome) noexcept {
    switch (outcome) {
        case Outcome::kOk: return "ok";
        case Outcome::kFinding: return "finding";
        case Outcome::kNotSupported: return "not supported";
        case Outcome::kNoPermission: return "no permission";
        case Outcome::kNotApplicable: return "not applicable";
    }
    return "?";
}

const char* process_kind_name(ProcessKind kind) noexcept {
    switch (kind) {
        case ProcessKind::kGraphics: return "graphics";
        case ProcessKind::kMps: return "mps";
        case ProcessKind::kCompute: break;
    }
    return "compute";
}

bool ReadScope::skips(unsigned gpu) const noexcept {
    if (std::find(held_elsewhere.begin(), held_elsewhere.end(), gpu) != held_elsewhere.end()) return true;
    return only && std::find(only->begin(), only->end(), gpu) == only->end();
}

bool ReadScope::best(const DeviceState& state, bool processes_read) noexcept {
    return state.health == Health::kOk && !(processes_read && state.busy);
}

}  // namespace flinkgpu
