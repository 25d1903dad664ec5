// The one outcome type of every fallible call of the C++ core (docs/design.md §10). `code` says what
// kind of failure it is, which is all the binding needs to pick the Python exception; the other
// fields carry that kind's detail. Functions that must not throw return it instead.
#pragma once

#include <string>

namespace flinkgpu {

enum class StatusCode : int {
    kOk = 0,
    kInvalidArgument = 1,  // bad amount, owner, index, path or timeout
    kNotEnough = 2,        // too few GPUs free or reclaimable
    kTimeout = 3,          // a lock was not obtained in time (sys_errno: ETIMEDOUT)
    kOsError = 4,          // a file cannot be used; sys_errno says why
    kOutOfMemory = 5,      // std::bad_alloc outside NVML calls (sys_errno: ENOMEM)
    kInternal = 6,         // an unexpected C++ exception, caught at the API edge
    kNvml = 7,             // NVML, or loading it, failed: nvml_code and function say where
};

struct Status {
    StatusCode code = StatusCode::kOk;
    // kNvml: an nvmlReturn_t; loading failures use NVML_ERROR_LIBRARY_NOT_FOUND / _FUNCTION_NOT_FOUND,
    // memory exhaustion while talking to NVML NVML_ERROR_MEMORY.
    int nvml_code = 0;
    std::string function;  // kNvml: the NVML call or loader step that failed
    int sys_errno = 0;     // kOsError, kTimeout, kOutOfMemory
    std::string message;   // a full sentence saying what failed and what to do; empty when ok

    bool ok() const noexcept { return code == StatusCode::kOk; }
};

// The one way to build a failed Status (a default Status is ok): `failure` for every code but kNvml,
// `nvml_failure` for kNvml. A message built as a std::string (which may throw std::bad_alloc while it is
// built) takes the std::string overload; a literal takes the const char* one, which is noexcept and fills
// the text only if memory allows, for a catch (std::bad_alloc) or catch (...) handler of a noexcept
// function, so that a second bad_alloc cannot escape it.
Status failure(StatusCode code, std::string message, int sys_errno = 0);
Status failure(StatusCode code, const char* message, int sys_errno = 0) noexcept;
Status nvml_failure(int nvml_code, const char* function, std::string message);
Status nvml_failure(int nvml_code, const char* function, const char* message) noexcept;

// strerror_r's text for an errno value.
std::string errno_text(int err);

}  // namespace flinkgpu
