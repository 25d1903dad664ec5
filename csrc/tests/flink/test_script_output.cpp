// Flink's discovery-output rules (docs/design.md §3.3 steps 5-6), including the Java whitespace edges.
#include "flink/script_output.hpp"

#include "tests/check.hpp"

using flinkgpu::parse_gpu_indices;
using flinkgpu::split_output_lines;
using V = std::vector<std::string>;

TEST_CASE(output_lines_end_at_lf_cr_and_crlf_but_not_unicode_separators) {
    // Lines: \n, \r and \r\n end a line; a final terminator adds no empty line.
    CHECK_EQ(split_output_lines(""), V{});
    CHECK_EQ(split_output_lines("0,1"), V{"0,1"});
    CHECK_EQ(split_output_lines("0,1\n"), V{"0,1"});
    CHECK_EQ(split_output_lines("0,1\r\n2"), (V{"0,1", "2"}));
    CHECK_EQ(split_output_lines("a\rb\n\nc"), (V{"a", "b", "", "c"}));
    CHECK_EQ(split_output_lines("\n"), V{""});
    CHECK_EQ(split_output_lines("a\r\r\n"), (V{"a", ""}));
    // U+2028 and U+0085 do not end a line for BufferedReader (they do for Python's splitlines).
    CHECK_EQ(split_output_lines("0\xE2\x80\xA8"
                                "1\xC2\x85"
                                "2"),
             V{"0\xE2\x80\xA8"
               "1\xC2\x85"
               "2"});
    CHECK_EQ(split_output_lines("0\v1\f2"), V{"0\v1\f2"});
}

TEST_CASE(index_fields_split_at_commas_drop_empty_fields_and_repeats) {
    // Fields: the examples of docs/design.md §3.3.
    CHECK_EQ(parse_gpu_indices(" 0 , 1,,  ,2 "), (V{"0", "1", "2"}));
    CHECK_EQ(parse_gpu_indices(",0,1,"), (V{"0", "1"}));
    CHECK_EQ(parse_gpu_indices("0\t1"), V{"0\t1"});
    CHECK_EQ(parse_gpu_indices(""), V{});
    CHECK_EQ(parse_gpu_indices("1,0,1"), (V{"1", "0"}));
}

TEST_CASE(java_whitespace_only_fields_are_dropped_and_other_unicode_spaces_kept) {
    // Java whitespace-only fields are dropped: \x1c..\x1f, U+2003, U+3000, U+1680.
    CHECK_EQ(parse_gpu_indices("\x1c,0,\x1f\x1e"), V{"0"});
    CHECK_EQ(parse_gpu_indices("\xE2\x80\x83,1,\xE3\x80\x80,\xE1\x9A\x80"), V{"1"});
    // U+00A0, U+2007, U+202F are not Java whitespace: kept, and trim() does not strip them.
    CHECK_EQ(parse_gpu_indices("\xC2\xA0"), V{"\xC2\xA0"});
    CHECK_EQ(parse_gpu_indices(" \xC2\xA0"
                               "0 "),
             V{"\xC2\xA0"
               "0"});
    CHECK_EQ(parse_gpu_indices("\xE2\x80\x87,\xE2\x80\xAF"), (V{"\xE2\x80\x87", "\xE2\x80\xAF"}));
}

TEST_CASE(fields_are_trimmed_of_controls_and_malformed_utf8_is_kept_as_text) {
    // trim() strips every char <= U+0020, control chars that are not whitespace included...
    CHECK_EQ(parse_gpu_indices("\x01"
                               "0\x02"),
             V{"0"});
    // ...and nothing above it: U+2003 inside a field that is not whitespace-only stays.
    CHECK_EQ(parse_gpu_indices("\xE2\x80\x83"
                               "0"),
             V{"\xE2\x80\x83"
               "0"});
    // A field of non-whitespace controls only survives as an empty index (Flink's GPUInfo rejects it).
    CHECK_EQ(parse_gpu_indices("\x01"), V{""});
    // Malformed UTF-8 is never whitespace and never crashes.
    CHECK_EQ(parse_gpu_indices("\xE2\x80"), V{"\xE2\x80"});
    CHECK_EQ(parse_gpu_indices("\xFF,0"), (V{"\xFF", "0"}));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
