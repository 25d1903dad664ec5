// The topology keys of a spec's devices: "pcie" (where a GPU sits: board, PCIe switches, host bridge,
// NUMA node) and "nvlinks" (its links and their far ends), read per GPU and then checked across GPUs, so
// that the host they describe is one a machine could be: one PCIe tree, and NVLink bridges with two ends.
#include <cstdio>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "json.hpp"
#include "spec.hpp"
#include "spec_values.hpp"

namespace flinkgpu_sim {

namespace {

bool fail(const char* spec_path, const std::string& what) {
    complain(std::string(spec_path) + ": " + what);
    return false;
}

// A non-empty string, for a name of the PCIe tree.
bool read_name(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
               std::string* out) {
    std::string value = *out;
    if (!read_string(object, key, spec_path, where, &value)) return false;
    if (value.empty()) return fail(spec_path, where + key + " must not be empty");
    *out = value;
    return true;
}

// "0000:05:00.0": domain, bus, device and function in hex, as NVML writes a PCI bus id.
bool pci_bus_id(const std::string& text) {
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    char end = 0;
    return std::sscanf(text.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &end) == 4 && bus <= 0xff &&
           device <= 0x1f && function <= 7;
}

bool read_pcie(const simjson::Value& item, const char* spec_path, const std::string& where, SimDevice* d) {
    const simjson::Value* p = present(item, "pcie");
    if (p == nullptr) return true;
    if (!p->is_object()) return fail(spec_path, where + "pcie must be an object" + got(*p));
    if (!known_keys(*p, {"board", "switches", "host_bridge", "numa_node"}, spec_path, where + "pcie")) return false;
    const std::string pw = where + "pcie.";
    d->board.clear();
    if (present(*p, "board") != nullptr && !read_name(*p, "board", spec_path, pw, &d->board)) return false;
    d->switches.clear();
    if (const simjson::Value* list = present(*p, "switches")) {
        if (!list->is_array()) return fail(spec_path, pw + "switches must be a list of switch names" + got(*list));
        for (size_t i = 0; i < list->array.size(); ++i) {
            const simjson::Value& name = list->array[i];
            if (!name.is_string() || name.string.empty())
                return fail(spec_path, pw + "switches[" + std::to_string(i) + "] must be a switch's name" + got(name));
            for (const std::string& earlier : d->switches)
                if (earlier == name.string)
                    return fail(spec_path,
                                pw + "switches names \"" + earlier + "\" twice: a path has each switch once");
            d->switches.push_back(name.string);
        }
    }
    d->host_bridge = kDefaultHostBridge;
    if (!read_name(*p, "host_bridge", spec_path, pw, &d->host_bridge)) return false;
    unsigned long long numa = 0;
    if (!read_number(*p, "numa_node", 4096.0, spec_path, pw, &numa)) return false;
    d->numa_node = static_cast<unsigned>(numa);
    return true;
}

bool read_nvlinks(const simjson::Value& item, const char* spec_path, const std::string& where, SimDevice* d) {
    const simjson::Value* list = present(item, "nvlinks");
    if (list == nullptr) return true;
    if (!list->is_array()) return fail(spec_path, where + "nvlinks must be a list, one entry per link" + got(*list));
    if (list->array.size() > NVML_NVLINK_MAX_LINKS)
        return fail(spec_path, where + "nvlinks has " + std::to_string(list->array.size()) +
                                   " links; a GPU has at most " + std::to_string(NVML_NVLINK_MAX_LINKS) +
                                   " (NVML_NVLINK_MAX_LINKS)");
    for (size_t i = 0; i < list->array.size(); ++i) {
        const simjson::Value& entry = list->array[i];
        const std::string lw = where + "nvlinks[" + std::to_string(i) + "]";
        if (!entry.is_object()) return fail(spec_path, lw + " must be an object" + got(entry));
        if (!known_keys(entry, {"active", "to"}, spec_path, lw)) return false;
        SimNvLink link;
        if (!read_bool(entry, "active", spec_path, lw + ".", &link.active)) return false;
        if (const simjson::Value* to = present(entry, "to")) {
            const std::string tw = lw + ".to";
            if (!to->is_object() || to->object.size() != 1 ||
                (to->get("gpu") == nullptr && to->get("switch") == nullptr))
                return fail(spec_path, tw + " must be {\"gpu\": index} or {\"switch\": \"PCI bus id\"}" + got(*to));
            if (to->get("gpu") != nullptr) {
                unsigned long long gpu = 0;
                if (present(*to, "gpu") == nullptr) return fail(spec_path, tw + ".gpu must be a GPU index, got null");
                if (!read_number(*to, "gpu", 4096.0, spec_path, tw + ".", &gpu)) return false;
                link.to = SimNvLink::To::kGpu;
                link.gpu = static_cast<unsigned>(gpu);
            } else {
                if (!read_string(*to, "switch", spec_path, tw + ".", &link.switch_bus_id)) return false;
                if (!pci_bus_id(link.switch_bus_id))
                    return fail(spec_path, tw + ".switch must be an NVSwitch's PCI bus id such as \"0000:05:00.0\"" +
                                               got(*to->get("switch")));
                link.to = SimNvLink::To::kSwitch;
            }
        }
        d->nvlinks.push_back(std::move(link));
    }
    return true;
}

std::string devices(size_t i) { return "devices[" + std::to_string(i) + "]"; }

}  // namespace

bool read_topology(const simjson::Value& item, const char* spec_path, const std::string& where, SimDevice* d) {
    return read_pcie(item, spec_path, where, d) && read_nvlinks(item, spec_path, where, d);
}

bool check_topology(const std::vector<SimDevice>& gpus, const char* spec_path) {
    // One PCIe tree: a switch has one path above it, a board one place, a host bridge one NUMA node.
    std::map<std::string, std::pair<size_t, std::vector<std::string>>> above;  // switch -> first GPU, path above
    std::map<std::string, size_t> board_of, bridge_of;                         // name -> first GPU naming it
    for (size_t i = 0; i < gpus.size(); ++i) {
        const SimDevice& d = gpus[i];
        for (size_t k = 0; k < d.switches.size(); ++k) {
            std::vector<std::string> path(d.switches.begin(), d.switches.begin() + static_cast<long>(k));
            path.insert(path.begin(), d.host_bridge);
            const auto it = above.emplace(d.switches[k], std::make_pair(i, path)).first;
            if (it->second.second != path)
                return fail(spec_path, devices(i) + ".pcie.switches puts switch \"" + d.switches[k] +
                                           "\" below another path than " + devices(it->second.first) +
                                           ".pcie does: a switch has one place in the PCIe tree");
        }
        if (!d.board.empty()) {
            const auto it = board_of.emplace(d.board, i).first;
            const SimDevice& first = gpus[it->second];
            if (first.switches != d.switches || first.host_bridge != d.host_bridge)
                return fail(spec_path, devices(i) + ".pcie.board \"" + d.board + "\" sits elsewhere in " +
                                           devices(it->second) + ".pcie: the GPUs of a board share its switches");
        }
        const auto bridge = bridge_of.emplace(d.host_bridge, i).first;
        if (gpus[bridge->second].numa_node != d.numa_node)
            return fail(spec_path, devices(i) + ".pcie.numa_node differs from " + devices(bridge->second) +
                                       "'s under the same host bridge \"" + d.host_bridge + "\"");
    }
    // NVLink: a link names a GPU of the spec other than its own, and a bridge has its links at both ends.
    for (size_t i = 0; i < gpus.size(); ++i) {
        std::map<unsigned, unsigned> to_gpu;
        for (size_t l = 0; l < gpus[i].nvlinks.size(); ++l) {
            const SimNvLink& link = gpus[i].nvlinks[l];
            if (link.to != SimNvLink::To::kGpu) continue;
            const std::string lw = devices(i) + ".nvlinks[" + std::to_string(l) + "].to.gpu";
            if (link.gpu >= gpus.size())
                return fail(spec_path, lw + " is " + std::to_string(link.gpu) + ", not a GPU of this spec (it has " +
                                           std::to_string(gpus.size()) + ")");
            if (link.gpu == i) return fail(spec_path, lw + " is the GPU itself");
            ++to_gpu[link.gpu];
        }
        for (const auto& peer : to_gpu) {
            unsigned back = 0;
            for (const SimNvLink& link : gpus[peer.first].nvlinks)
                back += link.to == SimNvLink::To::kGpu && link.gpu == i ? 1 : 0;
            if (back != peer.second)
                return fail(spec_path, devices(i) + ".nvlinks has " + std::to_string(peer.second) + " links to GPU " +
                                           std::to_string(peer.first) + " but " + devices(peer.first) +
                                           ".nvlinks has " + std::to_string(back) + " back: a link has two ends");
        }
    }
    return true;
}

}  // namespace flinkgpu_sim
