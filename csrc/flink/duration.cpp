#include "flink/duration.hpp"

#include <cstddef>

namespace flinkgpu {
namespace {

struct Unit {
    const char* label;
    double seconds;
};

const Unit kUnits[] = {
    {"d", 86400.0},      {"day", 86400.0}, {"days", 86400.0}, {"h", 3600.0},         {"hour", 3600.0},
    {"hours", 3600.0},   {"min", 60.0},    {"m", 60.0},       {"minute", 60.0},      {"minutes", 60.0},
    {"s", 1.0},          {"sec", 1.0},     {"secs", 1.0},     {"second", 1.0},       {"seconds", 1.0},
    {"ms", 1e-3},        {"milli", 1e-3},  {"millis", 1e-3},  {"millisecond", 1e-3}, {"milliseconds", 1e-3},
    {"\xC2\xB5s", 1e-6}, {"micro", 1e-6},  {"micros", 1e-6},  {"microsecond", 1e-6}, {"microseconds", 1e-6},
    {"ns", 1e-9},        {"nano", 1e-9},   {"nanos", 1e-9},   {"nanosecond", 1e-9},  {"nanoseconds", 1e-9},
};

// Java's String.trim: chars <= U+0020 off both ends.
std::string_view trim(std::string_view text) {
    while (!text.empty() && static_cast<unsigned char>(text.front()) <= 0x20) text.remove_prefix(1);
    while (!text.empty() && static_cast<unsigned char>(text.back()) <= 0x20) text.remove_suffix(1);
    return text;
}

}  // namespace

bool parse_flink_duration(std::string_view text, double* seconds, std::string* error) {
    const std::string_view trimmed = trim(text);
    if (trimmed.empty()) {
        *error = "argument is an empty- or whitespace-only string";
        return false;
    }
    std::size_t digits = 0;
    while (digits < trimmed.size() && trimmed[digits] >= '0' && trimmed[digits] <= '9') ++digits;
    if (digits == 0) {
        *error = "text does not start with a number";
        return false;
    }
    const std::string_view number = trimmed.substr(0, digits);
    // Java's Long.parseLong: beyond 2^63 - 1 is an overflow
    unsigned long long value = 0;
    for (char c : number) {
        const unsigned digit = static_cast<unsigned>(c - '0');
        if (value > (9223372036854775807ULL - digit) / 10) {
            *error =
                "The value '" + std::string(number) + "' cannot be re represented as 64bit number (numeric overflow).";
            return false;
        }
        value = value * 10 + digit;
    }
    std::string unit(trim(trimmed.substr(digits)));
    for (char& c : unit)
        if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
    if (unit.empty()) {
        *seconds = static_cast<double>(value) / 1000.0;  // a bare number is milliseconds
        return true;
    }
    for (const Unit& u : kUnits) {
        if (unit == u.label) {
            *seconds = static_cast<double>(value) * u.seconds;
            return true;
        }
    }
    *error = "Time interval unit label '" + unit +
             "' does not match any of the recognized units: DAYS: (d | day | days), HOURS: (h | hour | hours), "
             "MINUTES: (min | m | minute | minutes), SECONDS: (s | sec | secs | second | seconds), MILLISECONDS: "
             "(ms | milli | millis | millisecond | milliseconds), MICROSECONDS: (\xC2\xB5s | micro | micros | "
             "microsecond | microseconds), NANOSECONDS: (ns | nano | nanos | nanosecond | nanoseconds)";
    return false;
}

}  // namespace flinkgpu
