// The set of GPUs a claim or bind of two or more takes (docs/design.md §9.6): among the candidates of the
// best class it can fill, the set whose members are joined best. Pure: no NVML, no file.
#pragma once

#include "topology/links.hpp"

#include <cstddef>
#include <string>
#include <vector>

namespace flinkgpu {
namespace topology {

// One GPU a choice may take, with its class (nvml/choice.hpp's rank: lower first).
struct Candidate {
    std::string index;
    int rank = 0;
};

// Of `ordered`, the `need` to take: their positions in `ordered`, ascending. `ordered` is the caller's
// preference without topology (rank first, ranks never decreasing; within a rank least bound, free before
// reclaimable, lowest index first) and `fixed` what the owner holds already, which counts as a member.
// Classes are never traded for topology: every class before the last one needed is taken whole, and only
// within that last class is there a choice. There the set taken is, in order: the most NVLinks summed over
// its pairs (members included), then the best worst PCIe level of a pair, then the best sum of levels,
// then the set that leaves the best same-size set among the rest of that class (an intact NVLink pair or
// group for the next claimer), then `ordered`'s preference (so that without links the answer is the first
// `need`). Every subset is weighed while there are at most kExhaustiveSets of them (the rest-of-class
// look-ahead while that search weighs at most kLookaheadSets sets); beyond, members are added one by one,
// each the best joined to those before. Where a member or a candidate of that class is a MIG unit ("3:1"),
// the first `need` (MIG has no peer-to-peer). Need 0 or `ordered` empty: none.
std::vector<std::size_t> choose_set(const Links& links, const std::vector<std::string>& fixed,
                                    const std::vector<Candidate>& ordered, std::size_t need);

// <0, 0 or >0 as the set `a` (indices) is joined better than, as well as, or worse than `b`, by choose_set's
// own measure (NVLinks summed over pairs, then the worst PCIe level, then their sum).
int compare_joined(const Links& links, const std::vector<std::string>& a, const std::vector<std::string>& b);

inline constexpr std::size_t kExhaustiveSets = 20000;
inline constexpr std::size_t kLookaheadSets = 300000;

}  // namespace topology
}  // namespace flinkgpu
