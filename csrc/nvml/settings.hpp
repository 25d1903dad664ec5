// The NVML backend's settings read from text, one reading with one set of messages for flink-gpu-discovery,
// the in-process driver and bind: the discovery script's flags (--busy-gpus, --nvml-timeout, which the
// driver reads from discovery-script.args where its own parameters leave them unset) and the
// health-checks grammar.
#pragma once

#include "flink/script_args.hpp"
#include "nvml/choice.hpp"
#include "nvml/deadline.hpp"
#include "nvml/state.hpp"

#include <string>
#include <string_view>

namespace flinkgpu {

struct ScriptSettings {
    bool busy_given = false;  // --busy-gpus was given (with a valid value: `busy`)
    BusyPolicy busy = BusyPolicy::kAvoid;
    bool nvml_timeout_given = false;                   // --nvml-timeout was given (with a valid value: `nvml_timeout`)
    double nvml_timeout = kDefaultNvmlTimeoutSeconds;  // seconds, positive
};

// "" when every flag of `args` that is given has a valid value (they are in `*out`); else what is wrong
// with the first that has not, naming the flag, the value and what is accepted.
std::string read_script_settings(const ScriptArgs& args, ScriptSettings* out);

// "" when `text` is a health-checks value: names of check_name(), "all", each optionally prefixed with
// '-' to leave it out, comma-separated, applied left to right, ASCII case and blanks ignored ("all,-inforom");
// the enforced checks are in `*out`. Else what is wrong, naming the item and what is accepted.
std::string read_health_checks(std::string_view text, CheckSet* out);

}  // namespace flinkgpu
