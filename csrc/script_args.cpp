#include "script_args.hpp"

#include "coordination.hpp"

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

std::string suggest_flag(std::string_view token) {
    constexpr const char* kFlags[] = {kEnableCoordinationFlag, kCoordinationFileFlag, kBusyGpusFlag};
    // A shortened flag (--enable-coord) or one with something appended (--coordination-file=/x):
    // no similarity threshold would catch both a short prefix and a long tail.
    for (const char* flag : kFlags) {
        const std::string_view f(flag);
        const bool abbreviation = token.substr(0, 2) == "--" && 2 * token.size() >= f.size() &&
                                  f.substr(0, token.size()) == token;
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

ScriptArgs parse_script_args(const std::vector<std::string>& tokens) {
    ScriptArgs args;
    args.coordination_file = coordination::kDefaultPath;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        const std::string& token = tokens[i];
        if (token == kEnableCoordinationFlag) {
            args.coordination_mode = true;
        } else if (token == kCoordinationFileFlag) {
            if (i + 1 < tokens.size() && !tokens[i + 1].empty()) {
                args.coordination_file = tokens[i + 1];
            } else {
                args.coordination_file = coordination::kDefaultPath;
                args.file_value_missing = true;
            }
            ++i;  // the value, even an empty one
        } else if (token == kBusyGpusFlag) {
            args.has_busy_gpus = true;
            args.busy_gpus = i + 1 < tokens.size() ? tokens[i + 1] : std::string();
            ++i;
        } else if (token != "null") {
            args.unknown.push_back({token, suggest_flag(token)});
        }
    }
    return args;
}

}  // namespace flinkgpu
