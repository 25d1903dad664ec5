// Java's string rules that Flink's behaviour depends on: Character.isWhitespace, String.trim and
// StringUtils.isNullOrWhitespaceOnly. Strings are UTF-8; malformed bytes count as non-whitespace
// characters.
#pragma once

#include <string_view>

namespace flinkgpu {

// java.lang.Character.isWhitespace for a code point: Unicode space, line and paragraph separators
// except the no-break ones, plus \t \n \v \f \r and the information separators U+001C..U+001F.
bool is_java_whitespace(char32_t c) noexcept;

// What String#trim() strips at either end: every char <= U+0020, and nothing else.
constexpr bool is_java_trimmed(char32_t c) noexcept { return c <= 0x20; }

// String#trim().
std::string_view java_trim(std::string_view text) noexcept;

// StringUtils.isNullOrWhitespaceOnly: empty, or Java whitespace only.
bool is_java_blank(std::string_view text) noexcept;

}  // namespace flinkgpu
