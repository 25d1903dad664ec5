// Java's Character.isWhitespace, String.trim and StringUtils.isNullOrWhitespaceOnly on UTF-8.
#include "flink/java_text.hpp"

#include <string>

#include "tests/check.hpp"

using flinkgpu::is_java_blank;
using flinkgpu::is_java_whitespace;
using flinkgpu::java_trim;

TEST_CASE(java_whitespace_is_the_separators_and_controls_but_not_no_break_spaces) {
    // Whitespace: the ASCII controls \t..\r and U+001C..U+001F, space, the Unicode separators...
    for (char32_t c : {U'\t', U'\n', U'\v', U'\f', U'\r', U'\x1c', U'\x1f', U' ', U'\u1680', U'\u2000', U'\u2006',
                       U'\u2008', U'\u200A', U'\u2028', U'\u2029', U'\u205F', U'\u3000'}) {
        CHECK(is_java_whitespace(c));
    }
    // ...but not the no-break spaces, NEL, zero-width space, other controls or letters.
    for (char32_t c : {U'\0', U'\x01', U'\x08', U'\x0e', U'\x1b', U'\x85', U'\xa0', U'\u2007', U'\u200B', U'\u202F',
                       U'a', U'0', U'\uFFFD', U'\U0001F4A5'}) {
        CHECK(!is_java_whitespace(c));
    }
}

TEST_CASE(java_trim_strips_every_char_up_to_space_and_nothing_above) {
    // trim(): every char <= U+0020, controls that are not whitespace included, and nothing above.
    CHECK_EQ(std::string(java_trim("  0 ")), std::string("0"));
    CHECK_EQ(std::string(java_trim("\x01"
                                   "a b\x02")),
             std::string("a b"));
    CHECK_EQ(std::string(java_trim(std::string_view("\0x\0", 3))), std::string("x"));
    CHECK_EQ(std::string(java_trim("\xE2\x80\x83"
                                   "0")),
             std::string("\xE2\x80\x83"
                         "0"));
    CHECK_EQ(std::string(java_trim("\xC2\xA0 ")), std::string("\xC2\xA0"));
    CHECK_EQ(std::string(java_trim("   ")), std::string(""));
    CHECK_EQ(std::string(java_trim("")), std::string(""));
}

TEST_CASE(blank_means_empty_or_java_whitespace_only_and_malformed_utf8_is_not_blank) {
    // isNullOrWhitespaceOnly: empty or whitespace only, decoded as UTF-8.
    CHECK(is_java_blank(""));
    CHECK(is_java_blank(" \t\x1c"));
    CHECK(is_java_blank("\xE2\x80\x83\xE3\x80\x80\xE1\x9A\x80"));
    CHECK(!is_java_blank("\xC2\xA0"));
    CHECK(!is_java_blank("\x01"));
    CHECK(!is_java_blank(" 0 "));
    // Malformed UTF-8 is never whitespace: a truncated U+2003, a stray continuation byte.
    CHECK(!is_java_blank("\xE2\x80"));
    CHECK(!is_java_blank("\x80"));
    CHECK(!is_java_blank(" \xFF"));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
