// The NVML backend's settings read from text; see settings.hpp.
#include "nvml/settings.hpp"

#include "flink/duration.hpp"

#include <cmath>
#include <cstdio>

namespace flinkgpu {

namespace {

std::string seconds_text(double seconds) {
    char out[32];
    std::snprintf(out, sizeof out, "%g s", seconds);
    return out;
}

const char* policy_name(BusyPolicy policy) {
    switch (policy) {
        case BusyPolicy::kAvoid: return "avoid";
        case BusyPolicy::kExclude: return "exclude";
        case BusyPolicy::kIgnore: return "ignore";
    }
    return "avoid";
}

// Where a value was written, as the one message template names it.
class Places {
public:
    explicit Places(const SettingsText& text) : text_(text) {}

    std::string parameter(const char* key) const {
        if (!text_.parameters_are_arguments) return "key '" + text_.key_prefix + key + "'";
        std::string name(key);  // "metrics.interval" -> metrics_interval
        for (char& c : name) c = c == '-' || c == '.' ? '_' : c;
        return name;
    }
    std::string flag(const char* flag) const {
        if (text_.flags_on_command_line) return flag;
        return std::string(flag) + " in key '" + text_.key_prefix + kScriptArgsKey + "'";
    }

private:
    const SettingsText& text_;
};

std::string invalid(const std::string& value, const std::string& place, const std::string& accepted) {
    return "Invalid value '" + value + "' for " + place + ": " + accepted + ".";
}

const char* policy_name(TopologyPolicy policy) { return policy == TopologyPolicy::kIgnore ? "ignore" : "prefer"; }

struct FlagText {
    bool given;
    const std::string& text;
    const char* flag;
};
struct KeyText {
    const ParameterText& value;
    const char* key;
};

// A setting of a few words (busy-gpus, topology), as a flag in the args and as a parameter: the flag first,
// then a valid parameter over it (warned where they differ); a wrong value reported where it was written.
template <typename Policy>
void read_words(const SettingsText& text, const Places& places, const FlagText& flag, const KeyText& parameter,
                bool (*parse)(std::string_view, Policy*) noexcept, const char* values, const char* (*name)(Policy),
                Policy* out, Settings* settings) {
    const std::string accepted = std::string("expected one of ") + values;
    bool from_flag = false;
    if (flag.given) {
        if (parse(flag.text, out)) from_flag = true;
        else if (settings->flag_error.empty())
            settings->flag_error = invalid(flag.text, places.flag(flag.flag), accepted);
    }
    if (!parameter.value.given) return;
    Policy policy = *out;
    if (!parse(parameter.value.text, &policy)) {
        settings->parameter_errors.push_back(invalid(parameter.value.text, places.parameter(parameter.key), accepted));
        return;
    }
    if (from_flag && policy != *out)
        settings->warnings.push_back("'" + text.key_prefix + parameter.key + "' is '" + name(policy) + "' but '" +
                                     text.key_prefix + kScriptArgsKey + "' has " + flag.flag + " " + name(*out) +
                                     "; using '" + name(policy) + "'.");
    *out = policy;
}

bool usable_timeout(double seconds) { return seconds > 0 && std::isfinite(seconds); }

std::string timeout_problem(const std::string& value, double* out) {
    std::string why;
    double seconds = 0;
    if (parse_flink_duration(value, &seconds, &why) && usable_timeout(seconds)) {
        *out = seconds;
        return "";
    }
    if (why.empty()) why = "it is not positive";
    return "expected a positive duration such as '5 s' or '500 ms' (" + why + ")";
}

std::string interval_problem(const std::string& value, double* out) {
    const double least = kMinMetricsInterval.count() / 1000.0;
    std::string why;
    double seconds = 0;
    if (parse_flink_duration(value, &seconds, &why) && seconds >= least) {
        *out = seconds;
        return "";
    }
    if (why.empty()) why = "it is less";
    return "expected a duration of at least " + seconds_text(least) + ", how often the GPU gauges read NVML at most (" +
           why + "; default " + seconds_text(kDefaultMetricsInterval.count() / 1000.0) + ")";
}

}  // namespace

Settings read_settings(const SettingsText& text) {
    Settings out;
    const Places places(text);

    // The flags first: a parameter that is set and valid overrides them.
    bool timeout_flag = false;
    if (text.script.has_nvml_timeout) {
        const std::string why = timeout_problem(text.script.nvml_timeout, &out.nvml_timeout);
        if (why.empty()) {
            timeout_flag = true;
        } else if (out.flag_error.empty()) {
            out.flag_error = invalid(text.script.nvml_timeout, places.flag(kNvmlTimeoutFlag), why);
        }
    }

    if (text.nvml_timeout.given) {
        double seconds = 0;
        const std::string why = timeout_problem(text.nvml_timeout.text, &seconds);
        if (!why.empty()) {
            out.parameter_errors.push_back(invalid(text.nvml_timeout.text, places.parameter(kNvmlTimeoutKey), why));
        } else {
            if (timeout_flag && seconds != out.nvml_timeout)
                out.warnings.push_back("'" + text.key_prefix + kNvmlTimeoutKey + "' is '" + text.nvml_timeout.text +
                                       "' but '" + text.key_prefix + kScriptArgsKey + "' has " + kNvmlTimeoutFlag +
                                       " " + text.script.nvml_timeout + "; using '" + text.nvml_timeout.text + "'.");
            out.nvml_timeout = seconds;
        }
    }
    read_words(text, places, {text.script.has_busy_gpus, text.script.busy_gpus, kBusyGpusFlag},
               {text.busy_gpus, kBusyGpusKey}, parse_busy_policy, kBusyPolicyValues, policy_name, &out.busy, &out);
    read_words(text, places, {text.script.has_topology, text.script.topology, kTopologyFlag},
               {text.topology, kTopologyKey}, parse_topology_policy, kTopologyPolicyValues, policy_name, &out.topology,
               &out);
    if (text.health_checks.given) {
        CheckSet checks;
        const std::string why = read_health_checks(text.health_checks.text, &checks);
        if (!why.empty()) {
            out.parameter_errors.push_back(invalid(text.health_checks.text, places.parameter(kHealthChecksKey), why));
        } else {
            out.health_checks = checks;
        }
    }
    if (text.metrics_interval.given) {
        const std::string why = interval_problem(text.metrics_interval.text, &out.metrics_interval);
        if (!why.empty())
            out.parameter_errors.push_back(
                invalid(text.metrics_interval.text, places.parameter(kMetricsIntervalKey), why));
    }
    return out;
}

namespace {

std::string_view trimmed(std::string_view text) {
    const char* blanks = " \t\n\r\f\v";
    const std::size_t start = text.find_first_not_of(blanks);
    if (start == std::string_view::npos) return {};
    return text.substr(start, text.find_last_not_of(blanks) - start + 1);
}

// The check spelled `name`, as check_name() spells it.
bool check_named(std::string_view name, std::size_t* out) {
    for (std::size_t i = 0; i < kCheckCount; ++i) {
        if (name == check_name(static_cast<Check>(i))) {
            *out = i;
            return true;
        }
    }
    return false;
}

// The one sentence for an item that names no check; `accepted`: what the reader takes instead.
std::string not_a_check(std::string_view item, const std::string& accepted) {
    std::string names;
    for (std::size_t i = 0; i < kCheckCount; ++i)
        names += std::string(i ? ", " : "") + check_name(static_cast<Check>(i));
    return "'" + std::string(item) + "' is not a health check; use " + accepted + names;
}

}  // namespace

Status check_nvml_timeout(double seconds, const char* what) {
    if (usable_timeout(seconds)) return {};
    char shown[32];
    std::snprintf(shown, sizeof shown, "%g", seconds);
    return failure(StatusCode::kInvalidArgument,
                   std::string("Invalid ") + what + " " + shown + ": it must be a positive, finite number of seconds.");
}

Status check_names(const std::vector<std::string>& names, const char* what, CheckSet* out) {
    CheckSet named;
    for (const std::string& name : names) {
        std::size_t check = 0;
        if (!check_named(name, &check))
            return failure(StatusCode::kInvalidArgument,
                           std::string("Invalid ") + what + ": " + not_a_check(name, "") + ".");
        named.set(check);
    }
    *out = named;
    return {};
}

std::string read_health_checks(std::string_view text, CheckSet* out) {
    CheckSet enforced;
    std::size_t start = 0;
    for (;;) {
        const std::size_t comma = text.find(',', start);
        const std::string_view item =
            trimmed(text.substr(start, comma == std::string_view::npos ? comma : comma - start));
        std::string name(item);
        for (char& c : name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
        const bool drop = !name.empty() && name[0] == '-';
        if (drop) name = std::string(trimmed(std::string_view(name).substr(1)));
        bool known = false;
        if (name == "all") {
            enforced = drop ? CheckSet() : all_checks();
            known = true;
        }
        std::size_t check = 0;
        if (!known && check_named(name, &check)) {
            enforced.set(check, !drop);
            known = true;
        }
        if (!known)
            return not_a_check(item, "all, ") +
                   ", each optionally prefixed with '-' to leave it out (e.g. 'all,-inforom')";
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    *out = enforced;
    return "";
}

}  // namespace flinkgpu
