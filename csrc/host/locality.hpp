// Where a GPU sits relative to the CPUs (docs/design.md §4): its local CPUs as a Linux cpulist and
// its NUMA node from sysfs. Static properties, read once with the enumeration.
#pragma once

#include <cstddef>
#include <optional>
#include <string>

namespace flinkgpu {

// The CPUs set in the bitmask `words[0..count)` (bit b of word w is CPU w * bits-per-long + b) as
// a Linux cpulist, e.g. "0-15,32-47"; empty for an empty mask.
std::string cpulist(const unsigned long* words, std::size_t count);

// NVML's bus id ("00000000:3B:00.0", 8-digit domain, upper case) in the form sysfs names PCI
// devices by ("0000:3b:00.0"); nullopt when it is not domain:bus:device.function.
std::optional<std::string> sysfs_bus_id(const std::string& nvml_bus_id);

// The NUMA node of the PCI device `nvml_bus_id` from <sysfs_root>/bus/pci/devices/<id>/numa_node;
// nullopt when the file is missing or unreadable, or says -1 (no NUMA information).
std::optional<int> pci_numa_node(const std::string& sysfs_root, const std::string& nvml_bus_id);

}  // namespace flinkgpu
