#include "host/locality.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>

namespace flinkgpu {

std::string cpulist(const unsigned long* words, std::size_t count) {
    constexpr std::size_t kBits = sizeof(unsigned long) * CHAR_BIT;
    auto set = [&](std::size_t cpu) { return (words[cpu / kBits] >> (cpu % kBits)) & 1UL; };
    const std::size_t total = count * kBits;
    std::string out;
    for (std::size_t cpu = 0; cpu < total;) {
        if (!set(cpu)) {
            ++cpu;
            continue;
        }
        std::size_t last = cpu;
        while (last + 1 < total && set(last + 1)) ++last;
        if (!out.empty()) out += ',';
        out += std::to_string(cpu);
        if (last != cpu) out += '-' + std::to_string(last);
        cpu = last + 1;
    }
    return out;
}

std::optional<std::string> sysfs_bus_id(const std::string& nvml_bus_id) {
    unsigned domain = 0, bus = 0, device = 0, function = 0;
    int used = -1;
    for (char c : nvml_bus_id)  // hex digits and separators only: scanf's %x would take "0x" too
        if (!std::isxdigit(static_cast<unsigned char>(c)) && c != ':' && c != '.') return std::nullopt;
    if (std::sscanf(nvml_bus_id.c_str(), "%8x:%2x:%2x.%1x%n", &domain, &bus, &device, &function, &used) != 4 ||
        used != static_cast<int>(nvml_bus_id.size()))
        return std::nullopt;
    if (domain > 0xffff || bus > 0xff || device > 0x1f || function > 7) return std::nullopt;
    char buf[16];
    std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, device, function);
    return std::string(buf);
}

std::optional<int> pci_numa_node(const std::string& sysfs_root, const std::string& nvml_bus_id) {
    const std::optional<std::string> id = sysfs_bus_id(nvml_bus_id);
    if (!id) return std::nullopt;
    const std::string path = sysfs_root + "/bus/pci/devices/" + *id + "/numa_node";
    const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return std::nullopt;
    char buf[32];
    ssize_t n;
    do {
        n = read(fd, buf, sizeof buf - 1);
    } while (n < 0 && errno == EINTR);
    close(fd);
    if (n <= 0) return std::nullopt;
    buf[n] = '\0';
    char* end = nullptr;
    errno = 0;
    const long node = std::strtol(buf, &end, 10);
    if (errno != 0 || end == buf || (*end != '\0' && *end != '\n') || node < 0 || node > INT_MAX) return std::nullopt;
    return static_cast<int>(node);
}

}  // namespace flinkgpu
