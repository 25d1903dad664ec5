# C++ declarations of csrc/nvml/ for _native.pyx (cimported there; the Python-facing code is in the .pxi
# files it includes).

from libcpp cimport bool as cpp_bool
from libcpp.map cimport map as cpp_map
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from flink_gpu._base cimport Status
from flink_gpu._flink cimport CScriptArgs


cdef extern from "nvml/loader.hpp" namespace "flinkgpu" nogil:
    enum class ProcessApi "flinkgpu::ProcessApi":
        pass

    cdef cppclass NvmlApi "flinkgpu::NvmlApi":
        ProcessApi process_api

    cdef cppclass SymbolBits "std::bitset<flinkgpu::kNvmlSymbolCount>":
        bint test(size_t pos) except +

    cdef cppclass NvmlLibrary:
        @staticmethod
        const NvmlLibrary* acquire(const string& requested_path, Status* status)
        @staticmethod
        const NvmlLibrary* probe(const string& requested_path, Status* status)
        @staticmethod
        string resolve_path(const string& requested_path) except +
        @staticmethod
        unsigned long process_generation()
        const NvmlApi& api()
        const SymbolBits& resolved()
        bint exports(NvmlSymbol symbol)

    enum class SymbolUse "flinkgpu::SymbolUse":
        kRequired
        kFallback
        kOptional

    cdef cppclass NvmlSymbolInfo "flinkgpu::NvmlSymbolInfo":
        const char* name
        SymbolUse use

    enum class NvmlSymbol "flinkgpu::NvmlSymbol":
        pass

    size_t kNvmlSymbolCount "flinkgpu::kNvmlSymbolCount"
    const NvmlSymbolInfo& nvml_symbol "flinkgpu::nvml_symbol"(NvmlSymbol symbol)
    const char* process_api_name "flinkgpu::process_api_name"(ProcessApi api)


cdef extern from "nvml/devices.hpp" namespace "flinkgpu" nogil:
    cdef cppclass DeviceInfo:
        string index
        unsigned nvml_index
        optional[unsigned] mig_slot
        optional[string] parent_uuid
        optional[unsigned] mig_gi
        optional[unsigned] mig_ci
        optional[string] uuid
        optional[string] name
        optional[string] pci_bus_id
        optional[unsigned long long] memory_total
        optional[unsigned] minor_number
        optional[string] cpu_affinity
        optional[int] numa_node
        optional[cpp_bool] persistence_mode

    cdef cppclass CSkippedDevice "flinkgpu::SkippedDevice":
        string index
        unsigned nvml_index
        optional[unsigned] mig_slot
        int code
        string reason

    cdef cppclass Enumeration:
        vector[DeviceInfo] devices
        vector[CSkippedDevice] skipped
        vector[string] notices

    Status query_driver_version(const NvmlLibrary& lib, optional[string]* out)


cdef extern from "nvml/state.hpp" namespace "flinkgpu" nogil:
    enum class Health "flinkgpu::Health":
        kOk
        kDegraded
        kUnhealthy
        kUnknown

    enum class Outcome "flinkgpu::Outcome":
        kOk
        kFinding
        kNotApplicable

    enum class Check "flinkgpu::Check":
        pass

    size_t kCheckCount "flinkgpu::kCheckCount"
    const char* check_name "flinkgpu::check_name"(Check check)
    const char* outcome_name "flinkgpu::outcome_name"(Outcome outcome)

    cdef cppclass CheckSet "flinkgpu::CheckSet":
        CheckSet()
        CheckSet(unsigned long long mask)
        bint test(size_t position)

    CheckSet all_checks "flinkgpu::all_checks"()

    cdef cppclass CCheckResult "flinkgpu::CheckResult":
        Outcome outcome
        Health verdict
        string finding
        bint enforced

    enum class ProcessKind "flinkgpu::ProcessKind":
        pass

    const char* process_kind_name "flinkgpu::process_kind_name"(ProcessKind kind)

    cdef cppclass CGpuProcess "flinkgpu::GpuProcess":
        unsigned pid
        optional[unsigned long long] used_memory
        ProcessKind kind
        bint own
        bint visible

    cdef cppclass CDeviceState "flinkgpu::DeviceState":
        string index
        unsigned nvml_index
        optional[unsigned] mig_slot
        Health health
        string health_text
        vector[string] findings
        vector[string] warnings
        CCheckResult checks[7]  # std::array of kCheckCount: Cython checks no size, the loops use kCheckCount
        optional[unsigned long long] memory_used
        optional[unsigned long long] memory_free
        optional[unsigned long long] memory_total
        vector[CGpuProcess] processes
        bint processes_known
        bint processes_read
        bint busy
        optional[string] compute_mode

    cdef cppclass ReadPlan "flinkgpu::ReadPlan":
        bint processes
        bint every_process_list


cdef extern from "nvml/deadline.hpp" namespace "flinkgpu" nogil:
    double kDefaultNvmlTimeoutSeconds "flinkgpu::kDefaultNvmlTimeoutSeconds"

    cdef cppclass Stall "flinkgpu::Stall":
        int gpu
        string function
        double seconds
        bint earlier

    string stall_text "flinkgpu::stall_text"(const Stall& stall, double timeout_seconds) except +
    Status query_states_within "flinkgpu::query_states_within"(
        const NvmlLibrary& lib, int owner, int taskmanager, const CheckSet& enforced, const ReadPlan& plan,
        double timeout_seconds, vector[CDeviceState]* out, vector[Stall]* stalls, cpp_bool* count_known,
        double spent_seconds)
    Status stall_failure "flinkgpu::stall_failure"(const Stall& stall, double timeout_seconds,
                                                     const string& library_path)
    Status open_within "flinkgpu::open_within"(const string& library_path, double timeout_seconds,
                                                 const NvmlLibrary** lib, Stall* stall)
    Status enumerate_within "flinkgpu::enumerate_within"(const NvmlLibrary& lib, double timeout_seconds,
                                                           Enumeration* found, Stall* stall,
                                                           const optional[vector[unsigned]]& only)


cdef extern from "nvml/metrics.hpp" namespace "flinkgpu" nogil:
    enum class Metric "flinkgpu::Metric":
        pass

    int kMetricCount "flinkgpu::kMetricCount"
    const char* metric_name "flinkgpu::metric_name"(Metric metric)

    cdef cppclass CMetricDevice "flinkgpu::MetricDevice":
        pass

    bint find_metric_device "flinkgpu::find_metric_device"(const NvmlLibrary& lib, string_view index,
                                                           CMetricDevice* out)
    long long read_metric_cpp "flinkgpu::read_metric"(const NvmlLibrary& lib, const CMetricDevice& device,
                                                      Metric metric)


cdef extern from *:
    """
    #include "nvml/sampler.hpp"
    // The sampler with the binding's units: milliseconds, and CLOCK_MONOTONIC nanoseconds (Python's
    // time.monotonic_ns(), libstdc++'s steady_clock), a negative time meaning now.
    static bool fg_watch_metrics(const std::string& path, std::string_view index, long long interval_ms) noexcept {
        return flinkgpu::watch_gpu_metrics(path, index, std::chrono::milliseconds(interval_ms));
    }
    static flinkgpu::SampledGpu fg_sampled_metrics(const std::string& path, std::string_view index,
                                                   long long at_ns) noexcept {
        const auto at = at_ns < 0 ? std::chrono::steady_clock::now()
                                  : std::chrono::steady_clock::time_point(std::chrono::nanoseconds(at_ns));
        return flinkgpu::sampled_gpu(path, index, at);
    }
    static bool fg_sample_metrics_now(long long timeout_ms) noexcept {
        return flinkgpu::sample_gpu_metrics_now(std::chrono::milliseconds(timeout_ms));
    }
    static long long fg_min_metrics_interval_ms() noexcept { return flinkgpu::kMinMetricsInterval.count(); }
    static long long fg_default_metrics_interval_ms() noexcept { return flinkgpu::kDefaultMetricsInterval.count(); }
    static long long fg_sample_margin_ms() noexcept { return flinkgpu::kSampleMargin.count(); }
    static long long fg_health_read_interval_ms() noexcept { return flinkgpu::kHealthReadInterval.count(); }
    """
    enum class GaugeHealth "flinkgpu::GaugeHealth":
        kOk
        kDegraded
        kUnhealthy
        kUnknown

    cdef cppclass SampledGpu "flinkgpu::SampledGpu":
        long long values[4]  # kMetricCount
        GaugeHealth health

    bint fg_watch_metrics(const string& path, string_view index, long long interval_ms) nogil
    SampledGpu fg_sampled_metrics(const string& path, string_view index, long long at_ns) nogil
    bint fg_sample_metrics_now(long long timeout_ms) nogil
    unsigned long long completed_samples "flinkgpu::completed_samples"() nogil
    long long fg_min_metrics_interval_ms()
    long long fg_default_metrics_interval_ms()
    long long fg_sample_margin_ms()
    long long fg_health_read_interval_ms()


cdef extern from "topology/links.hpp" namespace "flinkgpu::topology" nogil:
    enum class Pcie "flinkgpu::topology::Pcie":
        pass

    const char* pcie_label "flinkgpu::topology::pcie_label"(Pcie level)

    cdef cppclass CLink "flinkgpu::topology::Link":
        unsigned nvlinks
        Pcie pcie

    cdef cppclass CLinks "flinkgpu::topology::Links":
        CLink between(unsigned a, unsigned b)

    string link_cell "flinkgpu::topology::Links::cell"(const CLink& link) except +


cdef extern from "topology/sets.hpp" namespace "flinkgpu::topology" nogil:
    cdef cppclass CCandidate "flinkgpu::topology::Candidate":
        string index
        int rank

    vector[size_t] choose_set "flinkgpu::topology::choose_set"(
        const CLinks& links, const vector[string]& fixed, const vector[CCandidate]& ordered, size_t need) except +
    int compare_joined "flinkgpu::topology::compare_joined"(
        const CLinks& links, const vector[string]& a, const vector[string]& b) except +


cdef extern from "nvml/topology.hpp" namespace "flinkgpu" nogil:
    cdef cppclass CNvLinkReading "flinkgpu::NvLinkReading":
        cpp_bool known
        unsigned count
        unsigned inactive
        cpp_bool to_switch

    cdef cppclass CTopology "flinkgpu::Topology":
        CLinks links
        cpp_map[unsigned, CNvLinkReading] nvlink
        cpp_map[unsigned, string] bus_ids
        vector[Stall] stalls
        unsigned long calls

    void read_topology "flinkgpu::read_topology"(const NvmlLibrary& lib, const vector[unsigned]& gpus,
                                                 double timeout_seconds, CTopology* out)


cdef extern from "host/locality.hpp" namespace "flinkgpu" nogil:
    optional[int] pci_numa_node "flinkgpu::pci_numa_node"(const string& sysfs_root, const string& nvml_bus_id) except +


cdef extern from "nvml/choice.hpp" namespace "flinkgpu" nogil:
    enum class BusyPolicy "flinkgpu::BusyPolicy":
        kAvoid
        kExclude
        kIgnore

    const char* kBusyPolicyValues "flinkgpu::kBusyPolicyValues"
    bint parse_busy_policy "flinkgpu::parse_busy_policy"(string_view text, BusyPolicy* out)

    enum class TopologyPolicy "flinkgpu::TopologyPolicy":
        kPrefer
        kIgnore

    const char* kTopologyPolicyValues "flinkgpu::kTopologyPolicyValues"
    bint parse_topology_policy "flinkgpu::parse_topology_policy"(string_view text, TopologyPolicy* out)

    cdef cppclass CRanking "flinkgpu::Ranking":
        vector[string] indices
        vector[int] ranks
        vector[pair[string, string]] left_out

    string busy_reason_cpp "flinkgpu::busy_reason"(const CDeviceState& state) except +

    void judge_nvlinks "flinkgpu::judge_nvlinks"(const CTopology& topology, const CheckSet& enforced,
                                                 vector[CDeviceState]* states) except +

    cdef cppclass CChoice "flinkgpu::Choice":
        vector[CDeviceState] states
        CRanking ranking


cdef extern from "nvml/settings.hpp" namespace "flinkgpu" nogil:
    string read_health_checks_cpp "flinkgpu::read_health_checks"(string_view text, CheckSet* out) except +
    Status check_nvml_timeout "flinkgpu::check_nvml_timeout"(double seconds, const char* what) except +
    Status check_names "flinkgpu::check_names"(const vector[string]& names, const char* what, CheckSet* out) except +

    cdef cppclass CParameterText "flinkgpu::ParameterText":
        cpp_bool given
        string text

    cdef cppclass CSettingsText "flinkgpu::SettingsText":
        CParameterText busy_gpus
        CParameterText topology
        CParameterText nvml_timeout
        CParameterText health_checks
        CParameterText metrics_interval
        CScriptArgs script
        string key_prefix
        cpp_bool parameters_are_arguments

    cdef cppclass CSettings "flinkgpu::Settings":
        BusyPolicy busy
        TopologyPolicy topology
        double nvml_timeout
        CheckSet health_checks
        double metrics_interval
        vector[string] parameter_errors
        string flag_error
        vector[string] warnings

    CSettings read_settings_cpp "flinkgpu::read_settings"(const CSettingsText& text) except +
