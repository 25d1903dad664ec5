// How the GPUs of a host are joined (docs/design.md §9.6): per pair of GPUs the NVLinks between them and
// their closest common PCIe point, as `nvidia-smi topo -m` shows them. A plain value: nvml/topology.hpp
// reads it from NVML, topology/sets.hpp chooses by it, coordination takes it under its lock.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>

namespace flinkgpu {
namespace topology {

// The closest PCIe point two GPUs share, best first (nvmlGpuTopologyLevel_t's order); kUnknown: NVML did
// not say, ranked after every known level.
enum class Pcie : std::uint8_t { kSameGpu, kBoard, kSwitch, kSwitches, kHostBridge, kNode, kSystem, kUnknown };

// `nvidia-smi topo -m`'s word for it: "X", "PIX" (board and single switch alike), "PXB", "PHB", "NODE", "SYS",
// "?" for unknown.
const char* pcie_label(Pcie level) noexcept;

// How two GPUs are joined: NVLinks usable between them (direct links active at both ends, or the links
// each has to an NVSwitch both reach, the fewer of the two; 0: none known) and the PCIe level.
struct Link {
    unsigned nvlinks = 0;
    Pcie pcie = Pcie::kUnknown;
    bool operator==(const Link& other) const noexcept { return nvlinks == other.nvlinks && pcie == other.pcie; }
};

// The pairs of a host's GPUs by NVML number. A pair never set is unknown: no NVLink, PCIe unknown.
class Links {
public:
    void set(unsigned a, unsigned b, Link link);
    // GPU numbers; the same GPU is kSameGpu.
    Link between(unsigned a, unsigned b) const noexcept;
    // Indices as NVML names them ("3", a MIG unit "3:1" is GPU 3's); an index of no GPU is unknown.
    Link between(const std::string& a, const std::string& b) const noexcept;
    bool empty() const noexcept { return pairs_.empty(); }
    // The text of `nvidia-smi topo -m`'s cell: "NV<n>" where NVLinks join them, else the PCIe label.
    static std::string cell(const Link& link);

private:
    std::map<std::pair<unsigned, unsigned>, Link> pairs_;
};

}  // namespace topology
}  // namespace flinkgpu
