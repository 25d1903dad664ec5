// Flink's duration grammar (csrc/flink/duration.*), as TimeUtils.parseDuration reads it.
#include "flink/duration.hpp"

#include <string>

#include "tests/check.hpp"

using flinkgpu::parse_flink_duration;

namespace {
double seconds_of(const char* text) {
    double s = -1;
    std::string error;
    return parse_flink_duration(text, &s, &error) ? s : -1;
}
std::string error_of(const char* text) {
    double s = 0;
    std::string error;
    return parse_flink_duration(text, &s, &error) ? std::string() : error;
}
}  // namespace

TEST_CASE(durations_read_with_flinks_units_and_blanks) {
    CHECK_EQ(seconds_of("5 s"), 5.0);
    CHECK_EQ(seconds_of("500ms"), 0.5);
    CHECK_EQ(seconds_of(" 2 MIN "), 120.0);
    CHECK_EQ(seconds_of("1 h"), 3600.0);
    CHECK_EQ(seconds_of("3 seconds"), 3.0);
    CHECK_EQ(seconds_of("7 \xC2\xB5s"), 7e-6);
}

TEST_CASE(a_bare_number_is_milliseconds) { CHECK_EQ(seconds_of("250"), 0.25); }

TEST_CASE(bad_durations_say_why_as_flink_does) {
    CHECK_EQ(error_of("  "), std::string("argument is an empty- or whitespace-only string"));
    CHECK_EQ(error_of("s"), std::string("text does not start with a number"));
    CHECK(error_of("5 weeks").find("Time interval unit label 'weeks' does not match") == 0);
    CHECK(error_of("99999999999999999999 s").find("numeric overflow") != std::string::npos);
    CHECK(error_of("-1 s") == "text does not start with a number");
}

int main(int argc, char** argv) { return check::run(argc, argv); }
