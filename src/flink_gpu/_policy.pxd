# C++ declarations of csrc/policy/ for _native.pyx (cimported there; the Python-facing code is in _policy.pxi).

from libc.stdint cimport uint32_t, uint64_t
from libcpp cimport bool as cpp_bool
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from flink_gpu._base cimport CNotice, Status
from flink_gpu._binding cimport BindHolder, BindResult, GpuMemory
from flink_gpu._coordination cimport CoordBadLine, CoordOptions
from flink_gpu._nvml cimport BusyPolicy, CChoice, CheckSet, Enumeration, NvmlLibrary, TopologyPolicy


cdef extern from "policy/discover.hpp" namespace "flinkgpu::policy" nogil:
    cdef cppclass DiscoveryRequest "flinkgpu::policy::DiscoveryRequest":
        vector[string] enumerated
        vector[pair[string, string]] skipped
        string counted
        int owner
        int taskmanager
        BusyPolicy busy
        TopologyPolicy topology
        CheckSet checks
        double nvml_timeout
        double spent
        size_t amount
        string amount_text
        cpp_bool enumerate_by_reading
        cpp_bool enumerate_candidates
        vector[string] known_devices
        cpp_bool coordinated
        CoordOptions coordination

    cdef cppclass CDiscoveryOutcome "flinkgpu::policy::DiscoveryOutcome":
        Status status
        CChoice choice
        Enumeration enumeration
        vector[string] chosen
        vector[string] added
        vector[string] reclaimed
        vector[CoordBadLine] unparsable
        Status lease_problem
        vector[CNotice] notices
        cpp_bool too_few_usable

    CDiscoveryOutcome discover_cpp "flinkgpu::policy::discover"(const NvmlLibrary& lib,
                                                                  const DiscoveryRequest& request)


cdef extern from "policy/bind.hpp" namespace "flinkgpu::policy" nogil:
    cdef cppclass BindRequest "flinkgpu::policy::BindRequest":
        const NvmlLibrary* lib
        CheckSet checks
        double nvml_timeout
        double spent
        int owner
        CoordOptions bindings
        BindHolder holder
        vector[string] gpus
        size_t count
        uint32_t holders_per_gpu
        uint64_t memory
        TopologyPolicy topology
        cpp_bool pack

    cdef cppclass CBindOutcome "flinkgpu::policy::BindOutcome":
        Status status
        BindResult bound
        vector[pair[string, string]] left_out
        vector[string] usable
        vector[GpuMemory] memory
        vector[CNotice] notices


cdef extern from "policy/bind.hpp" namespace "flinkgpu::policy":
    CBindOutcome bind_cpp "flinkgpu::policy::bind"(const BindRequest& request) nogil
