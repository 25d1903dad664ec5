#include "gpu_index.hpp"

#include <algorithm>
#include <cstddef>

namespace flinkgpu {
namespace {

bool all_digits(std::string_view s) noexcept {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int sign(int v) noexcept { return (v > 0) - (v < 0); }

}  // namespace

int compare_indices(std::string_view a, std::string_view b) noexcept {
    const bool da = all_digits(a), db = all_digits(b);
    if (da != db) return da ? -1 : 1;
    if (da) {
        // By value without converting: leading zeros off, then the longer number is the larger.
        const std::string_view va = a.substr(std::min(a.find_first_not_of('0'), a.size()));
        const std::string_view vb = b.substr(std::min(b.find_first_not_of('0'), b.size()));
        if (va.size() != vb.size()) return va.size() < vb.size() ? -1 : 1;
        if (const int c = va.compare(vb); c != 0) return sign(c);
    }
    return sign(a.compare(b));
}

// std::sort with a strict weak order over std::string swaps (noexcept moves): it does not throw.
void sort_indices(std::vector<std::string>* indices) noexcept {
    std::sort(indices->begin(), indices->end(),
              [](const std::string& a, const std::string& b) { return index_less(a, b); });
}

}  // namespace flinkgpu
