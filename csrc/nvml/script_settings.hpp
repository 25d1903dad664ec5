// The NVML backend's settings in the discovery script's arguments (--busy-gpus, --nvml-timeout): one
// reading, with one set of messages, for flink-gpu-discovery and for the in-process driver (which reads
// them from discovery-script.args where its own parameters leave them unset).
#pragma once

#include "flink/script_args.hpp"
#include "nvml/choice.hpp"
#include "nvml/deadline.hpp"

#include <string>

namespace flinkgpu {

struct ScriptSettings {
    bool busy_given = false;  // --busy-gpus was given (with a valid value: `busy`)
    BusyPolicy busy = BusyPolicy::kAvoid;
    bool nvml_timeout_given = false;  // --nvml-timeout was given (with a valid value: `nvml_timeout`)
    double nvml_timeout = kDefaultNvmlTimeoutSeconds;  // seconds, positive
};

// "" when every flag of `args` that is given has a valid value (they are in `*out`); else what is wrong
// with the first that has not, naming the flag, the value and what is accepted.
std::string read_script_settings(const ScriptArgs& args, ScriptSettings* out);

}  // namespace flinkgpu
