// The NVML backend's settings in the discovery script's arguments; see script_settings.hpp.
#include "nvml/script_settings.hpp"

#include "flink/duration.hpp"

namespace flinkgpu {

std::string read_script_settings(const ScriptArgs& args, ScriptSettings* out) {
    ScriptSettings read;
    if (args.has_busy_gpus) {
        if (!parse_busy_policy(args.busy_gpus, &read.busy))
            return std::string(kBusyGpusFlag) + " must be one of " + kBusyPolicyValues + ", got '" + args.busy_gpus +
                   "'";
        read.busy_given = true;
    }
    if (args.has_nvml_timeout) {
        std::string why;
        if (!parse_flink_duration(args.nvml_timeout, &read.nvml_timeout, &why) || !(read.nvml_timeout > 0)) {
            if (why.empty()) why = "it must be positive";
            return std::string(kNvmlTimeoutFlag) + " must be a positive duration such as '5 s' or '500 ms', got '" +
                   args.nvml_timeout + "': " + why;
        }
        read.nvml_timeout_given = true;
    }
    *out = read;
    return "";
}

}  // namespace flinkgpu
