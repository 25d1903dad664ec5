#include "topology/sets.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>

namespace flinkgpu {
namespace topology {
namespace {

// How well a set is joined; better() orders them.
struct Score {
    std::uint64_t nvlinks = 0;
    int worst = 0;  // the worst PCIe level of a pair (Pcie's value)
    std::uint64_t pcie_sum = 0;
    void add(const Link& link) {
        nvlinks += link.nvlinks;
        worst = std::max(worst, static_cast<int>(link.pcie));
        pcie_sum += static_cast<std::uint64_t>(link.pcie);
    }
    void add(const Score& other) {
        nvlinks += other.nvlinks;
        worst = std::max(worst, other.worst);
        pcie_sum += other.pcie_sum;
    }
};

// <0: a is joined better than b; 0: as well.
int compare(const Score& a, const Score& b) {
    if (a.nvlinks != b.nvlinks) return a.nvlinks > b.nvlinks ? -1 : 1;
    if (a.worst != b.worst) return a.worst < b.worst ? -1 : 1;
    if (a.pcie_sum != b.pcie_sum) return a.pcie_sum < b.pcie_sum ? -1 : 1;
    return 0;
}

// n choose k, saturating at `cap` + 1.
std::size_t subsets(std::size_t n, std::size_t k, std::size_t cap) {
    if (k > n) return 0;
    k = std::min(k, n - k);
    unsigned long long c = 1;
    for (std::size_t i = 1; i <= k; ++i) {
        c = c * (n - k + i) / i;  // exact: a product of i consecutive integers is divisible by i!
        if (c > cap) return cap + 1;
    }
    return static_cast<std::size_t>(c);
}

// Steps `pick` (ascending positions below n) to the next subset of its size; false after the last.
bool next_subset(std::vector<std::size_t>* pick, std::size_t n) {
    const std::size_t k = pick->size();
    for (std::size_t i = k; i-- > 0;) {
        if ((*pick)[i] < n - k + i) {
            ++(*pick)[i];
            for (std::size_t j = i + 1; j < k; ++j) (*pick)[j] = (*pick)[j - 1] + 1;
            return true;
        }
    }
    return false;
}

// The choice within the one class that decides: `group` (positions into the pair matrix), `k` of them.
class Search {
public:
    Search(std::vector<std::vector<Link>> pair, std::vector<Score> to_members, Score members)
        : pair_(std::move(pair)), to_members_(std::move(to_members)), members_(members) {}

    Score score(const std::vector<std::size_t>& pick, bool with_members) const {
        Score s = with_members ? members_ : Score();
        for (std::size_t i = 0; i < pick.size(); ++i) {
            if (with_members) s.add(to_members_[pick[i]]);
            for (std::size_t j = i + 1; j < pick.size(); ++j) s.add(pair_[pick[i]][pick[j]]);
        }
        return s;
    }

    // The best set of `size` among `pool` (positions), on its own: what a next claimer could get.
    Score best_among(const std::vector<std::size_t>& pool, std::size_t size) const {
        std::vector<std::size_t> at(size);
        for (std::size_t i = 0; i < size; ++i) at[i] = i;
        std::vector<std::size_t> pick(size);
        bool first = true;
        Score best;
        do {
            for (std::size_t i = 0; i < size; ++i) pick[i] = pool[at[i]];
            const Score s = score(pick, false);
            if (first || compare(s, best) < 0) best = s;
            first = false;
        } while (next_subset(&at, pool.size()));
        return best;
    }

    std::vector<std::size_t> exhaustive(std::size_t n, std::size_t k, std::size_t next_size, bool look_ahead) const {
        std::vector<std::size_t> pick(k), best;
        for (std::size_t i = 0; i < k; ++i) pick[i] = i;
        Score best_score, best_rest;
        do {
            const Score s = score(pick, true);
            int order = best.empty() ? -1 : compare(s, best_score);
            Score rest;
            if (order <= 0 && look_ahead) {
                std::vector<std::size_t> pool;
                for (std::size_t i = 0, p = 0; i < n; ++i) {
                    if (p < k && pick[p] == i) ++p;
                    else pool.push_back(i);
                }
                rest = best_among(pool, next_size);
                if (order == 0) order = compare(rest, best_rest);
            }
            // ties keep the earlier set: subsets come in the caller's order of preference
            if (order < 0) {
                best = pick;
                best_score = s;
                best_rest = rest;
            }
        } while (next_subset(&pick, n));
        return best;
    }

    // One by one: each the best joined to the members and those taken before it (ties: the earliest).
    std::vector<std::size_t> greedy(std::size_t n, std::size_t k) const {
        std::vector<std::size_t> pick;
        std::vector<bool> taken(n, false);
        while (pick.size() < k) {
            std::size_t best = n;
            Score best_score;
            for (std::size_t i = 0; i < n; ++i) {
                if (taken[i]) continue;
                pick.push_back(i);
                const Score s = score(pick, true);
                pick.pop_back();
                if (best == n || compare(s, best_score) < 0) {
                    best = i;
                    best_score = s;
                }
            }
            taken[best] = true;
            pick.push_back(best);
        }
        std::sort(pick.begin(), pick.end());
        return pick;
    }

private:
    std::vector<std::vector<Link>> pair_;
    std::vector<Score> to_members_;
    Score members_;
};

// How well `indices` are joined among themselves.
Score score_of(const Links& links, const std::vector<std::string>& indices) {
    Score s;
    for (std::size_t i = 0; i < indices.size(); ++i)
        for (std::size_t j = i + 1; j < indices.size(); ++j) s.add(links.between(indices[i], indices[j]));
    return s;
}

}  // namespace

int compare_joined(const Links& links, const std::vector<std::string>& a, const std::vector<std::string>& b) {
    return compare(score_of(links, a), score_of(links, b));
}

std::vector<std::size_t> choose_set(const Links& links, const std::vector<std::string>& fixed,
                                    const std::vector<Candidate>& ordered, std::size_t need) {
    std::vector<std::size_t> take;
    need = std::min(need, ordered.size());
    // Whole classes first: only the last class needed has a choice.
    std::size_t start = 0;
    while (start < ordered.size() && take.size() < need) {
        std::size_t end = start;
        while (end < ordered.size() && ordered[end].rank == ordered[start].rank) ++end;
        if (end - start > need - take.size()) break;
        for (std::size_t i = start; i < end; ++i) take.push_back(i);
        start = end;
    }
    const std::size_t k = need - take.size();
    if (k == 0) return take;
    std::size_t end = start;
    while (end < ordered.size() && ordered[end].rank == ordered[start].rank) ++end;
    const std::size_t n = end - start;
    std::vector<std::string> members = fixed;
    for (const std::size_t i : take) members.push_back(ordered[i].index);
    // MIG units have no peer-to-peer: their GPUs' links are not theirs
    const auto unit = [](const std::string& index) { return index.find(':') != std::string::npos; };
    const bool units = std::any_of(members.begin(), members.end(), unit) ||
                       std::any_of(ordered.begin() + static_cast<std::ptrdiff_t>(start),
                                   ordered.begin() + static_cast<std::ptrdiff_t>(end),
                                   [&](const Candidate& c) { return unit(c.index); });
    if (links.empty() || members.size() + k < 2 || units) {
        for (std::size_t i = 0; i < k; ++i) take.push_back(start + i);
        return take;
    }
    std::vector<std::vector<Link>> pair(n, std::vector<Link>(n));
    std::vector<Score> to_members(n);
    for (std::size_t i = 0; i < n; ++i) {
        for (std::size_t j = i + 1; j < n; ++j)
            pair[i][j] = pair[j][i] = links.between(ordered[start + i].index, ordered[start + j].index);
        for (const std::string& m : members) to_members[i].add(links.between(ordered[start + i].index, m));
    }
    const Search search(std::move(pair), std::move(to_members), score_of(links, members));
    const std::size_t sets = subsets(n, k, kExhaustiveSets);
    std::vector<std::size_t> pick;
    if (sets <= kExhaustiveSets) {
        const std::size_t next_size = members.size() + k;
        const std::size_t rest = n - k >= next_size ? subsets(n - k, next_size, kLookaheadSets) : 0;
        const bool look_ahead = next_size >= 2 && rest > 0 && sets * rest <= kLookaheadSets;
        pick = search.exhaustive(n, k, next_size, look_ahead);
    } else {
        pick = search.greedy(n, k);
    }
    for (const std::size_t i : pick) take.push_back(start + i);
    return take;
}

}  // namespace topology
}  // namespace flinkgpu
