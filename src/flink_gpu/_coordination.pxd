# C++ declarations of csrc/coordination/claims.hpp, file.hpp, liveness.hpp and lines.hpp for _native.pyx
# (cimported there; the Python-facing code is in _coordination.pxi).

from libc.stdint cimport int64_t, uint32_t, uint64_t
from libcpp cimport bool as cpp_bool
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.utility cimport pair
from libcpp.vector cimport vector
from posix.types cimport pid_t

from flink_gpu._base cimport CNotice, Status


cdef extern from "coordination/claims.hpp" namespace "flinkgpu::coordination" nogil:
    const char* kDefaultCoordinationPath "flinkgpu::kDefaultCoordinationFile"

    cdef cppclass CoordOptions "flinkgpu::coordination::Options":
        string path
        int64_t timeout_ms

    cdef enum CoordVerdict "flinkgpu::coordination::Verdict":
        kVerdictAlive "flinkgpu::coordination::Verdict::kAlive"
        kVerdictGone "flinkgpu::coordination::Verdict::kGone"
        kVerdictPidReused "flinkgpu::coordination::Verdict::kPidReused"
        kVerdictTaskManagerGone "flinkgpu::coordination::Verdict::kTaskManagerGone"
        kVerdictLeaseHeld "flinkgpu::coordination::Verdict::kLeaseHeld"
        kVerdictLeaseReleased "flinkgpu::coordination::Verdict::kLeaseReleased"
        kVerdictOtherNamespace "flinkgpu::coordination::Verdict::kOtherNamespace"

    cdef cppclass CoordPidNamespace "flinkgpu::coordination::PidNamespace":
        cpp_bool known
        uint64_t inode

    cdef enum CoordLiveness "flinkgpu::coordination::Liveness":
        kLivenessAlive "flinkgpu::coordination::Liveness::kAlive"
        kLivenessDead "flinkgpu::coordination::Liveness::kDead"
        kLivenessUnknown "flinkgpu::coordination::Liveness::kUnknown"

    cdef cppclass CoordEntry "flinkgpu::coordination::Entry":
        size_t line_number
        string index
        string gpu
        pid_t pid
        cpp_bool has_start_time
        uint64_t start_time
        cpp_bool has_ns
        uint64_t ns
        cpp_bool has_lease
        uint32_t lease
        string lease_file
        pid_t tm
        uint32_t share
        uint64_t memory
        string slot
        CoordVerdict verdict
        cpp_bool alive
        cpp_bool lease_file_known()
        cpp_bool pid_is_in(const CoordPidNamespace& ours)
        string key(const CoordPidNamespace& ours)
        string taskmanager_key(const CoordPidNamespace& ours)

    CoordLiveness coord_liveness_of "flinkgpu::coordination::liveness_of"(CoordVerdict verdict)

    cdef cppclass CoordBadLine "flinkgpu::coordination::BadLine":
        size_t line_number
        string text

    cdef cppclass CoordClaimResult "flinkgpu::coordination::ClaimResult":
        Status status
        vector[string] indices
        vector[string] added
        vector[string] reclaimed
        vector[CoordBadLine] unparsable
        Status lease_problem
        vector[CNotice] notices

    cdef cppclass CoordReleaseResult "flinkgpu::coordination::ReleaseResult":
        Status status
        vector[string] released

    cdef cppclass CoordSnapshot "flinkgpu::coordination::Snapshot":
        Status status
        cpp_bool exists
        vector[CoordEntry] entries
        vector[CoordBadLine] unparsable

    cdef cppclass CoordCleanResult "flinkgpu::coordination::CleanResult":
        Status status
        vector[CoordEntry] removed
        vector[CoordBadLine] unparsable

    CoordClaimResult coord_claim "flinkgpu::coordination::claim"(
        const CoordOptions& opts, pid_t owner, const vector[string]& existing_indices, size_t amount,
        const vector[int]& ranks, const vector[pair[string, string]]& left_out)
    Status coord_not_enough "flinkgpu::coordination::not_enough"(
        const CoordOptions& opts, const string& amount, const vector[string]& existing_indices,
        const vector[pair[string, string]]& left_out)
    CoordReleaseResult coord_release "flinkgpu::coordination::release"(const CoordOptions& opts, pid_t owner)
    CoordReleaseResult coord_release_indices "flinkgpu::coordination::release_indices"(
        const CoordOptions& opts, pid_t owner, const vector[string]& indices)
    CoordSnapshot coord_snapshot "flinkgpu::coordination::snapshot"(const CoordOptions& opts)
    CoordCleanResult coord_clean_stale "flinkgpu::coordination::clean_stale"(const CoordOptions& opts,
                                                                             cpp_bool other_namespaces)
    cpp_bool coord_process_start_time "flinkgpu::coordination::process_start_time"(pid_t pid, uint64_t* start_time)
    vector[Status] coord_check_companions "flinkgpu::coordination::check_companions"(const CoordOptions& opts)


cdef extern from "coordination/file.hpp" namespace "flinkgpu::coordination" nogil:
    const char* kLeaseSuffix "flinkgpu::coordination::kLeaseSuffix"
    const char* kTopologySuffix "flinkgpu::coordination::kTopologySuffix"
    const char* kBindingsSuffix "flinkgpu::coordination::kBindingsSuffix"
    vector[string] coord_companion_paths "flinkgpu::coordination::companion_paths"(const string& path) except +


cdef extern from "coordination/liveness.hpp" namespace "flinkgpu::coordination" nogil:
    CoordPidNamespace coord_own_pid_namespace "flinkgpu::coordination::own_pid_namespace"()
    pid_t coord_own_pid "flinkgpu::coordination::own_pid"()


cdef extern from "coordination/lines.hpp" namespace "flinkgpu::coordination" nogil:
    bint unit_gpu_cpp "flinkgpu::coordination::unit_gpu"(const string& index, string* gpu)
    uint32_t kMaxShare "flinkgpu::coordination::kMaxShare"
    uint64_t kMaxMemoryRequest "flinkgpu::coordination::kMaxMemoryRequest"
    Status check_share "flinkgpu::coordination::check_share"(long long n, const char* what,
                                                             const string& written) except +
    Status check_memory_request "flinkgpu::coordination::check_memory_request"(uint64_t bytes, const char* what,
                                                                               const string& written) except +
