#include "flink/script_output.hpp"

#include "flink/java_text.hpp"

#include <unordered_set>

namespace flinkgpu {

std::vector<std::string> split_output_lines(std::string_view text) {
    std::vector<std::string> lines;
    size_t start = 0, i = 0;
    while (i < text.size()) {
        const char c = text[i];
        if (c == '\n' || c == '\r') {
            lines.emplace_back(text.substr(start, i - start));
            i += (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ? 2 : 1;
            start = i;
        } else {
            ++i;
        }
    }
    if (start < text.size()) lines.emplace_back(text.substr(start));
    return lines;
}

std::vector<std::string> parse_gpu_indices(std::string_view line) {
    std::vector<std::string> indices;
    // A hash set, as Flink's Collectors.toSet(): a linear scan per field is quadratic, and a script may
    // print hundreds of thousands of fields on its one line.
    std::unordered_set<std::string_view> seen;
    size_t start = 0;
    while (start <= line.size()) {
        size_t comma = line.find(',', start);
        if (comma == std::string_view::npos) comma = line.size();
        const std::string_view field = line.substr(start, comma - start);
        if (!is_java_blank(field)) {
            const std::string_view index = java_trim(field);
            if (seen.insert(index).second) indices.emplace_back(index);
        }
        start = comma + 1;
    }
    return indices;
}

}  // namespace flinkgpu
