// The one rule for a process id; see process_id.hpp.
#include "base/process_id.hpp"

namespace flinkgpu {

Status check_pid(long long pid, const char* what, const std::string& written) {
    if (pid > 0 && pid <= kMaxPid) return {};
    return failure(StatusCode::kInvalidArgument,
                   std::string("Invalid ") + what + " " + (written.empty() ? std::to_string(pid) : written) +
                       ": it must be a positive process id, at most " + std::to_string(kMaxPid) + ".");
}

}  // namespace flinkgpu
