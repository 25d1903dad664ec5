// Parsing of a discovery script's output exactly as Flink's GPUDriver does it (SPEC 3.3 steps
// 5-6). Java semantics, not C or Python ones: lines end at \n, \r or \r\n; "whitespace only" is
// java.lang.Character.isWhitespace; trim() strips every char <= U+0020 and nothing else.
// Strings are UTF-8.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flinkgpu {

// java.io.BufferedReader#lines(): no empty last line for a trailing terminator, "" -> {}.
std::vector<std::string> split_output_lines(std::string_view text);

// One output line -> GPU indices: split on ',', drop Java-whitespace-only fields, trim the rest.
// Duplicates are dropped (Flink collects into a set); order is first appearance.
std::vector<std::string> parse_gpu_indices(std::string_view line);

// java.lang.Character.isWhitespace for a code point.
bool is_java_whitespace(char32_t c) noexcept;

}  // namespace flinkgpu
