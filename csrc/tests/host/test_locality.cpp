// CPU lists and the sysfs NUMA node (csrc/host/locality.*).
#include "host/locality.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "tests/check.hpp"

using namespace flinkgpu;

TEST_CASE(cpu_masks_print_as_kernel_cpu_lists_with_runs_across_words) {
    constexpr unsigned kBits = sizeof(unsigned long) * 8;
    unsigned long mask[2] = {0, 0};
    CHECK_EQ(cpulist(mask, 2), std::string(""));
    mask[0] = 0xFFFFUL;  // 0-15
    CHECK_EQ(cpulist(mask, 2), std::string("0-15"));
    mask[0] |= 1UL << 20;
    mask[1] = 0x3UL;  // kBits, kBits + 1
    CHECK_EQ(cpulist(mask, 2), "0-15,20," + std::to_string(kBits) + "-" + std::to_string(kBits + 1));
    mask[0] = ~0UL;
    mask[1] = 1;  // a run across the word boundary
    CHECK_EQ(cpulist(mask, 2), "0-" + std::to_string(kBits));
}

TEST_CASE(nvml_bus_ids_map_to_lowercase_sysfs_names_and_malformed_ones_to_none) {
    CHECK(sysfs_bus_id("00000000:3B:00.0") == std::string("0000:3b:00.0"));
    CHECK(sysfs_bus_id("0001:AF:1F.7") == std::string("0001:af:1f.7"));
    CHECK(!sysfs_bus_id("00000000:3B:00").has_value());
    CHECK(!sysfs_bus_id("00000000:3B:00.0x").has_value());
    CHECK(!sysfs_bus_id("garbage").has_value());
}

TEST_CASE(numa_node_is_read_from_sysfs_and_minus_one_garbage_or_absent_is_none) {
    char root[] = "/tmp/flink-gpu-sysfs-XXXXXX";
    CHECK(mkdtemp(root) != nullptr);
    const std::string base = std::string(root) + "/bus/pci/devices/";
    CHECK(std::system(
              ("mkdir -p " + base + "0000:3b:00.0 " + base + "0000:3c:00.0 " + base + "0000:3d:00.0").c_str()) == 0);
    std::ofstream(base + "0000:3b:00.0/numa_node") << "1\n";
    std::ofstream(base + "0000:3c:00.0/numa_node") << "-1\n";
    std::ofstream(base + "0000:3d:00.0/numa_node") << "x\n";
    CHECK(pci_numa_node(root, "00000000:3B:00.0") == 1);
    CHECK(!pci_numa_node(root, "00000000:3C:00.0").has_value());  // -1: no NUMA information
    CHECK(!pci_numa_node(root, "00000000:3D:00.0").has_value());
    CHECK(!pci_numa_node(root, "00000000:3E:00.0").has_value());  // no such device
    CHECK(std::system((std::string("rm -rf ") + root).c_str()) == 0);
}

int main(int argc, char** argv) { return check::run(argc, argv); }
