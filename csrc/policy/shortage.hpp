// The one sentence that says why too few GPUs were usable, for a discovery (the in-process driver,
// flink-gpu-discovery, flink-gpu claim) and a bind alike (docs/design.md §9.1).
#pragma once

#include "coordination/claims.hpp"

#include <cstddef>
#include <string>
#include <string_view>

namespace flinkgpu {
namespace policy {

// "<amount> GPU(s) requested, but <usable> of the <total> <counted> is/are usable[: GPU <index> is left
// out (<why>); ...]." `counted` names what `total` counts ("devices NVML lists", "given"); `left_out`:
// (index, why), in index order.
// `amount`: decimal digits, as requested (it may be beyond what a size_t holds).
std::string shortage_sentence(std::string_view amount, std::size_t usable, std::size_t total, std::string_view counted,
                              const coordination::LeftOut& left_out);

// "GPU <index> left out: <why>": the one sentence for a GPU a discovery or a bind does not hand out.
std::string left_out_text(const std::string& index, const std::string& why);

}  // namespace policy
}  // namespace flinkgpu
