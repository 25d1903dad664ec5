// The order of GPU indices everywhere (coordination results, messages, the binding's sort_indices):
// all-ASCII-digit indices first, by numeric value (2 before 10, any length, no overflow), then the
// others as text (byte order, which for UTF-8 is code point order); equal values fall back to text
// ("02" before "2") so that the order is total.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flinkgpu {

// <0, 0 or >0 as a sorts before, with or after b.
int compare_indices(std::string_view a, std::string_view b) noexcept;

inline bool index_less(std::string_view a, std::string_view b) noexcept { return compare_indices(a, b) < 0; }

void sort_indices(std::vector<std::string>* indices) noexcept;

}  // namespace flinkgpu
