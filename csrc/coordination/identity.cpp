// See coordination/identity.hpp.
#include "coordination/identity.hpp"

namespace flinkgpu {
namespace coordination {

Liveness liveness_of(Verdict v) noexcept {
    switch (v) {
        case Verdict::kAlive: return Liveness::kAlive;
        case Verdict::kLeaseHeld:
        case Verdict::kOtherNamespace: return Liveness::kUnknown;
        case Verdict::kGone:
        case Verdict::kPidReused:
        case Verdict::kTaskManagerGone:
        case Verdict::kLeaseReleased: return Liveness::kDead;
    }
    return Liveness::kUnknown;
}

bool valid_lease_file_token(const std::string& s) noexcept {
    if (s.size() != kLeaseFileTokenSize) return false;
    for (char c : s) {
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    }
    return true;
}

bool HolderIdentity::pid_is_in(const PidNamespace& ours) const noexcept {
    return !has_ns || (ours.known && ns == ours.inode);
}

std::uint64_t HolderIdentity::namespace_in(const PidNamespace& ours) const noexcept {
    if (has_ns) return ns;
    return ours.known ? ours.inode : 0;
}

std::string HolderIdentity::key(const PidNamespace& ours) const {
    const std::string where = " ns " + std::to_string(namespace_in(ours));
    if (!slot.empty()) return "slot " + slot + " tm " + std::to_string(tm) + where;
    return "pid " + std::to_string(pid) + where;
}

std::string HolderIdentity::taskmanager_key(const PidNamespace& ours) const {
    if (tm <= 0) return std::string();
    return "pid " + std::to_string(tm) + " ns " + std::to_string(namespace_in(ours));
}

bool HolderIdentity::records(pid_t owner, bool pid_is_self, const PidNamespace& ours) const noexcept {
    if (pid != owner) return false;
    if (has_ns) return ours.known && ns == ours.inode;
    return has_start_time || !pid_is_self;
}

}  // namespace coordination
}  // namespace flinkgpu
