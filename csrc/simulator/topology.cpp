// The topology queries: the PCIe common ancestor of two GPUs, each GPU's NVLinks (state, far end and its
// kind) and the peer-to-peer status of a pair, answered from the spec's "pcie" and "nvlinks"
// (spec_topology.cpp). The link count is a field value (state_queries.cpp: NVML_FI_DEV_NVLINK_LINK_COUNT).
#include <cstdio>
#include <cstring>
#include <string>

#include "driver_model.hpp"

using namespace flinkgpu_sim;

namespace {

// A GPU (not a MIG device) for the topology query `q`: its state error, or what the spec's lists say.
nvmlReturn_t topology_device(nvmlDevice_t handle, Query q, const SimDevice** out) {
    if (nvmlReturn_t rc = state_device(handle, q, out); rc != NVML_SUCCESS) return rc;
    return (*out)->is_unit ? NVML_ERROR_NOT_SUPPORTED : NVML_SUCCESS;
}

// Both GPUs of a pair query; the same GPU twice is no pair.
nvmlReturn_t pair(nvmlDevice_t first, nvmlDevice_t second, Query q, const SimDevice** a, const SimDevice** b) {
    if (nvmlReturn_t rc = topology_device(first, q, a); rc != NVML_SUCCESS) return rc;
    if (nvmlReturn_t rc = topology_device(second, q, b); rc != NVML_SUCCESS) return rc;
    return *a == *b ? NVML_ERROR_INVALID_ARGUMENT : NVML_SUCCESS;
}

// Link `link` of a GPU, for the NVLink query `q`: NOT_SUPPORTED on a GPU without NVLink, INVALID_ARGUMENT
// for a link it does not have.
nvmlReturn_t link_of(nvmlDevice_t handle, unsigned link, Query q, const SimDevice** gpu, const SimNvLink** out) {
    if (nvmlReturn_t rc = topology_device(handle, q, gpu); rc != NVML_SUCCESS) return rc;
    if ((*gpu)->nvlinks.empty()) return NVML_ERROR_NOT_SUPPORTED;
    if (link >= (*gpu)->nvlinks.size()) return NVML_ERROR_INVALID_ARGUMENT;
    *out = &(*gpu)->nvlinks[link];
    return NVML_SUCCESS;
}

// The closest PCIe point two GPUs share (the spec's tree is checked: a switch has one path above it).
nvmlGpuTopologyLevel_t common_ancestor(const SimDevice& a, const SimDevice& b) {
    if (!a.board.empty() && a.board == b.board) return NVML_TOPOLOGY_INTERNAL;
    if (a.host_bridge != b.host_bridge) return a.numa_node == b.numa_node ? NVML_TOPOLOGY_NODE : NVML_TOPOLOGY_SYSTEM;
    size_t shared = 0;
    while (shared < a.switches.size() && shared < b.switches.size() && a.switches[shared] == b.switches[shared])
        ++shared;
    if (shared == 0) return NVML_TOPOLOGY_HOSTBRIDGE;
    // one switch between them only when it is the innermost of both
    return shared == a.switches.size() && shared == b.switches.size() ? NVML_TOPOLOGY_SINGLE : NVML_TOPOLOGY_MULTIPLE;
}

bool active_link_to_gpu(const SimDevice& from, unsigned gpu) {
    for (const SimNvLink& link : from.nvlinks)
        if (link.active && link.to == SimNvLink::To::kGpu && link.gpu == gpu) return true;
    return false;
}

// An active NVLink joins them: a bridge (active at both ends), or an NVSwitch both reach on an active link.
bool joined_by_nvlink(const SimDevice& a, const SimDevice& b) {
    if (active_link_to_gpu(a, b.index) && active_link_to_gpu(b, a.index)) return true;
    for (const SimNvLink& mine : a.nvlinks) {
        if (!mine.active || mine.to != SimNvLink::To::kSwitch) continue;
        for (const SimNvLink& theirs : b.nvlinks)
            if (theirs.active && theirs.to == SimNvLink::To::kSwitch && theirs.switch_bus_id == mine.switch_bus_id)
                return true;
    }
    return false;
}

// The GPU at `index` of the host (a link's far end).
const SimDevice* gpu_at(unsigned index) {
    SimState& s = state();
    std::lock_guard<std::mutex> lock(s.mutex);
    return index < s.devices.size() ? &s.devices[index] : nullptr;
}

void fill_pci(const std::string& bus_id, unsigned device_id, nvmlPciInfo_t* pci) {
    std::memset(pci, 0, sizeof *pci);
    std::snprintf(pci->busId, sizeof pci->busId, "%s", bus_id.c_str());
    std::snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%s", bus_id.c_str());
    unsigned domain = 0, bus = 0, dev = 0;
    if (std::sscanf(bus_id.c_str(), "%x:%x:%x", &domain, &bus, &dev) == 3) {
        pci->domain = domain;
        pci->bus = bus;
        pci->device = dev;
    }
    pci->pciDeviceId = device_id;
}

}  // namespace

SIM_EXPORT nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                            nvmlGpuTopologyLevel_t* pathInfo) {
    return guarded({__func__, kFamilyTopology, device1}, [&]() -> nvmlReturn_t {
        const SimDevice *a = nullptr, *b = nullptr;
        if (pathInfo == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = pair(device1, device2, kQueryTopology, &a, &b); rc != NVML_SUCCESS) return rc;
        *pathInfo = common_ancestor(*a, *b);
        return NVML_SUCCESS;
    });
}

// NVLINK: OK where an active NVLink joins them (a bridge or a shared NVSwitch), else NOT_SUPPORTED. The
// other capabilities: OK over NVLink, and over PCIe below one CPU; across the CPUs' interconnect (SYS) the
// driver refuses peer access, IOH_TOPOLOGY_NOT_SUPPORTED.
SIM_EXPORT nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                               nvmlGpuP2PCapsIndex_t p2pIndex, nvmlGpuP2PStatus_t* p2pStatus) {
    return guarded({__func__, kFamilyTopology, device1}, [&]() -> nvmlReturn_t {
        const SimDevice *a = nullptr, *b = nullptr;
        const auto index = static_cast<unsigned>(p2pIndex);
        if (p2pStatus == nullptr || index >= static_cast<unsigned>(NVML_P2P_CAPS_INDEX_UNKNOWN))
            return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = pair(device1, device2, kQueryP2PStatus, &a, &b); rc != NVML_SUCCESS) return rc;
        const bool nvlink = joined_by_nvlink(*a, *b);
        if (index == NVML_P2P_CAPS_INDEX_NVLINK)
            *p2pStatus = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        else if (nvlink || common_ancestor(*a, *b) != NVML_TOPOLOGY_SYSTEM) *p2pStatus = NVML_P2P_STATUS_OK;
        else *p2pStatus = NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED;
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link, nvmlEnableState_t* isActive) {
    return guarded({__func__, kFamilyNvLink, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        const SimNvLink* l = nullptr;
        if (isActive == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = link_of(device, link, kQueryNvLink, &d, &l); rc != NVML_SUCCESS) return rc;
        *isActive = l->active ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
        return NVML_SUCCESS;
    });
}

// The far end's PCI info: the peer GPU's, or the NVSwitch's bus id (its device id left 0, and the
// subsystem id, which nvml.h says this query does not fill); NOT_SUPPORTED where the far end is unknown.
SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                            nvmlPciInfo_t* pci) {
    return guarded({__func__, kFamilyNvLink, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        const SimNvLink* l = nullptr;
        if (pci == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = link_of(device, link, kQueryNvLinkRemotePci, &d, &l); rc != NVML_SUCCESS) return rc;
        if (l->to == SimNvLink::To::kSwitch) {
            fill_pci(l->switch_bus_id, 0, pci);
            return NVML_SUCCESS;
        }
        const SimDevice* peer = l->to == SimNvLink::To::kGpu ? gpu_at(l->gpu) : nullptr;
        if (peer == nullptr) return NVML_ERROR_NOT_SUPPORTED;
        fill_pci(peer->pci_bus_id, 0x233010DE, pci);  // the device id nvmlDeviceGetPciInfo answers
        return NVML_SUCCESS;
    });
}

SIM_EXPORT nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                            nvmlIntNvLinkDeviceType_t* pNvLinkDeviceType) {
    return guarded({__func__, kFamilyNvLink, device}, [&]() -> nvmlReturn_t {
        const SimDevice* d = nullptr;
        const SimNvLink* l = nullptr;
        if (pNvLinkDeviceType == nullptr) return NVML_ERROR_INVALID_ARGUMENT;
        if (nvmlReturn_t rc = link_of(device, link, kQueryNvLinkRemoteType, &d, &l); rc != NVML_SUCCESS) return rc;
        *pNvLinkDeviceType = l->to == SimNvLink::To::kGpu      ? NVML_NVLINK_DEVICE_TYPE_GPU
                             : l->to == SimNvLink::To::kSwitch ? NVML_NVLINK_DEVICE_TYPE_SWITCH
                                                               : NVML_NVLINK_DEVICE_TYPE_UNKNOWN;
        return NVML_SUCCESS;
    });
}
