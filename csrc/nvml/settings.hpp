// The NVML backend's settings, read from text by one parser with one set of messages for the in-process
// driver (its parameters and the flags in discovery-script.args, handed over as the raw strings) and
// flink-gpu-discovery (its flags alone): busy-gpus, topology, nvml-timeout, health-checks and metrics.interval.
// A parameter wins over the flag of the same setting (--busy-gpus, --topology, --nvml-timeout); the others have
// no flag. A value that is wrong is reported, naming where it was written, the value and what is
// accepted, and its setting reads as if it were not given, so that a lenient reader (doctor, a Java
// TaskManager's view) sees what the rest of the configuration says.
#pragma once

#include "base/status.hpp"
#include "flink/script_args.hpp"
#include "nvml/choice.hpp"
#include "nvml/deadline.hpp"
#include "nvml/sampler.hpp"
#include "nvml/state.hpp"

#include <string>
#include <string_view>
#include <vector>

namespace flinkgpu {

// The parameters' keys, relative to the resource's parameter prefix.
inline constexpr const char* kBusyGpusKey = "busy-gpus";
inline constexpr const char* kNvmlTimeoutKey = "nvml-timeout";
inline constexpr const char* kTopologyKey = "topology";
inline constexpr const char* kHealthChecksKey = "health-checks";
inline constexpr const char* kMetricsIntervalKey = "metrics.interval";
inline constexpr const char* kScriptArgsKey = "discovery-script.args";

struct ParameterText {
    bool given = false;
    std::string text;  // as Flink renders the configured value
};

struct SettingsText {
    ParameterText busy_gpus;
    ParameterText topology;
    ParameterText nvml_timeout;
    ParameterText health_checks;
    ParameterText metrics_interval;
    ScriptArgs script;  // discovery-script.args, or flink-gpu-discovery's arguments after the amount
    // What the keys start with in messages ("external-resource.gpu.param."; "" when the resource is unknown).
    std::string key_prefix;
    // The flags are flink-gpu-discovery's own arguments: messages name the flag alone, not the args key.
    bool flags_on_command_line = false;
    // The parameters are a call's arguments (bind's): messages name them as it does ("nvml_timeout"), not keys.
    bool parameters_are_arguments = false;
};

struct Settings {
    BusyPolicy busy = BusyPolicy::kAvoid;
    TopologyPolicy topology = TopologyPolicy::kPrefer;
    double nvml_timeout = kDefaultNvmlTimeoutSeconds;  // seconds, positive
    CheckSet health_checks = all_checks();
    double metrics_interval = kDefaultMetricsInterval.count() / 1000.0;  // seconds, at least kMinMetricsInterval
    // One sentence per parameter whose value is wrong, in the order of the fields above.
    std::vector<std::string> parameter_errors;
    // The first flag whose value is wrong ("" when none). A driver that reads the flags (the NVML
    // backend) fails with it even when the parameter is set: only the stock script ignores them.
    std::string flag_error;
    // A parameter that overrides a flag with another value.
    std::vector<std::string> warnings;
};

Settings read_settings(const SettingsText& text);

// kInvalidArgument unless `seconds` is a deadline NVML's calls can keep: positive and finite. "Invalid <what>
// <seconds>: it must be a positive, finite number of seconds." (`what`: as the caller names it).
Status check_nvml_timeout(double seconds, const char* what);

// The checks `names` name, each exactly as check_name() spells it (the option's "all" and '-' are not names),
// into `*out`; else kInvalidArgument naming the first that is not: "Invalid <what>: '<name>' is not a health
// check; use inforom, remapped-rows, ...".
Status check_names(const std::vector<std::string>& names, const char* what, CheckSet* out);

// "" when `text` is a health-checks value: names of check_name(), "all", each optionally prefixed with
// '-' to leave it out, comma-separated, applied left to right, ASCII case and blanks ignored ("all,-inforom");
// the enforced checks are in `*out`. Else what is wrong, naming the item and what is accepted.
std::string read_health_checks(std::string_view text, CheckSet* out);

}  // namespace flinkgpu
