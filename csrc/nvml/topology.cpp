#include "nvml/topology.hpp"

#include "base/counted.hpp"
#include "base/glibc_compat.hpp"
#include "base/status.hpp"

#include <dirent.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <new>
#include <set>
#include <sstream>
#include <thread>
#include <utility>

namespace flinkgpu {
namespace {

using topology::Link;
using topology::Pcie;

Pcie pcie_of(nvmlGpuTopologyLevel_t level) {
    switch (level) {
        case NVML_TOPOLOGY_INTERNAL: return Pcie::kBoard;
        case NVML_TOPOLOGY_SINGLE: return Pcie::kSwitch;
        case NVML_TOPOLOGY_MULTIPLE: return Pcie::kSwitches;
        case NVML_TOPOLOGY_HOSTBRIDGE: return Pcie::kHostBridge;
        case NVML_TOPOLOGY_NODE: return Pcie::kNode;
        case NVML_TOPOLOGY_SYSTEM: return Pcie::kSystem;
    }
    return Pcie::kUnknown;
}

// A GPU another GPU's part was read with: its handle, and whether its own links were walked.
struct Peer {
    unsigned gpu = 0;
    nvmlDevice_t handle = nullptr;
    bool links_known = false;
};

// What was read of one GPU.
struct GpuPart : Counted {
    GpuPart() = default;
    GpuPart(const GpuPart& o)
        : Counted{},
          read(o.read),
          handle(o.handle),
          bus_id(o.bus_id),
          nvlink(o.nvlink),
          to_unnamed(o.to_unnamed),
          ancestor(o.ancestor),
          p2p_nvlink(o.p2p_nvlink),
          calls(o.calls) {}
    GpuPart& operator=(const GpuPart&) = delete;
    bool read = false;  // its handle was given: the rest is what NVML answered
    nvmlDevice_t handle = nullptr;
    std::string bus_id;
    NvLinkReading nvlink;
    // far ends whose kind NVML did not say: a GPU's bus id, else taken as a switch's
    std::map<std::string, unsigned> to_unnamed;
    std::map<unsigned, Pcie> ancestor;    // to the GPUs read before it
    std::map<unsigned, bool> p2p_nvlink;  // to those, where neither one's links could be walked
    unsigned long calls = 0;
};

// Reads GPU `gpu`'s part: its handle and bus id, its links once, and its pairs with `peers`.
void read_part(const NvmlApi& api, unsigned gpu, const std::vector<Peer>& peers, GpuPart* part, ReadMonitor& monitor) {
    const int at = static_cast<int>(gpu);
    // each call named before it is made (a stall names it) and counted
    auto call = [&](const char* function) {
        monitor.calling(at, function);
        ++part->calls;
    };
    nvmlDevice_t dev = nullptr;
    call("nvmlDeviceGetHandleByIndex_v2");
    if (api.device_get_handle_by_index(gpu, &dev) != NVML_SUCCESS) return;
    part->read = true;
    part->handle = dev;
    if (api.device_get_pci_info != nullptr && !api.pci_info_v1) {
        nvmlPciInfo_t pci{};
        call("nvmlDeviceGetPciInfo_v3");
        if (api.device_get_pci_info(dev, &pci) == NVML_SUCCESS) {
            pci.busId[sizeof pci.busId - 1] = '\0';
            part->bus_id = canonical_bus_id(pci.busId);
        }
    }
    NvLinkReading& nv = part->nvlink;
    if (api.device_get_field_values != nullptr) {
        nvmlFieldValue_t field{};
        field.fieldId = NVML_FI_DEV_NVLINK_LINK_COUNT;
        call("nvmlDeviceGetFieldValues");
        if (api.device_get_field_values(dev, 1, &field) == NVML_SUCCESS && field.nvmlReturn == NVML_SUCCESS) {
            nv.known = true;
            nv.count = std::min<unsigned>(field.value.uiVal, NVML_NVLINK_MAX_LINKS);
        }
    }
    if (api.device_get_nvlink_state != nullptr) {
        // without the count, the links are those whose state is answered, up to the first that is not
        const unsigned last = nv.known ? nv.count : NVML_NVLINK_MAX_LINKS;
        for (unsigned link = 0; link < last; ++link) {
            nvmlEnableState_t active = NVML_FEATURE_DISABLED;
            call("nvmlDeviceGetNvLinkState");
            if (api.device_get_nvlink_state(dev, link, &active) != NVML_SUCCESS) {
                if (!nv.known) break;
                continue;  // this link's state unknown: neither active nor inactive
            }
            if (!nv.known) nv.count = link + 1;
            nvmlIntNvLinkDeviceType_t type = NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
            bool typed = false;
            if (api.device_get_nvlink_remote_device_type != nullptr) {
                call("nvmlDeviceGetNvLinkRemoteDeviceType");
                typed = api.device_get_nvlink_remote_device_type(dev, link, &type) == NVML_SUCCESS &&
                        type != NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
            }
            if (typed && type == NVML_NVLINK_DEVICE_TYPE_SWITCH) nv.to_switch = true;
            if (active != NVML_FEATURE_ENABLED) {
                ++nv.inactive;
                continue;
            }
            nvmlPciInfo_t far{};
            call("nvmlDeviceGetNvLinkRemotePciInfo_v2");
            if (api.device_get_nvlink_remote_pci_info == nullptr ||
                api.device_get_nvlink_remote_pci_info(dev, link, &far) != NVML_SUCCESS) {
                ++nv.to_unknown;
                continue;
            }
            far.busId[sizeof far.busId - 1] = '\0';
            const std::string bus = canonical_bus_id(far.busId);
            if (!typed) ++part->to_unnamed[bus];
            else if (type == NVML_NVLINK_DEVICE_TYPE_GPU) ++nv.to_gpus[bus];
            else if (type == NVML_NVLINK_DEVICE_TYPE_SWITCH) ++nv.to_switches[bus];
            else ++nv.to_unknown;  // an IBM NPU: no GPU of ours
        }
        if (nv.count > 0) nv.known = true;
    }
    for (Peer peer : peers) {
        if (peer.handle == nullptr) {  // adopted from another process's read: no handle of ours yet
            call("nvmlDeviceGetHandleByIndex_v2");
            if (api.device_get_handle_by_index(peer.gpu, &peer.handle) != NVML_SUCCESS) continue;
        }
        if (api.device_get_topology_common_ancestor != nullptr) {
            nvmlGpuTopologyLevel_t level = NVML_TOPOLOGY_SYSTEM;
            call("nvmlDeviceGetTopologyCommonAncestor");
            if (api.device_get_topology_common_ancestor(dev, peer.handle, &level) == NVML_SUCCESS)
                part->ancestor[peer.gpu] = pcie_of(level);
        }
        // a driver that answers no link query may still say whether NVLink joins the pair
        if (!nv.known && !peer.links_known && api.device_get_p2p_status != nullptr) {
            nvmlGpuP2PStatus_t status = NVML_P2P_STATUS_UNKNOWN;
            call("nvmlDeviceGetP2PStatus");
            if (api.device_get_p2p_status(dev, peer.handle, NVML_P2P_CAPS_INDEX_NVLINK, &status) == NVML_SUCCESS)
                part->p2p_nvlink[peer.gpu] = status == NVML_P2P_STATUS_OK;
        }
    }
}

// This process's reads, per library (a forked child starts afresh: handles are not inherited).
struct Cache {
    unsigned long generation = 0;
    std::map<unsigned, Ref<GpuPart>> parts;
    std::set<unsigned> forgotten;  // lost or reset since: never taken back from a copy, read again
    unsigned host_count = 0;       // NVML's GPU count when every GPU below it was read or adopted (0: not known)
};
std::mutex g_mutex;
// One reader at a time (each waiting within its own deadline): two reading at once could each miss the
// pair the other's GPU makes with its own.
std::mutex g_reading;

// Takes `m` within `seconds`, polling (std::timed_mutex would need glibc 2.30's pthread_mutex_clocklock, beyond
// manylinux_2_28): whether it did.
bool lock_within(std::mutex* m, double seconds) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (!m->try_lock()) {
        if (std::chrono::steady_clock::now() >= until) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    return true;
}
std::map<std::string, Cache>& caches() {
    static auto* c = new std::map<std::string, Cache>();  // never destroyed: a stuck worker may outlive exit
    return *c;
}

Cache& cache_of(const NvmlLibrary& lib) {
    Cache& c = caches()[lib.path()];
    if (c.generation != NvmlLibrary::process_generation()) {
        c.parts.clear();
        c.forgotten.clear();
        c.host_count = 0;
        c.generation = NvmlLibrary::process_generation();
    }
    return c;
}

// The links the far ends of `from` name for `to`: direct links to its bus id (NVML's named GPUs, and the
// unnamed ones whose bus id is its).
unsigned direct_links(const GpuPart& from, const std::string& to_bus) {
    unsigned n = 0;
    if (auto it = from.nvlink.to_gpus.find(to_bus); it != from.nvlink.to_gpus.end()) n += it->second;
    if (auto it = from.to_unnamed.find(to_bus); it != from.to_unnamed.end()) n += it->second;
    return n;
}

// The active links of `part` to NVSwitches: the named ones, and unnamed far ends no GPU of `bus_ids` has.
std::map<std::string, unsigned> switch_links(const GpuPart& part, const std::map<std::string, unsigned>& gpu_buses) {
    std::map<std::string, unsigned> out = part.nvlink.to_switches;
    for (const auto& [bus, n] : part.to_unnamed)
        if (!gpu_buses.count(bus)) out[bus] += n;
    return out;
}

Link link_between(unsigned a, const GpuPart& pa, unsigned b, const GpuPart& pb,
                  const std::map<std::string, unsigned>& gpu_buses) {
    Link link;
    const GpuPart& later = pa.ancestor.count(b) || pa.p2p_nvlink.count(b) ? pa : pb;
    const unsigned earlier = &later == &pa ? b : a;
    if (auto it = later.ancestor.find(earlier); it != later.ancestor.end()) link.pcie = it->second;
    // a bridge: its links as both ends count them (one end may not name its far end)
    const unsigned ab = pb.bus_id.empty() ? 0 : direct_links(pa, pb.bus_id);
    const unsigned ba = pa.bus_id.empty() ? 0 : direct_links(pb, pa.bus_id);
    link.nvlinks = pa.nvlink.known && pb.nvlink.known ? std::min(ab, ba) : std::max(ab, ba);
    // a switch fabric: the links each has to the switches both reach, the fewer of the two
    const auto sa = switch_links(pa, gpu_buses), sb = switch_links(pb, gpu_buses);
    unsigned via_a = 0, via_b = 0;
    for (const auto& [bus, n] : sa) {
        if (auto it = sb.find(bus); it != sb.end()) {
            via_a += n;
            via_b += it->second;
        }
    }
    link.nvlinks += std::min(via_a, via_b);
    if (link.nvlinks == 0)
        if (auto it = later.p2p_nvlink.find(earlier); it != later.p2p_nvlink.end() && it->second) link.nvlinks = 1;
    return link;
}

// ---- the host-wide copy: one line per GPU, space-separated fields, maps as key:value lists ("-" empty) ----

constexpr const char* kTextHeader = "flink-gpu topology 1";

template <typename K, typename V>
std::string map_text(const std::map<K, V>& m) {
    std::string out;
    for (const auto& [k, v] : m) {
        std::ostringstream item;
        item << k << '=' << static_cast<unsigned long>(v);
        if (item.str().find_first_of(" \t\n,") != std::string::npos) continue;  // never a bus id NVML writes
        out += (out.empty() ? "" : ",") + item.str();
    }
    return out.empty() ? "-" : out;
}

template <typename K>
bool read_map(const std::string& text, std::map<K, unsigned>* out) {
    if (text == "-") return true;
    std::istringstream items(text);
    std::string item;
    while (std::getline(items, item, ',')) {
        const std::size_t eq = item.rfind('=');
        if (eq == std::string::npos || eq == 0) return false;
        std::istringstream key(item.substr(0, eq)), value(item.substr(eq + 1));
        K k{};
        unsigned v = 0;
        if (!(key >> k) || !(value >> v)) return false;
        (*out)[k] = v;
    }
    return true;
}

std::string part_text(unsigned gpu, const GpuPart& p) {
    std::map<unsigned, unsigned> ancestor, p2p;
    for (const auto& [other, level] : p.ancestor) ancestor[other] = static_cast<unsigned>(level);
    for (const auto& [other, joined] : p.p2p_nvlink) p2p[other] = joined ? 1 : 0;
    std::ostringstream line;
    line << "gpu " << gpu << ' ' << (p.bus_id.empty() ? "-" : p.bus_id) << ' ' << p.nvlink.known << ' '
         << p.nvlink.count << ' ' << p.nvlink.inactive << ' ' << p.nvlink.to_switch << ' ' << p.nvlink.to_unknown << ' '
         << map_text(p.nvlink.to_gpus) << ' ' << map_text(p.nvlink.to_switches) << ' ' << map_text(p.to_unnamed) << ' '
         << map_text(ancestor) << ' ' << map_text(p2p);
    return line.str();
}

bool read_part_text(const std::string& line, unsigned* gpu, GpuPart* p) {
    std::istringstream in(line);
    std::string word, bus, gpus, switches, unnamed, ancestors, p2ps;
    if (!(in >> word) || word != "gpu") return false;
    if (!(in >> *gpu >> bus >> p->nvlink.known >> p->nvlink.count >> p->nvlink.inactive >> p->nvlink.to_switch >>
          p->nvlink.to_unknown >> gpus >> switches >> unnamed >> ancestors >> p2ps))
        return false;
    p->read = true;
    p->bus_id = bus == "-" ? std::string() : bus;
    std::map<unsigned, unsigned> ancestor, p2p;
    if (!read_map(gpus, &p->nvlink.to_gpus) || !read_map(switches, &p->nvlink.to_switches) ||
        !read_map(unnamed, &p->to_unnamed) || !read_map(ancestors, &ancestor) || !read_map(p2ps, &p2p))
        return false;
    for (const auto& [other, level] : ancestor) {
        if (level > static_cast<unsigned>(Pcie::kUnknown)) return false;
        p->ancestor[other] = static_cast<Pcie>(level);
    }
    for (const auto& [other, joined] : p2p) p->p2p_nvlink[other] = joined != 0;
    return p->nvlink.count <= NVML_NVLINK_MAX_LINKS && p->nvlink.inactive <= p->nvlink.count;
}

std::string first_line(const char* path) {
    std::ifstream in(path);
    std::string line;
    std::getline(in, line);
    return line;
}

// The GPUs the driver lists here (their PCI bus ids), sorted: in a container, those it was given.
std::string driver_gpus() {
    std::vector<std::string> names;
    if (DIR* dir = opendir("/proc/driver/nvidia/gpus")) {
        while (const dirent* entry = readdir(dir))
            if (entry->d_name[0] != '.') names.push_back(canonical_bus_id(entry->d_name));
        closedir(dir);
    }
    std::sort(names.begin(), names.end());
    std::string out;
    for (const std::string& n : names) out += (out.empty() ? "" : ",") + n;
    return out.empty() ? "-" : out;
}

}  // namespace

std::string canonical_bus_id(const std::string& bus_id) {
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    char rest = 0;
    if (std::sscanf(bus_id.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &device, &function, &rest) != 4) return bus_id;
    char text[32];
    std::snprintf(text, sizeof text, "%08x:%02x:%02x.%x", domain, bus, device, function);
    return text;
}

void read_topology(const NvmlLibrary& lib, const std::vector<unsigned>& gpus, double timeout_seconds,
                   Topology* out) noexcept {
    try {
        *out = Topology();
        const auto start = std::chrono::steady_clock::now();
        std::vector<unsigned> wanted = gpus;
        std::sort(wanted.begin(), wanted.end());
        wanted.erase(std::unique(wanted.begin(), wanted.end()), wanted.end());
        if (wanted.size() > kMaxTopologyGpus) return;
        const bool alone = timeout_seconds > 0 && lock_within(&g_reading, timeout_seconds);
        std::unique_lock<std::mutex> reading(g_reading, std::defer_lock);
        if (alone) reading = std::unique_lock<std::mutex>(g_reading, std::adopt_lock);
        std::map<unsigned, Ref<GpuPart>> known;
        {
            std::lock_guard<std::mutex> guard(g_mutex);
            known = cache_of(lib).parts;
        }
        // what this process lacks, read GPU by GPU: never a lock held across NVML
        for (const unsigned gpu : wanted) {
            if (known.count(gpu) || !alone) continue;
            const double left =
                timeout_seconds - std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            std::vector<Peer> peers;
            for (const auto& [other, part] : known)
                if (part->read) peers.push_back({other, part->handle, part->nvlink.known});
            // (an adopted part has no handle: the job takes one)
            const Ref<GpuPart> part(new GpuPart());
            Stall stall;
            Status started;
            const NvmlLibrary* library = &lib;  // lives for the process (nvml/loader.hpp): the job may outlive us
            if (left <= 0 ||
                !run_within(left, "the NVLink and PCIe topology", [library, gpu, peers, part](ReadMonitor& m) {
                read_part(library->api(), gpu, peers, part.get(), m);
            }, &stall, &started, static_cast<int>(gpu))) {
                if (stall.function.empty()) stall.function = "the NVLink and PCIe topology";
                stall.gpu = static_cast<int>(gpu);
                out->stalls.push_back(std::move(stall));
                // a stuck call may hold the driver's lock: the rest would only wait behind it, and the
                // state read that follows needs what is left of the deadline to say which GPUs are unknown
                break;
            }
            out->calls += part->calls;
            if (!part->read) continue;  // its handle was refused now: asked again next time, never kept
            known[gpu] = part;
            std::lock_guard<std::mutex> guard(g_mutex);
            Cache& c = cache_of(lib);
            c.parts[gpu] = part;
            c.forgotten.erase(gpu);
        }
        std::map<std::string, unsigned> gpu_buses;
        for (const auto& [gpu, part] : known)
            if (!part->bus_id.empty()) gpu_buses[part->bus_id] = gpu;
        for (std::size_t i = 0; i < wanted.size(); ++i) {
            const auto a = known.find(wanted[i]);
            if (a == known.end() || !a->second->read) continue;
            out->nvlink[wanted[i]] = a->second->nvlink;
            out->bus_ids[wanted[i]] = a->second->bus_id;
            for (std::size_t j = i + 1; j < wanted.size(); ++j) {
                const auto b = known.find(wanted[j]);
                if (b == known.end() || !b->second->read) continue;
                out->links.set(wanted[i], wanted[j],
                               link_between(wanted[i], *a->second, wanted[j], *b->second, gpu_buses));
            }
        }
    } catch (const std::bad_alloc&) {
        *out = Topology();
    }
}

std::string topology_key(const NvmlLibrary& lib, double timeout_seconds, unsigned* count) noexcept {
    try {
        struct Asked : Counted {
            std::string first;    // the driver's version
            unsigned second = 0;  // the GPU count
            bool answered = false;
        };
        const Ref<Asked> asked(new Asked());
        const NvmlLibrary* library = &lib;
        Stall stall;
        Status started;
        const bool returned = run_within(timeout_seconds, "nvmlDeviceGetCount_v2", [library, asked] {
            const NvmlApi& api = library->api();
            char version[NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE] = {};
            if (api.system_get_driver_version == nullptr ||
                api.system_get_driver_version(version, sizeof version) != NVML_SUCCESS ||
                api.device_get_count(&asked->second) != NVML_SUCCESS)
                return;
            asked->first = version;
            asked->answered = true;
        }, &stall, &started);
        if (!returned || !asked->answered || asked->first.find_first_of(" \t\n") != std::string::npos)
            return std::string();
        std::string boot = first_line("/proc/sys/kernel/random/boot_id");
        if (boot.empty() || boot.find(' ') != std::string::npos) return std::string();
        *count = asked->second;
        return "boot=" + boot + " driver=" + asked->first + " count=" + std::to_string(asked->second) +
               " gpus=" + driver_gpus();
    } catch (...) {
        return std::string();
    }
}

std::string topology_text(const NvmlLibrary& lib, const std::string& key, unsigned count) noexcept {
    try {
        std::map<unsigned, Ref<GpuPart>> parts;
        {
            std::lock_guard<std::mutex> guard(g_mutex);
            parts = cache_of(lib).parts;
        }
        std::string text = std::string(kTextHeader) + "\nkey " + key + "\n";
        for (unsigned gpu = 0; gpu < count; ++gpu) {
            const auto found = parts.find(gpu);
            if (found == parts.end() || !found->second->read) return std::string();
            // link states change at run time (links still training, a link gone down): a host with an
            // inactive link is read by each process itself, never from a copy
            if (found->second->nvlink.inactive > 0) return std::string();
            text += part_text(gpu, *found->second) + "\n";
        }
        std::lock_guard<std::mutex> guard(g_mutex);
        cache_of(lib).host_count = count;
        return text;
    } catch (...) {
        return std::string();
    }
}

bool adopt_topology(const NvmlLibrary& lib, const std::string& text, const std::string& key, unsigned count) noexcept {
    try {
        std::istringstream in(text);
        std::string line;
        if (!std::getline(in, line) || line != kTextHeader) return false;
        if (!std::getline(in, line) || line != "key " + key) return false;
        std::map<unsigned, Ref<GpuPart>> adopted;
        while (std::getline(in, line)) {
            unsigned gpu = 0;
            Ref<GpuPart> part(new GpuPart());
            if (!read_part_text(line, &gpu, part.get())) return false;
            adopted[gpu] = std::move(part);
        }
        std::lock_guard<std::mutex> guard(g_mutex);
        Cache& c = cache_of(lib);
        for (unsigned gpu = 0; gpu < count; ++gpu)
            if (!adopted.count(gpu)) return false;  // a copy of every GPU, or none
        for (auto& [gpu, part] : adopted)  // what this process read itself stays; a GPU lost since is read again
            if (!c.parts.count(gpu) && !c.forgotten.count(gpu)) c.parts[gpu] = std::move(part);
        c.host_count = count;
        return !adopted.empty() && c.forgotten.empty();
    } catch (...) {
        return false;
    }
}

unsigned topology_host_count(const NvmlLibrary& lib) noexcept {
    try {
        std::lock_guard<std::mutex> guard(g_mutex);
        return cache_of(lib).host_count;
    } catch (...) {
        return 0;
    }
}

bool topology_known(const NvmlLibrary& lib, const std::vector<unsigned>& gpus) noexcept {
    try {
        std::lock_guard<std::mutex> guard(g_mutex);
        const Cache& c = cache_of(lib);
        return std::all_of(gpus.begin(), gpus.end(), [&](unsigned gpu) { return c.parts.count(gpu) > 0; });
    } catch (...) {
        return false;
    }
}

void forget_topology(const NvmlLibrary& lib, unsigned gpu) noexcept {
    try {
        std::lock_guard<std::mutex> guard(g_mutex);
        Cache& c = cache_of(lib);
        if (c.parts.erase(gpu) > 0) c.forgotten.insert(gpu);
        // and the pairs the others hold with it: it is read again with them as its peers
        for (auto& [other, part] : c.parts) {
            if (part->ancestor.count(gpu) || part->p2p_nvlink.count(gpu)) {
                Ref<GpuPart> copy(new GpuPart(*part));
                copy->ancestor.erase(gpu);
                copy->p2p_nvlink.erase(gpu);
                part = copy;
            }
        }
    } catch (...) {
        // out of memory: the entry stays; the topology is static, so at worst a reset GPU's pairs are as before
    }
}

}  // namespace flinkgpu
