// How this host's GPUs are joined, from NVML (docs/design.md §9.6): per GPU its NVLinks (how many, which
// are active, where each leads) and per pair the PCIe common ancestor, made into topology::Links. Static,
// so read only when a choice of two or more needs it, once per process and GPU, and kept; a GPU found
// lost or reset is forgotten and read again when next needed. Every query is optional: an absent
// symbol or NOT_SUPPORTED leaves that part unknown, never an error. Each GPU's part is read on the
// deadline's workers (nvml/deadline.hpp) as a step about that GPU: one that does not return in time
// leaves that GPU's pairs unknown (and the GPU unknown to the next state read, which starts nothing on
// it), never the others.
#pragma once

#include "nvml/deadline.hpp"
#include "topology/links.hpp"

#include <cstddef>
#include <map>
#include <string>
#include <vector>

namespace flinkgpu {

// What NVML says of one GPU's NVLinks.
struct NvLinkReading {
    bool known = false;      // the link count or a link's state was answered
    unsigned count = 0;      // links the GPU has, active or not
    unsigned inactive = 0;   // of those, not active
    bool to_switch = false;  // a link (active or not) leads to an NVSwitch: the GPU is part of a switch fabric
    std::map<std::string, unsigned> to_gpus;      // active links by the far GPU's PCI bus id (canonical)
    std::map<std::string, unsigned> to_switches;  // active links by the NVSwitch's PCI bus id (canonical)
    unsigned to_unknown = 0;                      // active links whose far end NVML does not name
};

struct Topology {
    topology::Links links;                     // every pair of the GPUs read
    std::map<unsigned, NvLinkReading> nvlink;  // per GPU read
    std::map<unsigned, std::string> bus_ids;   // per GPU read, canonical ("00000000:18:00.0")
    std::vector<Stall> stalls;                 // the GPUs not read in time: their pairs are unknown
    // The NVML calls this call made (0: everything came from this process's earlier reads).
    unsigned long calls = 0;
};

// Past this many GPUs a process sees no single host's NVLink domain (a simulated host of thousands): their
// topology is not read (a pair per call would be millions), and every choice is as with topology: ignore.
inline constexpr std::size_t kMaxTopologyGpus = 64;

// The topology of the GPUs `gpus` (NVML numbers; more than kMaxTopologyGpus: none is read, all unknown): what
// this process read before, and what it lacks read
// now within `timeout_seconds` for all of them together; a GPU whose part does not return in time ends the
// read (the GPUs after it are not read: their pairs are unknown). Never throws; an out-of-memory leaves the
// result empty (unknown).
void read_topology(const NvmlLibrary& lib, const std::vector<unsigned>& gpus, double timeout_seconds,
                   Topology* out) noexcept;

// A host-wide copy of what one process read, so that the next process on the host needs no handle of a GPU it
// does not take (a first handle costs milliseconds, 200 ms without persistence mode): policy/discover.cpp keeps
// it beside the coordination file. topology_key() says which GPUs the numbers name: the boot, the driver's
// version, NVML's GPU count and the GPUs /proc/driver/nvidia/gpus lists (a container sees its own), read within
// `timeout_seconds` ("" when not known; *count: that GPU count). topology_text() is this process's reads of every GPU
// below `count` under `key` ("" unless it has them all); adopt_topology() takes such a text as if this process had read
// it, unless it is of another key or cannot be parsed (false: nothing adopted). Never throw.
std::string topology_key(const NvmlLibrary& lib, double timeout_seconds, unsigned* count) noexcept;
std::string topology_text(const NvmlLibrary& lib, const std::string& key, unsigned count) noexcept;
bool adopt_topology(const NvmlLibrary& lib, const std::string& text, const std::string& key, unsigned count) noexcept;

// The GPU count of the last whole copy this process wrote or adopted (0: none): what a process that makes
// no enumeration takes for the host's GPUs instead of asking NVML again.
unsigned topology_host_count(const NvmlLibrary& lib) noexcept;

// Whether this process has read (or adopted) every GPU of `gpus`: then read_topology makes no NVML call.
bool topology_known(const NvmlLibrary& lib, const std::vector<unsigned>& gpus) noexcept;

// GPU `gpu` was found lost or needing a reset: what was read of it is dropped.
void forget_topology(const NvmlLibrary& lib, unsigned gpu) noexcept;

// "00000000:18:00.0" for any spelling NVML gives of a PCI bus id (domain of 4 or 8 hex digits, either case);
// the text as it is when it is no bus id.
std::string canonical_bus_id(const std::string& bus_id);

}  // namespace flinkgpu
