// libFuzzer target for the discovery-output parser (csrc/flink/script_output.*, docs/design.md §3.3 steps 5-6).
// Besides "no crash, no hang, no sanitizer report", every input is checked against the contract:
//   * lines never contain \n or \r, appear in order in the input, and are separated by exactly one
//     terminator (\n, \r or \r\n); only the last line may lack one;
//   * indices contain no ',', start and end with a byte > U+0020, are unique, and each is a substring
//     of the line. An index may be empty: a field of controls that are not Java whitespace (U+0001)
//     passes Flink's isNullOrWhitespaceOnly filter and trim() empties it; GPUInfo then rejects it, in
//     Java and here;
//   * a field that parses to nothing consists of Java whitespace only, so a line of digits and commas
//     keeps every digit run.
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <string_view>

#include "flink/script_output.hpp"

namespace {

[[noreturn]] void fail(const char* what) {
    std::fprintf(stderr, "contract violated: %s\n", what);
    std::abort();
}

void check_lines(std::string_view text) {
    const auto lines = flinkgpu::split_output_lines(text);
    std::size_t pos = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const std::string& line = lines[i];
        if (line.find_first_of("\r\n") != std::string::npos) fail("a line contains a terminator");
        if (text.compare(pos, line.size(), line) != 0) fail("lines are not the input in order");
        pos += line.size();
        if (pos == text.size()) {
            if (i + 1 != lines.size()) fail("lines after the end of the input");
            return;
        }
        if (text[pos] == '\r' && pos + 1 < text.size() && text[pos + 1] == '\n') {
            pos += 2;
        } else if (text[pos] == '\r' || text[pos] == '\n') {
            pos += 1;
        } else {
            fail("a line does not end at a terminator");
        }
    }
    // Everything consumed: the input was empty or ended with a terminator (no empty last line).
    if (pos != text.size()) fail("input left over after the last line");
}

void check_indices(std::string_view line) {
    const auto indices = flinkgpu::parse_gpu_indices(line);
    std::set<std::string> seen;
    for (const std::string& index : indices) {
        if (!seen.insert(index).second) fail("a duplicate index");
        if (index.empty()) continue;
        if (index.find(',') != std::string::npos) fail("an index contains ','");
        if (static_cast<unsigned char>(index.front()) <= 0x20 || static_cast<unsigned char>(index.back()) <= 0x20) {
            fail("an index is not trimmed");
        }
        if (line.find(index) == std::string_view::npos) fail("an index is not part of the line");
    }
    // Digits are never whitespace: every field holding a digit yields an index.
    std::size_t start = 0;
    while (start <= line.size()) {
        std::size_t comma = line.find(',', start);
        if (comma == std::string_view::npos) comma = line.size();
        const std::string_view field = line.substr(start, comma - start);
        if (field.find_first_of("0123456789") != std::string_view::npos) {
            bool found = false;
            for (const std::string& index : indices) {
                const bool has_digit = index.find_first_of("0123456789") != std::string::npos;
                if (has_digit && field.find(index) != std::string_view::npos) {
                    found = true;
                    break;
                }
            }
            if (!found) fail("a field with a digit was dropped");
        }
        start = comma + 1;
    }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text(reinterpret_cast<const char*>(data), size);
    check_lines(text);
    check_indices(text);
    const auto lines = flinkgpu::split_output_lines(text);
    if (!lines.empty()) check_indices(lines.front());
    return 0;
}
