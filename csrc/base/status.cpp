#include "base/status.hpp"

#include <cstring>
#include <utility>

namespace flinkgpu {
namespace {

// strerror_r comes in a GNU (returns char*) and an XSI (returns int) flavour; accept either.
[[maybe_unused]] inline const char* pick_strerror(int /*xsi_result*/, const char* buf) { return buf; }
[[maybe_unused]] inline const char* pick_strerror(const char* gnu_result, const char* /*buf*/) { return gnu_result; }

}  // namespace

Status failure(StatusCode code, std::string message, int sys_errno) {
    Status s;
    s.code = code;
    s.sys_errno = sys_errno;
    s.message = std::move(message);
    return s;
}

Status failure(StatusCode code, const char* message, int sys_errno) noexcept {
    Status s;
    s.code = code;
    s.sys_errno = sys_errno;
    try {
        s.message = message;
    } catch (...) {
    }
    return s;
}

Status nvml_failure(int nvml_code, const char* function, std::string message) {
    Status s;
    s.code = StatusCode::kNvml;
    s.nvml_code = nvml_code;
    s.function = function;
    s.message = std::move(message);
    return s;
}

Status nvml_failure(int nvml_code, const char* function, const char* message) noexcept {
    Status s;
    s.code = StatusCode::kNvml;
    s.nvml_code = nvml_code;
    try {
        s.function = function;
        s.message = message;
    } catch (...) {
    }
    return s;
}

std::string errno_text(int err) {
    char buf[256];
    buf[0] = '\0';
    return pick_strerror(strerror_r(err, buf, sizeof buf), buf);
}

}  // namespace flinkgpu
