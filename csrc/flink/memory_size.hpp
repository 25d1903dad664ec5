// Flink's memory size grammar (MemorySize.parseBytes): "10 gb", "512mb", "1 kibibytes", a bare number is
// bytes; units b, k, m, g, t, their "kb"-style forms and long names (bytes, kibibytes, ... tebibytes), all
// powers of 1024, case ignored. One implementation for every memory size option, with one short form
// of a size for messages.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace flinkgpu {

// The number of bytes `text` names (0 included: callers that need a positive size say so); false with
// the reason in *error when it names none: the text as given, Flink's reason, what is accepted.
bool parse_flink_memory_size(std::string_view text, std::uint64_t* bytes, std::string* error) noexcept;

// A short human form of `bytes` for messages: "10 GiB", "512 MiB", "3 KiB", "17 bytes" when it is a
// whole number of its largest unit, else one decimal of it ("10.5 GiB", rounded). Units up to EiB; below
// 1 PiB (Flink's units, up to t) a whole number reads back with parse_flink_memory_size. Empty only when
// no memory is left to build it.
std::string format_memory_size(std::uint64_t bytes) noexcept;

}  // namespace flinkgpu
