# C++ declarations of csrc/base/status.hpp, notice.hpp and process_id.hpp for _native.pyx (cimported there; the Python-facing code is in the .pxi
# files it includes).

from libcpp cimport bool as cpp_bool
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.utility cimport pair
from libcpp.vector cimport vector


cdef extern from "base/status.hpp" namespace "flinkgpu" nogil:
    enum class StatusCode "flinkgpu::StatusCode":
        kOk
        kInvalidArgument
        kNotEnough
        kTimeout
        kOsError
        kOutOfMemory
        kInternal
        kNvml

    cdef cppclass Status "flinkgpu::Status":
        StatusCode code
        int nvml_code
        string function
        int sys_errno
        string message
        bint ok()


cdef extern from "base/notice.hpp" namespace "flinkgpu" nogil:
    enum class NoticeLevel "flinkgpu::NoticeLevel":
        kInfo
        kWarning

    cdef cppclass CNotice "flinkgpu::Notice":
        NoticeLevel level
        string text


cdef extern from "base/process_id.hpp" namespace "flinkgpu" nogil:
    long long kMaxPid "flinkgpu::kMaxPid"
    Status check_pid "flinkgpu::check_pid"(long long pid, const char* what, const string& written) except +
