#include "base/gpu_index.hpp"

#include <algorithm>
#include <cstddef>

namespace flinkgpu {
namespace {

bool all_digits(std::string_view s) noexcept {
    return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; });
}

int sign(int v) noexcept { return (v > 0) - (v < 0); }

// Two all-digit strings by value without converting: leading zeros off, then the longer is larger.
int compare_numbers(std::string_view a, std::string_view b) noexcept {
    const std::string_view va = a.substr(std::min(a.find_first_not_of('0'), a.size()));
    const std::string_view vb = b.substr(std::min(b.find_first_not_of('0'), b.size()));
    if (va.size() != vb.size()) return va.size() < vb.size() ? -1 : 1;
    return sign(va.compare(vb));
}

// "<gpu>" or "<gpu>:<mig slot>", both all digits; `slot` empty for a whole GPU.
bool numeric_index(std::string_view s, std::string_view* gpu, std::string_view* slot) noexcept {
    const std::size_t colon = s.find(':');
    *gpu = s.substr(0, colon);
    *slot = colon == std::string_view::npos ? std::string_view() : s.substr(colon + 1);
    return all_digits(*gpu) && (colon == std::string_view::npos || all_digits(*slot));
}

}  // namespace

int compare_indices(std::string_view a, std::string_view b) noexcept {
    std::string_view ga, sa, gb, sb;
    const bool da = numeric_index(a, &ga, &sa), db = numeric_index(b, &gb, &sb);
    if (da != db) return da ? -1 : 1;
    if (da) {
        if (const int c = compare_numbers(ga, gb); c != 0) return c;
        if (sa.empty() != sb.empty()) return sa.empty() ? -1 : 1;  // the GPU before its units
        if (const int c = compare_numbers(sa, sb); c != 0) return c;
    }
    return sign(a.compare(b));
}

// std::sort with a strict weak order over std::string swaps (noexcept moves): it does not throw.
void sort_indices(std::vector<std::string>* indices) noexcept {
    std::sort(indices->begin(), indices->end(),
              [](const std::string& a, const std::string& b) { return compare_indices(a, b) < 0; });
}

bool gpu_of(std::string_view index, unsigned* gpu) noexcept {
    const std::string_view number = index.substr(0, index.find(':'));
    if (!all_digits(number) || number.size() > 9 || (number.size() > 1 && number[0] == '0')) return false;
    if (number.size() < index.size() && !all_digits(index.substr(number.size() + 1))) return false;
    unsigned n = 0;
    for (char c : number) n = n * 10 + static_cast<unsigned>(c - '0');
    *gpu = n;
    return true;
}

}  // namespace flinkgpu
