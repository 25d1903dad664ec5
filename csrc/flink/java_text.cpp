#include "flink/java_text.hpp"

#include <cstddef>

namespace flinkgpu {

bool is_java_whitespace(char32_t c) noexcept {
    if (c <= 0x20) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20);
    switch (c) {
        case 0x1680:
        case 0x2028:
        case 0x2029:
        case 0x205F:
        case 0x3000: return true;
        default: return (c >= 0x2000 && c <= 0x2006) || (c >= 0x2008 && c <= 0x200A);
    }
}

namespace {

// Decodes one code point at `pos`; a malformed byte comes out as U+FFFD (not whitespace) and
// advances by one.
char32_t next_code_point(std::string_view s, std::size_t* pos) noexcept {
    const auto b0 = static_cast<unsigned char>(s[*pos]);
    const std::size_t len = b0 < 0x80 ? 1 : (b0 >> 5) == 0x6 ? 2 : (b0 >> 4) == 0xE ? 3 : (b0 >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || *pos + len > s.size()) {
        ++*pos;
        return 0xFFFD;
    }
    char32_t cp = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
    for (std::size_t i = 1; i < len; ++i) {
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

}  // namespace

// The trimmed chars are single bytes in UTF-8 and never occur inside a multi-byte sequence, so
// bytes are compared directly.
std::string_view java_trim(std::string_view s) noexcept {
    std::size_t begin = 0, end = s.size();
    while (begin < end && is_java_trimmed(static_cast<unsigned char>(s[begin]))) ++begin;
    while (end > begin && is_java_trimmed(static_cast<unsigned char>(s[end - 1]))) --end;
    return s.substr(begin, end - begin);
}

bool is_java_blank(std::string_view text) noexcept {
    std::size_t pos = 0;
    while (pos < text.size()) {
        if (!is_java_whitespace(next_code_point(text, &pos))) return false;
    }
    return true;
}

}  // namespace flinkgpu
