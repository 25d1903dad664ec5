// The order of GPU indices everywhere (coordination results, messages, the binding's sort_indices):
// numeric indices first: a GPU's "<n>" and its MIG units' "<n>:<slot>" (all ASCII digits), by the
// GPU's value (2 before 10, any length, no overflow), the GPU before its units, the units by slot value
// ("0:2" before "0:10"; docs/design.md §9.2); then the others as text (byte order, which for UTF-8 is code point
// order); equal values fall back to text
// ("02" before "2") so that the order is total.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flinkgpu {

// <0, 0 or >0 as a sorts before, with or after b.
int compare_indices(std::string_view a, std::string_view b) noexcept;

void sort_indices(std::vector<std::string>* indices) noexcept;

// The NVML number of the GPU `index` names as NVML's indices do: "3", and its MIG units' "3:<slot>",
// are GPU 3. False for any other text (another discovery's names, "03", a number past 9 digits).
bool gpu_of(std::string_view index, unsigned* gpu) noexcept;

}  // namespace flinkgpu
