// The one rule for a process (or thread) id a caller names, for every layer that takes one: the
// coordination and bindings files' holders and TaskManagers, the state read's owner, the process tree.
#pragma once

#include "base/status.hpp"

#include <string>

namespace flinkgpu {

// The largest process id (pid_t's; Linux's own limit, PID_MAX_LIMIT, is lower).
inline constexpr long long kMaxPid = 2147483647;

// kInvalidArgument unless 1 <= `pid` <= kMaxPid: "Invalid <what> <pid>: it must be a positive process id,
// at most 2147483647." `written`: the value as the caller wrote it where `pid` could not hold it ("": `pid`).
Status check_pid(long long pid, const char* what, const std::string& written = "");

}  // namespace flinkgpu
