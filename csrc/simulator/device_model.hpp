// The simulated host: its GPUs and MIG devices as the spec describes them (csrc/simulator/spec.cpp),
// and the lookups every query makes of them.
#pragma once

#define NVML_NO_UNVERSIONED_FUNC_DEFS
#include <nvml.h>

#include <mutex>
#include <string>
#include <vector>

namespace flinkgpu_sim {

enum class Fault { kNone, kNoPermission, kGpuIsLost };

// The names of the state queries, as "not_supported" and "no_permission" list them.
enum Query : unsigned {
    kQueryInforom,
    kQueryRemappedRows,
    kQueryEccMode,
    kQueryEccErrors,
    kQueryFieldValues,
    kQueryRetiredPages,
    kQueryMemory,
    kQueryMemoryV2,
    kQueryComputeMode,
    kQueryCpuAffinity,
    kQueryComputeProcesses,
    kQueryGraphicsProcesses,
    kQueryMpsProcesses,
    kQueryProcessDetailList,
    kQueryUtilization,
    kQueryTemperature,
    kQueryPower,
    kQueryTemperatureV,
    kQueryFabric,
    kQueryPersistenceMode,
    kQueryTopology,
    kQueryNvLink,
    kQueryNvLinkRemotePci,
    kQueryNvLinkRemoteType,
    kQueryP2PStatus,
    kQueryCount
};
const char* const kQueryNames[kQueryCount] = {
    "inforom",
    "remapped_rows",
    "ecc_mode",
    "ecc_errors",
    "field_values",
    "retired_pages",
    "memory",
    "memory_v2",
    "compute_mode",
    "cpu_affinity",
    "compute_processes",
    "graphics_processes",
    "mps_processes",
    "process_detail_list",
    "utilization",
    "temperature",
    "power",
    "temperature_v",  // nvmlDeviceGetTemperatureV alone (a driver exporting it but refusing it)
    "fabric",         // nvmlDeviceGetGpuFabricInfoV and nvmlDeviceGetGpuFabricInfo
    "persistence_mode",
    "topology",            // nvmlDeviceGetTopologyCommonAncestor (either GPU of the pair)
    "nvlink",              // nvmlDeviceGetNvLinkState and the field NVML_FI_DEV_NVLINK_LINK_COUNT
    "nvlink_remote_pci",   // nvmlDeviceGetNvLinkRemotePciInfo_v2 (a VM that cannot see the far end)
    "nvlink_remote_type",  // nvmlDeviceGetNvLinkRemoteDeviceType
    "p2p_status",          // nvmlDeviceGetP2PStatus (either GPU of the pair)
};
static_assert(kQueryCount <= 32, "not_supported and no_permission are 32-bit masks");

struct SimProcess {
    unsigned pid = 0;
    unsigned long long used_memory = static_cast<unsigned long long>(NVML_VALUE_NOT_AVAILABLE);
    unsigned mode = NVML_PROCESS_MODE_COMPUTE;
};

// One NVLink of a GPU: whether it is active, and its far end (another GPU of the host, an NVSwitch by its
// PCI bus id, or unknown: a board whose bridge is missing).
struct SimNvLink {
    enum class To { kUnknown, kGpu, kSwitch };
    bool active = true;
    To to = To::kUnknown;
    unsigned gpu = 0;
    std::string switch_bus_id;
};

struct SimDevice {
    unsigned index = 0;
    std::string uuid, name, pci_bus_id;
    unsigned long long memory_total = 80ULL << 30;
    unsigned long long memory_used = 0;
    unsigned long long memory_reserved = 0;  // the driver's own: v1 counts it as used, v2 apart
    unsigned minor_number = 0;
    Fault fault = Fault::kNone;
    std::vector<unsigned long> cpu_affinity;  // bitmask; empty: NOT_SUPPORTED
    nvmlComputeMode_t compute_mode = NVML_COMPUTEMODE_DEFAULT;
    bool inforom_corrupted = false, remap_failure = false, remap_pending = false, pages_pending = false;
    bool ecc_enabled = true;
    unsigned long long ecc_uncorrected = 0;
    unsigned recovery_action = NVML_GPU_RECOVERY_ACTION_NONE;
    nvmlReturn_t state_error = NVML_SUCCESS;
    // Explicit triggers a test creates: state_error only while this file exists (empty: always), and
    // the handle refused with GPU_IS_LOST while that one does (a GPU gone from the bus; empty: never).
    std::string state_error_when_exists, lost_handle_when_exists;
    // NVLink fabric (NVSwitch systems): nvmlGpuFabricInfo_v3 fields, and which struct the driver has:
    // 3 (v3 and v2), 2 (v2 only: R550), 1 (nvmlDeviceGetGpuFabricInfo only: R535). No "fabric": a PCIe
    // part, every fabric query NOT_SUPPORTED.
    bool has_fabric = false;
    unsigned char fabric_state = NVML_GPU_FABRIC_STATE_NOT_SUPPORTED;
    nvmlReturn_t fabric_status = NVML_SUCCESS;
    unsigned char fabric_health_summary = NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED;
    unsigned fabric_struct = 3;
    std::vector<SimProcess> processes;
    // Readings pinned by the spec; -1: they follow the load curve.
    int utilization = -1, temperature = -1;
    long long power_mw = -1;
    unsigned not_supported = 0, no_permission = 0;  // bit per Query
    // MIG: a GPU with a "mig" spec has a mode; slot_units[slot] is its unit in SimState::units or -1.
    bool mig_capable = false;
    unsigned mig_mode = NVML_DEVICE_MIG_DISABLE, mig_pending = NVML_DEVICE_MIG_DISABLE;
    std::vector<int> slot_units;
    // A MIG unit (a handle from nvmlDeviceGetMigDeviceHandleByIndex): its GPU, GPU and compute instance.
    bool is_unit = false;
    unsigned gi = 0, ci = 0, slot = 0;
    bool persistence_mode = true;  // NVML_FEATURE_ENABLED
    // Where the GPU sits on PCIe ("pcie"): its board (empty: a board of its own), the PCIe switches
    // above it (outermost first), its host bridge and NUMA node; nvmlDeviceGetTopologyCommonAncestor
    // answers from these. And its NVLinks ("nvlinks"; none: no NVLink).
    std::string board;
    std::vector<std::string> switches;
    std::string host_bridge;
    unsigned numa_node = 0;
    std::vector<SimNvLink> nvlinks;
};

struct SimState {
    std::mutex mutex;
    int refcount = 0;
    std::string driver_version = "999.99.99";
    std::vector<SimDevice> devices;
    std::vector<SimDevice> units;  // the MIG units of every GPU
    bool unprivileged = false;
};

SimState& state();

// The host bridge of a GPU whose spec names none.
const char* const kDefaultHostBridge = "host bridge 0";

// GPU i of FLINK_GPU_SIM_DEVICES, and the defaults of a spec's devices[i].
SimDevice default_device(unsigned i);

// A configuration error or a file the simulator cannot write, on stderr (or, while a
// ComplaintCapture lives on this thread, into its text: flinkgpuSimCheckSpec answers it).
void complain(const std::string& what);

class ComplaintCapture {
public:
    explicit ComplaintCapture(std::string* into);
    ~ComplaintCapture();
    ComplaintCapture(const ComplaintCapture&) = delete;
    ComplaintCapture& operator=(const ComplaintCapture&) = delete;

private:
    std::string* previous_;
};

unsigned long long monotonic_ms();

// The device a handle names, for a query; devices live in vectors that only change at init.
nvmlReturn_t device_for(nvmlDevice_t handle, const SimDevice** out);

// What "not_supported" / "no_permission" (and an unprivileged caller's MIG rule) say of query `q`.
nvmlReturn_t query_allowed(const SimDevice& d, Query q);

// What every state query of `d` answers now: its state_error while its trigger holds.
nvmlReturn_t state_error_now(const SimDevice& d);

// A device for the state query `q`: its state_error, or what "not_supported"/"no_permission" say.
nvmlReturn_t state_device(nvmlDevice_t handle, Query q, const SimDevice** out);

nvmlReturn_t copy_string(const std::string& value, char* buf, unsigned length);

}  // namespace flinkgpu_sim
