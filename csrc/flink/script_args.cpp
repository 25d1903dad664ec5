#include "flink/script_args.hpp"

#include <algorithm>
#include <cstddef>

namespace flinkgpu {
namespace {

// Levenshtein distance, two rows.
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::size_t> prev(b.size() + 1), cur(b.size() + 1);
    for (std::size_t j = 0; j <= b.size(); ++j) prev[j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i) {
        cur[0] = i;
        for (std::size_t j = 1; j <= b.size(); ++j) {
            cur[j] = std::min({prev[j] + 1, cur[j - 1] + 1, prev[j - 1] + (a[i - 1] == b[j - 1] ? 0 : 1)});
        }
        std::swap(prev, cur);
    }
    return prev[b.size()];
}

}  // namespace

bool asks_for_usage(const std::vector<std::string>& arguments) {
    return !arguments.empty() && (arguments.front() == kHelpFlag || arguments.front() == kShortHelpFlag);
}

std::string suggest_flag(std::string_view token) {
    constexpr const char* kFlags[] = {kEnableCoordinationFlag, kCoordinationFileFlag, kBusyGpusFlag, kNvmlTimeoutFlag,
                                      kTopologyFlag};
    // A shortened flag (--enable-coord) or one with something appended (--coordination-file=/x):
    // no similarity threshold would catch both a short prefix and a long tail.
    for (const char* flag : kFlags) {
        const std::string_view f(flag);
        const bool abbreviation =
            token.substr(0, 2) == "--" && 2 * token.size() >= f.size() && f.substr(0, token.size()) == token;
        if (abbreviation || token.substr(0, f.size()) == f) return flag;
    }
    const char* best = nullptr;
    std::size_t best_distance = 0;
    for (const char* flag : kFlags) {
        const std::string_view f(flag);
        // A token far longer than every flag resembles none; no quadratic work for it.
        if (token.size() > 2 * f.size()) continue;
        const std::size_t d = edit_distance(token, f);
        const std::size_t longer = std::max(token.size(), f.size());
        // similarity 1 - d / longer >= 0.6, in integers
        if (5 * d <= 2 * longer && (best == nullptr || d < best_distance)) {
            best = flag;
            best_distance = d;
        }
    }
    return best != nullptr ? best : "";
}

namespace {

// What each token is to the grammar: the one reading behind parse_script_args and
// with_coordination_file.
enum class Role {
    kEnable,
    kFileFlag,
    kFileValue,
    kBusyFlag,
    kBusyValue,
    kTimeoutFlag,
    kTimeoutValue,
    kTopologyFlag,
    kTopologyValue,
    kNull,
    kUnknown
};

// The flags that take the next token as their value, and the roles of both.
struct ValueFlag {
    const char* flag;
    Role role, value;
};
constexpr ValueFlag kValueFlags[] = {{kCoordinationFileFlag, Role::kFileFlag, Role::kFileValue},
                                     {kBusyGpusFlag, Role::kBusyFlag, Role::kBusyValue},
                                     {kNvmlTimeoutFlag, Role::kTimeoutFlag, Role::kTimeoutValue},
                                     {kTopologyFlag, Role::kTopologyFlag, Role::kTopologyValue}};

std::vector<Role> token_roles(const std::vector<std::string>& tokens) {
    std::vector<Role> roles;
    roles.reserve(tokens.size());
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::string& token = tokens[i];
        const ValueFlag* valued = nullptr;
        for (const ValueFlag& f : kValueFlags)
            if (token == f.flag) valued = &f;
        if (token == kEnableCoordinationFlag) {
            roles.push_back(Role::kEnable);
        } else if (valued != nullptr) {
            roles.push_back(valued->role);
            // the next token is the value, whatever it is (even empty, even a flag)
            if (i + 1 < tokens.size()) roles.push_back(valued->value);
            ++i;
        } else {
            roles.push_back(token == "null" ? Role::kNull : Role::kUnknown);
        }
    }
    return roles;
}

}  // namespace

ScriptArgs parse_script_args(const std::vector<std::string>& tokens) {
    ScriptArgs args;
    args.coordination_file = kDefaultCoordinationFile;
    const std::vector<Role> roles = token_roles(tokens);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::string& token = tokens[i];
        const bool has_value =
            i + 1 < tokens.size() && (roles[i + 1] == Role::kFileValue || roles[i + 1] == Role::kBusyValue ||
                                      roles[i + 1] == Role::kTimeoutValue || roles[i + 1] == Role::kTopologyValue);
        switch (roles[i]) {
            case Role::kEnable: args.coordination_mode = true; break;
            case Role::kFileFlag:
                // the last one counts; without a value (or an empty one) the file is the default
                if (has_value && !tokens[i + 1].empty()) {
                    args.coordination_file = tokens[i + 1];
                } else {
                    args.coordination_file = kDefaultCoordinationFile;
                    args.file_value_missing = true;
                }
                break;
            case Role::kBusyFlag:
                args.has_busy_gpus = true;
                args.busy_gpus = has_value ? tokens[i + 1] : std::string();
                break;
            case Role::kTimeoutFlag:
                args.has_nvml_timeout = true;
                args.nvml_timeout = has_value ? tokens[i + 1] : std::string();
                break;
            case Role::kTopologyFlag:
                args.has_topology = true;
                args.topology = has_value ? tokens[i + 1] : std::string();
                break;
            case Role::kUnknown: args.unknown.push_back({token, suggest_flag(token)}); break;
            case Role::kFileValue:
            case Role::kBusyValue:
            case Role::kTimeoutValue:
            case Role::kTopologyValue:
            case Role::kNull: break;
        }
    }
    return args;
}

std::vector<std::string> with_coordination_file(const std::vector<std::string>& tokens, const std::string& path) {
    const std::vector<Role> roles = token_roles(tokens);
    std::vector<std::string> out;
    out.reserve(tokens.size() + 2);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        if (roles[i] != Role::kFileFlag && roles[i] != Role::kFileValue) out.push_back(tokens[i]);
    }
    out.push_back(kCoordinationFileFlag);
    out.push_back(path);
    return out;
}

}  // namespace flinkgpu
