// Flink's memory size grammar (csrc/flink/memory_size.*), as MemorySize.parseBytes reads it, and the
// short form of a size for messages.
#include "flink/memory_size.hpp"

#include <cstdint>
#include <string>

#include "tests/check.hpp"

using flinkgpu::format_memory_size;
using flinkgpu::parse_flink_memory_size;

namespace {
constexpr std::uint64_t kKiB = 1024, kMiB = kKiB * 1024, kGiB = kMiB * 1024, kTiB = kGiB * 1024;

// The bytes `text` names; UINT64_MAX (no size parses to it) when it names none.
std::uint64_t bytes_of(const std::string& text) {
    std::uint64_t bytes = 12345;
    std::string error;
    if (!parse_flink_memory_size(text, &bytes, &error)) return UINT64_MAX;
    return error.empty() ? bytes : UINT64_MAX - 1;  // a success leaves *error alone
}
std::string error_of(const std::string& text) {
    std::uint64_t bytes = 12345;
    std::string error;
    if (parse_flink_memory_size(text, &bytes, &error)) return std::string();
    return bytes == 12345 ? error : std::string("*bytes written on a failure");
}
bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

const char kUnitList[] = "b, bytes, k, kb, kibibytes, m, mb, mebibytes, g, gb, gibibytes, t, tb, tebibytes";
const char kAccepted[] = " (Flink's MemorySize, e.g. '10 gb', '512 mb', or a number of bytes)";
}  // namespace

TEST_CASE(every_unit_and_its_long_name_is_a_power_of_1024) {
    CHECK_EQ(bytes_of("7 b"), 7u);
    CHECK_EQ(bytes_of("7 bytes"), 7u);
    CHECK_EQ(bytes_of("3 k"), 3 * kKiB);
    CHECK_EQ(bytes_of("3 kb"), 3 * kKiB);
    CHECK_EQ(bytes_of("3 kibibytes"), 3 * kKiB);
    CHECK_EQ(bytes_of("512 m"), 512 * kMiB);
    CHECK_EQ(bytes_of("512 mb"), 512 * kMiB);
    CHECK_EQ(bytes_of("512 mebibytes"), 512 * kMiB);
    CHECK_EQ(bytes_of("10 g"), 10 * kGiB);
    CHECK_EQ(bytes_of("10 gb"), 10 * kGiB);
    CHECK_EQ(bytes_of("10 gibibytes"), 10 * kGiB);
    CHECK_EQ(bytes_of("2 t"), 2 * kTiB);
    CHECK_EQ(bytes_of("2 tb"), 2 * kTiB);
    CHECK_EQ(bytes_of("2 tebibytes"), 2 * kTiB);
}

TEST_CASE(case_and_blanks_are_ignored_as_flink_ignores_them) {
    CHECK_EQ(bytes_of("10 GB"), 10 * kGiB);
    CHECK_EQ(bytes_of(" 512mb "), 512 * kMiB);
    CHECK_EQ(bytes_of("1 kibibytes"), kKiB);
    CHECK_EQ(bytes_of("1 KiBiBytes"), kKiB);
    CHECK_EQ(bytes_of("\t4\n  Mb\r"), 4 * kMiB);
    CHECK_EQ(bytes_of(std::string("\x01"
                                  "8 g\x1f",
                                  5)),
             8 * kGiB);  // Java's trim: every char <= U+0020
    CHECK_EQ(bytes_of("007 kb"), 7 * kKiB);
    CHECK_EQ(bytes_of("5 \xE2\x84\xAA"
                      "B"),
             5 * kKiB);  // U+212A KELVIN SIGN: Java lower-cases it to 'k'
}

TEST_CASE(a_bare_number_is_bytes_and_zero_is_a_size) {
    CHECK_EQ(bytes_of("1048576"), kMiB);
    CHECK_EQ(bytes_of("0"), 0u);
    CHECK_EQ(bytes_of("0 b"), 0u);
    CHECK_EQ(bytes_of("0 tb"), 0u);
}

TEST_CASE(the_largest_size_is_a_java_long) {
    CHECK_EQ(bytes_of("9223372036854775807"), 9223372036854775807ULL);
    CHECK_EQ(bytes_of("9223372036854775807 b"), 9223372036854775807ULL);
    CHECK_EQ(bytes_of("8388607 tb"), 8388607 * kTiB);
    CHECK_EQ(bytes_of("8589934591 gb"), 8589934591 * kGiB);
}

TEST_CASE(blank_text_is_no_size) {
    CHECK_EQ(error_of(""),
             std::string("'' is not a memory size: argument is an empty- or whitespace-only string") + kAccepted);
    CHECK_EQ(error_of(" \t "),
             std::string("' \t ' is not a memory size: argument is an empty- or whitespace-only string") + kAccepted);
}

TEST_CASE(text_without_a_leading_number_is_no_size) {
    CHECK_EQ(error_of("gb"), std::string("'gb' is not a memory size: text does not start with a number") + kAccepted);
    CHECK_EQ(error_of("-1"),
             std::string("'-1' is not a memory size: text does not start with a number: a memory size has no sign") +
                 kAccepted);
    CHECK(contains(error_of("+1 kb"), "a memory size has no sign"));
    CHECK_EQ(error_of(".5 gb"),
             std::string("'.5 gb' is not a memory size: text does not start with a number") + kAccepted);
}

TEST_CASE(an_unknown_unit_is_named_with_the_units_flink_knows) {
    CHECK_EQ(error_of("10 gigs"),
             std::string("'10 gigs' is not a memory size: the unit 'gigs' is none of ") + kUnitList + kAccepted);
    CHECK_EQ(error_of("1.5 gb"),
             std::string("'1.5 gb' is not a memory size: the unit '.5 gb' is none of ") + kUnitList + kAccepted);
    CHECK(contains(error_of("10 GiB"), "the unit 'gib' is none of"));  // the unit as Flink compares it
    CHECK(contains(error_of("10 KB b"), "the unit 'kb b' is none of"));
    CHECK(contains(error_of("1 pb"), "'1 pb' is not a memory size: the unit 'pb'"));
}

TEST_CASE(a_number_beyond_a_java_long_overflows) {
    CHECK_EQ(error_of("9223372036854775808"),
             std::string("'9223372036854775808' is not a memory size: numeric overflow: the number "
                         "9223372036854775808 is more than 9223372036854775807, the most a 64bit number holds") +
                 kAccepted);
    CHECK(contains(error_of("99999999999999999999999 b"), "numeric overflow"));
}

TEST_CASE(a_size_beyond_a_java_long_overflows) {
    CHECK_EQ(error_of("8589934592 gb"),
             std::string("'8589934592 gb' is not a memory size: numeric overflow: 8589934592 gb is more than "
                         "9223372036854775807 bytes, the most a 64bit number holds") +
                 kAccepted);
    CHECK(contains(error_of("8388608 TB"), "numeric overflow: 8388608 tb is more than"));
    CHECK(contains(error_of("9007199254740992 k"), "numeric overflow"));
}

TEST_CASE(a_whole_number_of_a_unit_is_formatted_exactly) {
    CHECK_EQ(format_memory_size(0), std::string("0 bytes"));
    CHECK_EQ(format_memory_size(1), std::string("1 byte"));
    CHECK_EQ(format_memory_size(17), std::string("17 bytes"));
    CHECK_EQ(format_memory_size(1023), std::string("1023 bytes"));
    CHECK_EQ(format_memory_size(3 * kKiB), std::string("3 KiB"));
    CHECK_EQ(format_memory_size(512 * kMiB), std::string("512 MiB"));
    CHECK_EQ(format_memory_size(10 * kGiB), std::string("10 GiB"));
    CHECK_EQ(format_memory_size(2 * kTiB), std::string("2 TiB"));
    CHECK_EQ(format_memory_size(1023 * kTiB), std::string("1023 TiB"));
    CHECK_EQ(format_memory_size(4096 * kTiB), std::string("4 PiB"));
    CHECK_EQ(format_memory_size(8 * 1024 * 1024 * kTiB), std::string("8 EiB"));
}

TEST_CASE(other_sizes_get_one_decimal_of_their_largest_unit) {
    CHECK_EQ(format_memory_size(10 * kGiB + kGiB / 2), std::string("10.5 GiB"));
    CHECK_EQ(format_memory_size(1536 * kMiB), std::string("1.5 GiB"));
    CHECK_EQ(format_memory_size(1025), std::string("1.0 KiB"));
    CHECK_EQ(format_memory_size(kMiB + 7 * kMiB / 10 + 1), std::string("1.7 MiB"));
    CHECK_EQ(format_memory_size(kGiB - 1), std::string("1.0 GiB"));  // rounded up: never "1024.0 MiB"
    CHECK_EQ(format_memory_size(kMiB - kKiB / 20), std::string("1.0 MiB"));
    CHECK_EQ(format_memory_size(kMiB - kKiB / 10 - 1), std::string("1023.9 KiB"));
    // the largest request (a Java long) and the largest size: in EiB, not millions of TiB
    CHECK_EQ(format_memory_size(9223372036854775807ULL), std::string("8.0 EiB"));
    CHECK_EQ(format_memory_size(UINT64_MAX), std::string("16.0 EiB"));
    CHECK_EQ(format_memory_size(1024 * kTiB - 1), std::string("1.0 PiB"));
    CHECK_EQ(format_memory_size(1536 * kTiB), std::string("1.5 PiB"));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
