#include "flink/memory_size.hpp"

#include <cstddef>
#include <new>

namespace flinkgpu {
namespace {

constexpr std::uint64_t kLongMax = 9223372036854775807ULL;  // Java's Long.MAX_VALUE: a size is a long

struct Unit {
    const char* label;
    std::uint64_t multiplier;
};

// MemorySize.MemoryUnit's labels, in Flink's order
const Unit kUnits[] = {
    {"b", 1ULL},        {"bytes", 1ULL},           {"k", 1ULL << 10},
    {"kb", 1ULL << 10}, {"kibibytes", 1ULL << 10}, {"m", 1ULL << 20},
    {"mb", 1ULL << 20}, {"mebibytes", 1ULL << 20}, {"g", 1ULL << 30},
    {"gb", 1ULL << 30}, {"gibibytes", 1ULL << 30}, {"t", 1ULL << 40},
    {"tb", 1ULL << 40}, {"tebibytes", 1ULL << 40},
};

const char kAccepted[] = " (Flink's MemorySize, e.g. '10 gb', '512 mb', or a number of bytes)";

// Java's String.trim: chars <= U+0020 off both ends (in UTF-8 no other char has such a byte).
std::string_view trim(std::string_view text) {
    while (!text.empty() && static_cast<unsigned char>(text.front()) <= 0x20) text.remove_prefix(1);
    while (!text.empty() && static_cast<unsigned char>(text.back()) <= 0x20) text.remove_suffix(1);
    return text;
}

// Java's toLowerCase(Locale.US) as far as it can make a unit label: ASCII, and U+212A KELVIN SIGN,
// which lower-cases to 'k' (so Flink reads "10 \u212Ab" as 10 KiB).
std::string lower_case(std::string_view text) {
    std::string lowered;
    lowered.reserve(text.size());
    for (std::size_t i = 0; i < text.size(); ++i) {
        const char c = text[i];
        if (c >= 'A' && c <= 'Z') {
            lowered += static_cast<char>(c - 'A' + 'a');
        } else if (text.compare(i, 3, "\xE2\x84\xAA") == 0) {
            lowered += 'k';
            i += 2;
        } else {
            lowered += c;
        }
    }
    return lowered;
}

std::string unit_list() {
    std::string list;
    for (const Unit& u : kUnits) {
        if (!list.empty()) list += ", ";
        list += u.label;
    }
    return list;
}

// *error = "'<text>' is not a memory size: <reason> (what is accepted)"; false, also when no memory is
// left to say it (then *error is left as it was).
bool fail(std::string_view text, const std::string& reason, std::string* error) noexcept {
    try {
        *error = "'" + std::string(text) + "' is not a memory size: " + reason + kAccepted;
    } catch (const std::bad_alloc&) {
    }
    return false;
}

}  // namespace

bool parse_flink_memory_size(std::string_view text, std::uint64_t* bytes, std::string* error) noexcept {
    try {
        const std::string_view trimmed = trim(text);
        if (trimmed.empty()) return fail(text, "argument is an empty- or whitespace-only string", error);
        std::size_t digits = 0;
        while (digits < trimmed.size() && trimmed[digits] >= '0' && trimmed[digits] <= '9') ++digits;
        if (digits == 0) {
            const bool signed_number = trimmed.size() > 1 && (trimmed[0] == '-' || trimmed[0] == '+') &&
                                       trimmed[1] >= '0' && trimmed[1] <= '9';
            return fail(text,
                        signed_number ? "text does not start with a number: a memory size has no sign"
                                      : "text does not start with a number",
                        error);
        }
        const std::string_view number = trimmed.substr(0, digits);
        // Java's Long.parseLong: beyond 2^63 - 1 is an overflow
        std::uint64_t value = 0;
        for (char c : number) {
            const unsigned digit = static_cast<unsigned>(c - '0');
            if (value > (kLongMax - digit) / 10) {
                return fail(text,
                            "numeric overflow: the number " + std::string(number) +
                                " is more than 9223372036854775807, the most a 64bit number holds",
                            error);
            }
            value = value * 10 + digit;
        }
        const std::string unit = lower_case(trim(trimmed.substr(digits)));
        std::uint64_t multiplier = 0;
        if (unit.empty()) {
            multiplier = 1;  // a bare number is bytes
        } else {
            for (const Unit& u : kUnits) {
                if (unit == u.label) {
                    multiplier = u.multiplier;
                    break;
                }
            }
        }
        if (multiplier == 0) return fail(text, "the unit '" + unit + "' is none of " + unit_list(), error);
        if (value > kLongMax / multiplier) {
            return fail(text,
                        "numeric overflow: " + std::string(number) + " " + unit +
                            " is more than 9223372036854775807 bytes, the most a 64bit number holds",
                        error);
        }
        *bytes = value * multiplier;
        return true;
    } catch (const std::bad_alloc&) {
        return false;  // no memory for the unit's lower-case copy or a reason
    }
}

std::string format_memory_size(std::uint64_t bytes) noexcept {
    struct Named {
        const char* name;
        std::uint64_t size;
    };
    // past Flink's largest unit (t) too: 2^63 - 1 bytes is "8.0 EiB", not "8388608.0 TiB"
    static const Named kNamed[] = {{"KiB", 1ULL << 10}, {"MiB", 1ULL << 20}, {"GiB", 1ULL << 30},
                                   {"TiB", 1ULL << 40}, {"PiB", 1ULL << 50}, {"EiB", 1ULL << 60}};
    constexpr int kLargest = 5;
    try {
        int unit = kLargest;
        while (unit >= 0 && bytes < kNamed[unit].size) --unit;
        if (unit < 0) return std::to_string(bytes) + (bytes == 1 ? " byte" : " bytes");
        if (bytes % kNamed[unit].size == 0) return std::to_string(bytes / kNamed[unit].size) + " " + kNamed[unit].name;
        // tenths of the unit, rounded half up; 1023.95 KiB rounds to 1024.0 KiB, which is 1.0 MiB (no
        // overflow: a remainder below 2^60 times 10 is below 2^64)
        std::uint64_t size = kNamed[unit].size;
        std::uint64_t tenths = bytes / size * 10 + (bytes % size * 10 + size / 2) / size;
        if (tenths >= 10240 && unit < kLargest) {
            size = kNamed[++unit].size;
            tenths = bytes / size * 10 + (bytes % size * 10 + size / 2) / size;
        }
        return std::to_string(tenths / 10) + "." + std::to_string(tenths % 10) + " " + kNamed[unit].name;
    } catch (const std::bad_alloc&) {
        return std::string();
    }
}

}  // namespace flinkgpu
