# C++ declarations of csrc/coordination/bindings.hpp for _native.pyx (cimported there; the Python-facing code is
# in _binding.pxi).

from libc.stdint cimport uint64_t
from libcpp cimport bool as cpp_bool
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from posix.types cimport pid_t

from flink_gpu._base cimport Status
from flink_gpu._coordination cimport CoordBadLine, CoordOptions, CoordReleaseResult


cdef extern from "coordination/bindings.hpp" namespace "flinkgpu::binding" nogil:
    cdef cppclass BindHolder "flinkgpu::binding::Holder":
        pid_t pid
        string slot
        pid_t taskmanager
        uint64_t start_time

    cdef cppclass BindOrphan "flinkgpu::binding::Orphan":
        pid_t pid
        pid_t taskmanager
        string index

    cdef cppclass BindResult "flinkgpu::binding::BindResult":
        Status status
        vector[string] indices
        vector[string] added
        vector[CoordBadLine] unparsable
        Status lease_problem
        uint64_t start_time
        string file_identity
        uint64_t memory
        vector[BindOrphan] orphans

    cdef cppclass GpuMemory "flinkgpu::binding::GpuMemory":
        optional[uint64_t] total
        optional[uint64_t] free

    Status binding_check_slot "flinkgpu::binding::check_slot"(const string& slot)
    string binding_orphan_text_cpp "flinkgpu::binding::orphan_text"(pid_t pid, pid_t taskmanager,
                                                                    const string& gpus) except +
    CoordReleaseResult binding_unbind_cpp "flinkgpu::binding::unbind"(const CoordOptions& opts,
                                                                     const BindHolder& holder)
