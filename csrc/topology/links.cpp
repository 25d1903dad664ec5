#include "topology/links.hpp"

#include "base/gpu_index.hpp"

namespace flinkgpu {
namespace topology {

const char* pcie_label(Pcie level) noexcept {
    switch (level) {
        case Pcie::kSameGpu: return "X";
        case Pcie::kBoard: return "PIX";
        case Pcie::kSwitch: return "PIX";
        case Pcie::kSwitches: return "PXB";
        case Pcie::kHostBridge: return "PHB";
        case Pcie::kNode: return "NODE";
        case Pcie::kSystem: return "SYS";
        case Pcie::kUnknown: break;
    }
    return "?";
}

void Links::set(unsigned a, unsigned b, Link link) {
    if (a == b) return;
    pairs_[a < b ? std::make_pair(a, b) : std::make_pair(b, a)] = link;
}

Link Links::between(unsigned a, unsigned b) const noexcept {
    if (a == b) return Link{0, Pcie::kSameGpu};
    const auto found = pairs_.find(a < b ? std::make_pair(a, b) : std::make_pair(b, a));
    return found == pairs_.end() ? Link() : found->second;
}

Link Links::between(const std::string& a, const std::string& b) const noexcept {
    unsigned ga = 0, gb = 0;
    if (!gpu_of(a, &ga) || !gpu_of(b, &gb)) return Link();
    return between(ga, gb);
}

std::string Links::cell(const Link& link) {
    if (link.nvlinks > 0) return "NV" + std::to_string(link.nvlinks);
    return pcie_label(link.pcie);
}

}  // namespace topology
}  // namespace flinkgpu
