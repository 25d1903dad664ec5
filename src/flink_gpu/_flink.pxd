# C++ declarations of csrc/flink/ and csrc/base/gpu_index.hpp for _native.pyx (cimported there; the Python-facing code is in the .pxi
# files it includes).

from libcpp cimport bool as cpp_bool
from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.utility cimport pair
from libcpp.vector cimport vector

from libc.stdint cimport uint64_t


cdef extern from "flink/script_output.hpp" namespace "flinkgpu" nogil:
    vector[string] split_output_lines_cpp "flinkgpu::split_output_lines"(const string& text) except +
    vector[string] parse_gpu_indices_cpp "flinkgpu::parse_gpu_indices"(const string& line) except +


cdef extern from *:
    ctypedef unsigned int char32_t  # C++'s own type; Cython only needs to know it is an integer


cdef extern from "flink/java_text.hpp" namespace "flinkgpu" nogil:
    bint is_java_whitespace_cpp "flinkgpu::is_java_whitespace"(char32_t c) noexcept
    bint is_java_trimmed_cpp "flinkgpu::is_java_trimmed"(char32_t c) noexcept


cdef extern from "base/gpu_index.hpp" namespace "flinkgpu" nogil:
    int compare_indices_cpp "flinkgpu::compare_indices"(string_view a, string_view b) noexcept
    void sort_indices_cpp "flinkgpu::sort_indices"(vector[string]* indices) noexcept


cdef extern from "flink/script_args.hpp" namespace "flinkgpu" nogil:
    const char* kEnableCoordinationFlag "flinkgpu::kEnableCoordinationFlag"
    const char* kCoordinationFileFlag "flinkgpu::kCoordinationFileFlag"
    const char* kBusyGpusFlag "flinkgpu::kBusyGpusFlag"
    const char* kNvmlTimeoutFlag "flinkgpu::kNvmlTimeoutFlag"
    const char* kTopologyFlag "flinkgpu::kTopologyFlag"

    cdef cppclass CUnknownToken "flinkgpu::UnknownToken":
        string token
        string suggestion

    cdef cppclass CScriptArgs "flinkgpu::ScriptArgs":
        bint coordination_mode
        string coordination_file
        bint file_value_missing
        bint has_busy_gpus
        string busy_gpus
        bint has_nvml_timeout
        string nvml_timeout
        bint has_topology
        string topology
        vector[CUnknownToken] unknown

    CScriptArgs parse_script_args_cpp "flinkgpu::parse_script_args"(const vector[string]& tokens) except +
    vector[string] with_coordination_file_cpp "flinkgpu::with_coordination_file"(
        const vector[string]& tokens, const string& path) except +


cdef extern from "flink/duration.hpp" namespace "flinkgpu" nogil:
    bint parse_flink_duration "flinkgpu::parse_flink_duration"(string_view text, double* seconds,
                                                                 string* error) except +


cdef extern from "flink/memory_size.hpp" namespace "flinkgpu" nogil:
    bint parse_flink_memory_size "flinkgpu::parse_flink_memory_size"(string_view text, uint64_t* bytes,
                                                                       string* error) noexcept
    string format_memory_size_cpp "flinkgpu::format_memory_size"(uint64_t bytes) noexcept
