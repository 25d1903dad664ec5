// Parsing of a discovery script's output exactly as Flink's GPUDriver does it (docs/design.md §3.3
// steps 5-6). Java semantics, not C or Python ones: lines end at \n, \r or \r\n; fields are
// filtered and trimmed by the rules of flink/java_text.hpp. Strings are UTF-8.
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

}  // namespace flinkgpu
