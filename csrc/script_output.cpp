#include "script_output.hpp"

#include <unordered_set>

namespace flinkgpu {

bool is_java_whitespace(char32_t c) noexcept {
    // Unicode space, line and paragraph separators except the no-break ones, plus the ASCII
    // controls \t \n \v \f \r and the information separators U+001C..U+001F.
    if (c <= 0x20) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    switch (c) {
        case 0x1680: case 0x2028: case 0x2029: case 0x205F: case 0x3000:
            return true;
        default:
            return (c >= 0x2000 && c <= 0x2006) || (c >= 0x2008 && c <= 0x200A);
    }
}

namespace {

// Decodes one code point at `pos`; malformed bytes come out as one non-whitespace unit each.
char32_t next_code_point(std::string_view s, size_t* pos) {
    const auto b0 = static_cast<unsigned char>(s[*pos]);
    size_t len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || *pos + len > s.size()) {
        ++*pos;
        return 0xFFFD;
    }
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (size_t i = 1; i < len; ++i) {
        const auto b = static_cast<unsigned char>(s[*pos + i]);
        if ((b >> 6) != 0x2) {
            ++*pos;
            return 0xFFFD;
        }
        cp = (cp << 6) | (b & 0x3F);
    }
    *pos += len;
    return cp;
}

bool is_whitespace_only(std::string_view field) {
    size_t pos = 0;
    while (pos < field.size()) {
        if (!is_java_whitespace(next_code_point(field, &pos))) return false;
    }
    return true;
}

// String#trim(): every char <= U+0020 at either end. Such chars are single bytes in UTF-8 and
// never occur inside a multi-byte sequence, so bytes can be compared directly.
std::string_view java_trim(std::string_view s) {
    size_t begin = 0, end = s.size();
    while (begin < end && static_cast<unsigned char>(s[begin]) <= 0x20) ++begin;
    while (end > begin && static_cast<unsigned char>(s[end - 1]) <= 0x20) --end;
    return s.substr(begin, end - begin);
}

}  // namespace

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
        if (!is_whitespace_only(field)) {
            const std::string_view index = java_trim(field);
            if (seen.insert(index).second) indices.emplace_back(index);
        }
        start = comma + 1;
    }
    return indices;
}

}  // namespace flinkgpu
