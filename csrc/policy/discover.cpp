#include "policy/discover.hpp"

#include "base/gpu_index.hpp"
#include "policy/shortage.hpp"

#include <cerrno>

#include <algorithm>
#include <new>

namespace flinkgpu {
namespace policy {
namespace {

bool contains(const std::vector<std::string>& v, const std::string& x) {
    return std::find(v.begin(), v.end(), x) != v.end();
}

// The stock script prints what the owner held first, then free GPUs, then those of dead owners.
std::vector<std::string> in_script_order(const coordination::ClaimResult& r) {
    std::vector<std::string> ordered;
    for (const auto& i : r.indices)
        if (!contains(r.added, i)) ordered.push_back(i);
    for (const auto& i : r.added)
        if (!contains(r.reclaimed, i)) ordered.push_back(i);
    for (const auto& i : r.reclaimed) ordered.push_back(i);
    return ordered;
}

}  // namespace

DiscoveryOutcome discover(const NvmlLibrary& lib, const DiscoveryRequest& request) noexcept {
    DiscoveryOutcome out;
    try {
        out.status = choose_gpus(lib, request.enumerated, request.owner, request.taskmanager, request.busy,
                                 request.checks, request.nvml_timeout, &out.choice, request.spent);
        if (!out.status.ok()) return out;
        if (request.before_claim && !request.before_claim(out.choice)) {
            out.owner_gone = true;
            return out;
        }
        const Ranking& ranking = out.choice.ranking;
        // Too few usable, coordinated or not: said before any claim, which would count only the usable
        // ones as the host's GPUs.
        if (request.amount > ranking.indices.size()) {
            coordination::LeftOut left_out = ranking.left_out;
            for (auto [index, why] : request.skipped) {
                if (!why.empty() && why.back() == '.') why.pop_back();  // a sentence of its own, in parentheses here
                left_out.emplace_back(std::move(index), std::move(why));
            }
            std::stable_sort(left_out.begin(), left_out.end(),
                             [](const auto& a, const auto& b) { return compare_indices(a.first, b.first) < 0; });
            out.status =
                failure(StatusCode::kNotEnough,
                        std::string(kNotEnoughResources) + ": " +
                            shortage_sentence(
                                request.amount_text.empty() ? std::to_string(request.amount) : request.amount_text,
                                ranking.indices.size(), request.enumerated.size() + request.skipped.size(),
                                request.counted, left_out));
            return out;
        }
        if (!request.coordinated) {
            out.chosen.assign(ranking.indices.begin(),
                              ranking.indices.begin() + static_cast<std::ptrdiff_t>(request.amount));
            return out;
        }
        coordination::ClaimResult claimed = coordination::claim(request.coordination, request.owner, ranking.indices,
                                                                request.amount, ranking.ranks, ranking.left_out);
        out.status = claimed.status;
        out.unparsable = std::move(claimed.unparsable);
        out.lease_problem = std::move(claimed.lease_problem);
        if (!out.status.ok()) return out;
        out.chosen = in_script_order(claimed);
        out.added = std::move(claimed.added);
        out.reclaimed = std::move(claimed.reclaimed);
        return out;
    } catch (const std::bad_alloc&) {
        out.status = failure(StatusCode::kOutOfMemory, "Out of memory while discovering GPUs.", ENOMEM);
        return out;
    }
}

}  // namespace policy
}  // namespace flinkgpu
