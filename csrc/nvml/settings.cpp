// The NVML backend's settings read from text; see settings.hpp.
#include "nvml/settings.hpp"

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

namespace {

std::string_view trimmed(std::string_view text) {
    const char* blanks = " \t\n\r\f\v";
    const std::size_t start = text.find_first_not_of(blanks);
    if (start == std::string_view::npos) return {};
    return text.substr(start, text.find_last_not_of(blanks) - start + 1);
}

}  // namespace

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
        for (std::size_t i = 0; i < kCheckCount && !known; ++i) {
            if (name == check_name(static_cast<Check>(i))) {
                enforced.set(i, !drop);
                known = true;
            }
        }
        if (!known) {
            std::string names;
            for (std::size_t i = 0; i < kCheckCount; ++i)
                names += std::string(", ") + check_name(static_cast<Check>(i));
            return "'" + std::string(item) + "' is not a health check; use all" + names +
                   ", each optionally prefixed with '-' to leave it out (e.g. 'all,-inforom')";
        }
        if (comma == std::string_view::npos) break;
        start = comma + 1;
    }
    *out = enforced;
    return "";
}

}  // namespace flinkgpu
