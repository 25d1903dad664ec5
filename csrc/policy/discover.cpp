#include "policy/discover.hpp"

#include "base/counted.hpp"
#include "base/gpu_index.hpp"
#include "coordination/file.hpp"
#include "coordination/liveness.hpp"
#include "policy/shortage.hpp"
#include "topology/sets.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>

#include <algorithm>
#include <chrono>
#include <iterator>
#include <new>

namespace flinkgpu {
namespace policy {
namespace {

// Below every rank rank_gpus gives (0-3): a GPU the claim may count but never take.
constexpr int kWorstRank = 4;

template <typename T>
bool contains(const std::vector<T>& v, const T& x) {
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

// What a discovery needs to read (docs/design.md §9.1): GPUs in preference order until `amount` of the best
// class are found, never one a live holder other than the owner has in the coordination file (read here,
// before NVML; the claim checks again under the lock), always those the owner holds (it gets them back);
// one of a dead holder, or with a unit another live holder has, is read but not counted, since the claim
// takes free GPUs first. *owned: the indices the owner's live lines name. A file that is missing or empty
// is not read. Any error reading it: the whole host is read.
ReadScope scope_of(const DiscoveryRequest& request, std::vector<std::string>* owned) {
    ReadScope scope;
    scope.every_read = request.enumerate_by_reading;
    if (request.amount == 0 || !request.amount_text.empty()) return scope;
    scope.enough = request.amount;
    if (!request.coordinated) return scope;
    // statx, not stat: stat@GLIBC_2.33 is beyond the manylinux_2_28 wheel
    struct statx st{};
    if (statx(AT_FDCWD, request.coordination.path.c_str(), AT_STATX_SYNC_AS_STAT, STATX_SIZE, &st) != 0 ||
        st.stx_size == 0)
        return scope;
    coordination::Options quick = request.coordination;
    quick.timeout_ms = std::min<std::int64_t>(quick.timeout_ms, 100);  // a busy file: read the whole host instead
    const coordination::Snapshot snap = coordination::snapshot(quick);
    if (!snap.status.ok()) return scope.whole();
    // The owner's lines by the claim's own rule (its namespace, its start time), never by pid alone: pid 1
    // of another container is another holder.
    coordination::LineJudge judge(nullptr);
    const coordination::ProcInfo& owner_info = judge.process(request.owner);
    for (const coordination::Entry& e : snap.entries) {
        unsigned gpu = 0;
        if (!gpu_of(e.gpu, &gpu)) continue;
        if (e.alive && judge.owns(e, request.owner, owner_info)) {
            scope.read_through = std::max(scope.read_through, gpu + 1);
            owned->push_back(e.index);
        } else if (!e.alive || e.index != e.gpu) {
            scope.uncounted.push_back(gpu);  // a free GPU goes first; a unit's GPU may have no free unit
        } else {
            scope.held_elsewhere.push_back(gpu);
        }
    }
    return scope;
}

// `more` added to `into`, each list in index order, a device enumerated twice once.
void merge(Enumeration more, Enumeration* into) {
    auto by_index = [](const auto& a, const auto& b) { return compare_indices(a.index, b.index) < 0; };
    auto add = [&](auto& from, auto& to) {
        for (auto& item : from)
            if (std::none_of(to.begin(), to.end(), [&](const auto& had) { return had.index == item.index; }))
                to.push_back(std::move(item));
        std::stable_sort(to.begin(), to.end(), by_index);
    };
    add(more.devices, into->devices);
    add(more.skipped, into->skipped);
    into->notices.insert(into->notices.end(), std::make_move_iterator(more.notices.begin()),
                         std::make_move_iterator(more.notices.end()));
}

// Enumerates the GPUs the caller has not enumerated that could be handed out, and the unhealthy ones read
// (their uuid names them to an operator), within nvml-timeout of its own: each GPU's handle was taken
// by the read, so this costs no first handle. A candidate the enumeration skips (a property refused, no MIG
// instance) is no candidate any more; a skip of any other GPU is not reported (it is unhealthy anyway).
Status enumerate_candidates(const NvmlLibrary& lib, const DiscoveryRequest& request, DiscoveryOutcome* out) {
    Ranking& ranking = out->choice.ranking;
    std::vector<unsigned> gpus, candidates, unhealthy;
    auto want = [&](const std::string& index, bool candidate) {
        unsigned gpu = 0;
        if (!gpu_of(index, &gpu)) return;
        if (candidate && !contains(candidates, gpu)) candidates.push_back(gpu);
        // a MIG unit made since the GPU was enumerated, or one skipped then, has its GPU enumerated again
        if (contains(request.known_devices, index)) return;
        std::vector<unsigned>& into = candidate ? gpus : unhealthy;
        if (!contains(into, gpu)) into.push_back(gpu);
    };
    for (const std::string& index : ranking.indices) want(index, true);
    for (const DeviceState& state : out->choice.states)
        if (state.health == Health::kUnhealthy) want(state.index, false);
    unhealthy.erase(
        std::remove_if(unhealthy.begin(), unhealthy.end(), [&](unsigned gpu) { return contains(gpus, gpu); }),
        unhealthy.end());
    out->enumeration = Enumeration();
    std::sort(gpus.begin(), gpus.end());
    std::sort(unhealthy.begin(), unhealthy.end());
    Stall stall;
    // A deadline of its own, as an enumeration up front had: the read may have spent all of nvml-timeout
    // waiting for a stuck GPU, and this runs once per process and GPU.
    if (!gpus.empty()) {
        if (const Status st = enumerate_within(lib, request.nvml_timeout, &out->enumeration, &stall, gpus); !st.ok())
            return st;
    }
    // The unhealthy GPUs apart, after the candidates, one at a time within one nvml-timeout: what they give
    // is their uuid for the WARN, and one whose queries hang (a broken GPU's may) must not take the GPUs
    // that can be handed out down with it (stuck, it is a stall of that GPU alone: later reads see it
    // unknown). Not enumerated in time, it is warned without its uuid.
    const auto started = std::chrono::steady_clock::now();
    for (const unsigned gpu : unhealthy) {
        const double left =
            request.nvml_timeout - std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
        if (left <= 0) break;
        Enumeration broken;
        if (!enumerate_within(lib, left, &broken, &stall, std::vector<unsigned>{gpu}).ok()) continue;
        for (DeviceInfo& device : broken.devices) out->enumeration.devices.push_back(std::move(device));
        for (SkippedDevice& device : broken.skipped) out->enumeration.skipped.push_back(std::move(device));
        for (std::string& notice : broken.notices) out->enumeration.notices.push_back(std::move(notice));
    }
    std::stable_sort(out->enumeration.devices.begin(), out->enumeration.devices.end(),
                     [](const DeviceInfo& a, const DeviceInfo& b) { return compare_indices(a.index, b.index) < 0; });
    std::vector<SkippedDevice>& skipped = out->enumeration.skipped;
    skipped.erase(std::remove_if(skipped.begin(), skipped.end(),
                                 [&](const SkippedDevice& d) { return !contains(candidates, d.nvml_index); }),
                  skipped.end());
    for (const SkippedDevice& device : skipped) {
        for (std::size_t i = 0; i < ranking.indices.size();) {
            const std::string& index = ranking.indices[i];
            // the skipped device, or every unit of a GPU skipped whole
            const bool gone = index == device.index ||
                              (!device.mig_slot && index.compare(0, device.index.size() + 1, device.index + ":") == 0);
            if (!gone) {
                ++i;
                continue;
            }
            std::string why = device.reason;
            if (!why.empty() && why.back() == '.') why.pop_back();
            ranking.left_out.emplace_back(index, std::move(why));
            ranking.indices.erase(ranking.indices.begin() + static_cast<std::ptrdiff_t>(i));
            ranking.ranks.erase(ranking.ranks.begin() + static_cast<std::ptrdiff_t>(i));
        }
    }
    std::stable_sort(ranking.left_out.begin(), ranking.left_out.end(),
                     [](const auto& a, const auto& b) { return compare_indices(a.first, b.first) < 0; });
    return Status();
}

// The host-wide copy of the topology beside the coordination file (nvml/topology.hpp), adopted when it is
// trusted as the file's other companions are (coordination/file.hpp) and of this host's key. True: adopted.
bool adopt_shared(const NvmlLibrary& lib, const std::string& path, const std::string& key, unsigned count) {
    const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return false;
    struct statx st{};
    std::string text;
    if (statx(fd, "", AT_EMPTY_PATH, STATX_TYPE | STATX_MODE | STATX_UID | STATX_SIZE, &st) == 0 &&
        S_ISREG(st.stx_mode) && st.stx_size < (1u << 20) && coordination::check_companion_owner(st, path).ok()) {
        char buffer[8192];
        ssize_t n = 0;
        while ((n = read(fd, buffer, sizeof buffer)) > 0) text.append(buffer, static_cast<std::size_t>(n));
    }
    close(fd);
    return !text.empty() && adopt_topology(lib, text, key, count);
}

// Leaves this process's topology of the host's `count` GPUs as the copy at `path`: written whole beside it and
// renamed over it, so that a reader sees the old copy or the new one, never a part.
void share(const NvmlLibrary& lib, const std::string& path, const std::string& key, unsigned count) {
    const std::string text = topology_text(lib, key, count);
    if (text.empty()) return;
    // pid and time: a name no earlier writer killed before its rename left behind (pids are reused)
    const std::string temporary = path + ".new." + std::to_string(getpid()) + "." +
                                  std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
    const int fd = open(temporary.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0) return;
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = write(fd, text.data() + done, text.size() - done);
        if (n <= 0) break;
        done += static_cast<std::size_t>(n);
    }
    const bool whole = done == text.size() && close(fd) == 0;
    if (!whole || rename(temporary.c_str(), path.c_str()) != 0) unlink(temporary.c_str());
}

// Narrows `scope` to the GPUs whose states to read first: what the owner holds and the best joined set of the
// `candidates` (GPU numbers) but those `passed` (read, and not of the best class), as if all were of the best
// class. False when that adds no GPU the scope did not read already (or the owner holds enough).
bool read_first(const DiscoveryRequest& request, const std::vector<std::string>& owned, const Topology& topology,
                const std::vector<unsigned>& candidates, const std::vector<unsigned>& passed, ReadScope* scope) {
    std::vector<std::string> mine;
    for (const std::string& index : owned) {
        unsigned gpu = 0;
        if (gpu_of(index, &gpu) && !contains(mine, std::to_string(gpu))) mine.push_back(std::to_string(gpu));
    }
    if (mine.size() >= request.amount) return false;
    // in the claim's order among equals: free GPUs before those of dead holders (scope->uncounted)
    std::vector<topology::Candidate> ordered;
    for (const bool dead_holders : {false, true})
        for (const unsigned gpu : candidates)
            if (!contains(mine, std::to_string(gpu)) && !contains(passed, gpu) &&
                contains(scope->uncounted, gpu) == dead_holders)
                ordered.push_back({std::to_string(gpu), 0});
    std::vector<unsigned> first = scope->only.value_or(std::vector<unsigned>());
    const std::size_t before = first.size();
    for (const std::string& index : mine)
        if (!contains(first, static_cast<unsigned>(std::stoul(index))))
            first.push_back(static_cast<unsigned>(std::stoul(index)));
    for (const std::size_t i : topology::choose_set(topology.links, mine, ordered, request.amount - mine.size())) {
        const auto gpu = static_cast<unsigned>(std::stoul(ordered[i].index));
        if (!contains(first, gpu)) first.push_back(gpu);
    }
    if (first.size() == before) return false;
    scope->only = first;
    scope->enough = 0;  // every one of them: the read does not stop at `amount` in index order
    return true;
}

// The topology of the GPUs a discovery could take (every GPU but those another live holder has), into
// *topology, and the scope narrowed to the best joined set of them (with what the owner holds) so that their
// states are read first; if one of them is not of the best class, the whole host is read after all. False when
// nothing of how they are joined is known (then the discovery is as with topology: ignore). The topology's read
// spends the request's NVML deadline. Coordinated, a copy beside the coordination file spares a process the
// read (and the first handle of each GPU it does not take); without one, the claim reads every GPU's part and
// leaves the copy.
bool read_joined(const NvmlLibrary& lib, const DiscoveryRequest& request, ReadScope* scope,
                 const std::vector<std::string>& owned, Topology* topology, std::vector<unsigned>* candidates) {
    const auto start = std::chrono::steady_clock::now();
    const auto left = [&] {
        return request.nvml_timeout - request.spent -
               std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    if (left() <= 0) return false;  // the deadline has passed: the state read says what did not return
    // the copy's key names the GPU count too: a process without an enumeration asks NVML for it once
    std::string key;
    bool key_asked = false;  // at most once: a hang in it spends no more of the deadline
    unsigned count = 0;
    std::vector<unsigned> gpus;
    if (request.enumerate_by_reading) {
        count = topology_host_count(lib);
        if (count == 0 && request.coordinated) {
            key = topology_key(lib, left() / 2, &count);
            key_asked = true;
        }
        if (count == 0) {
            struct Answer : Counted {
                nvmlReturn_t first = NVML_ERROR_UNKNOWN;
                unsigned second = 0;
            };
            const Ref<Answer> counted(new Answer());
            Stall stall;
            Status started;
            const NvmlLibrary* library = &lib;
            if (!run_within(left() / 2, "nvmlDeviceGetCount_v2",
                            [library, counted] { counted->first = library->api().device_get_count(&counted->second); },
                            &stall, &started) ||
                counted->first != NVML_SUCCESS)
                return false;
            count = counted->second;
        }
        for (unsigned gpu = 0; gpu < count; ++gpu) gpus.push_back(gpu);
    } else {
        for (const std::string& index : request.enumerated) {
            unsigned gpu = 0;
            if (gpu_of(index, &gpu) && !contains(gpus, gpu)) gpus.push_back(gpu);
        }
    }
    gpus.erase(
        std::remove_if(gpus.begin(), gpus.end(), [&](unsigned gpu) { return contains(scope->held_elsewhere, gpu); }),
        gpus.end());
    if (gpus.size() < 2) return false;
    std::string shared;
    bool adopted = false;
    if (request.coordinated && !topology_known(lib, gpus)) {
        if (!key_asked) key = topology_key(lib, left() / 2, &count);
        shared = request.coordination.path + coordination::kTopologySuffix;
        adopted = !key.empty() && adopt_shared(lib, shared, key, count);
    } else {
        key.clear();  // known here already: no copy to read or leave
    }
    const bool leave_copy = !key.empty() && !adopted;
    std::vector<unsigned> every;
    for (unsigned gpu = 0; gpu < count; ++gpu) every.push_back(gpu);
    // at most half of what is left: the state read after it must still be able to name what hangs
    read_topology(lib, leave_copy ? every : gpus, left() / 2, topology);
    if (leave_copy && topology->calls > 0 && topology->stalls.empty()) share(lib, shared, key, count);
    if (topology->links.empty()) return false;
    *candidates = gpus;
    if (!read_first(request, owned, *topology, *candidates, {}, scope)) scope->only.reset();
    return true;
}

// One discovery on what `scope` reads. *read_more: the outcome is short only because some GPUs were not
// read (the read stopped early, or a GPU another held when the scope was made is free now).
DiscoveryOutcome discover_within(const NvmlLibrary& lib, const DiscoveryRequest& request, const ReadScope& scope,
                                 const std::vector<std::string>& owned, const Topology* topology, bool* read_more) {
    DiscoveryOutcome out;
    *read_more = false;
    out.status = choose_gpus(lib, request.enumerated, request.owner, request.taskmanager, request.busy, request.checks,
                             request.nvml_timeout, &out.choice, request.spent, false, scope, topology);
    if (!out.status.ok()) return out;
    // The GPUs not read because another holder has them (they count, but are never taken), and those the
    // read did not reach.
    std::vector<std::string> held, stopped;
    for (const std::string& index : out.choice.unread) {
        unsigned gpu = 0;
        const bool elsewhere =
            gpu_of(index, &gpu) &&
            std::find(scope.held_elsewhere.begin(), scope.held_elsewhere.end(), gpu) != scope.held_elsewhere.end();
        (elsewhere ? held : stopped).push_back(index);
    }
    if (request.enumerate_candidates) {
        if (!(out.status = enumerate_candidates(lib, request, &out)).ok()) return out;
    }
    const Ranking& ranking = out.choice.ranking;
    // The read stopped at `amount` of the best class (rank 0); fewer are candidates now (a unit the
    // enumeration skipped, say): a better GPU may be among those not read.
    const auto best = static_cast<std::size_t>(std::count(ranking.ranks.begin(), ranking.ranks.end(), 0));
    if (!stopped.empty() && request.amount > best) {
        *read_more = true;
        out.status = failure(StatusCode::kNotEnough, "too few among the GPUs read");
        return out;
    }
    if (request.before_claim && !request.before_claim(out.choice)) {
        out.owner_gone = true;
        return out;
    }
    // Too few usable, coordinated or not: said before any claim, which would count only the usable ones as
    // the host's GPUs. A GPU another holder has counts as usable here: the claim names its holder.
    if (request.amount > ranking.indices.size() + held.size()) {
        coordination::LeftOut left_out = ranking.left_out;
        for (auto [index, why] : request.skipped) {
            if (!why.empty() && why.back() == '.') why.pop_back();  // a sentence of its own, in parentheses here
            left_out.emplace_back(std::move(index), std::move(why));
        }
        std::stable_sort(left_out.begin(), left_out.end(),
                         [](const auto& a, const auto& b) { return compare_indices(a.first, b.first) < 0; });
        const std::size_t host = scope.every_read ? out.choice.states.size() + out.choice.unread.size()
                                                  : request.enumerated.size() + request.skipped.size();
        out.too_few_usable = true;
        out.status = failure(
            StatusCode::kNotEnough,
            std::string(kNotEnoughResources) + ": " +
                shortage_sentence(request.amount_text.empty() ? std::to_string(request.amount) : request.amount_text,
                                  ranking.indices.size() + held.size(), host, request.counted, left_out));
        return out;
    }
    if (!request.coordinated) {
        if (topology == nullptr) {
            out.chosen.assign(ranking.indices.begin(),
                              ranking.indices.begin() + static_cast<std::ptrdiff_t>(request.amount));
            return out;
        }
        std::vector<topology::Candidate> ordered;
        for (std::size_t i = 0; i < ranking.indices.size(); ++i)
            ordered.push_back({ranking.indices[i], ranking.ranks[i]});
        for (const std::size_t i : topology::choose_set(topology->links, {}, ordered, request.amount))
            out.chosen.push_back(ordered[i].index);
        return out;
    }
    std::vector<std::string> candidates = ranking.indices;
    std::vector<int> ranks = ranking.ranks;
    std::vector<std::string> not_takeable = held;
    for (const std::string& index : held) {
        candidates.push_back(index);
        ranks.push_back(kWorstRank);
    }
    // While GPUs are unread, one below the best class is taken only by reading them first (another may have
    // taken a best one meanwhile); what the owner holds it gets back whatever its class.
    if (!stopped.empty())
        for (std::size_t i = 0; i < ranking.indices.size(); ++i)
            if (ranking.ranks[i] > 0 && !contains(owned, ranking.indices[i]))
                not_takeable.push_back(ranking.indices[i]);
    coordination::ClaimResult claimed =
        coordination::claim(request.coordination, request.owner, candidates, request.amount, ranks, ranking.left_out,
                            not_takeable, topology != nullptr ? &topology->links : nullptr);
    out.status = claimed.status;
    out.unparsable = std::move(claimed.unparsable);
    out.lease_problem = std::move(claimed.lease_problem);
    out.notices = std::move(claimed.notices);
    if (!out.status.ok()) {
        *read_more = out.status.code == StatusCode::kNotEnough && (!stopped.empty() || !claimed.untaken.empty());
        return out;
    }
    out.chosen = in_script_order(claimed);
    out.added = std::move(claimed.added);
    out.reclaimed = std::move(claimed.reclaimed);
    return out;
}

}  // namespace

DiscoveryOutcome discover(const NvmlLibrary& lib, const DiscoveryRequest& request) noexcept {
    try {
        const auto start = std::chrono::steady_clock::now();
        std::vector<std::string> owned;
        ReadScope scope = scope_of(request, &owned);
        DiscoveryRequest timed = request;
        Topology topology;
        std::vector<unsigned> candidates;
        const bool joined = request.topology == TopologyPolicy::kPrefer && request.amount >= 2 &&
                            request.amount_text.empty() &&
                            read_joined(lib, request, &scope, owned, &topology, &candidates);
        timed.spent += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const Topology* links = joined ? &topology : nullptr;
        bool read_more = false;
        DiscoveryOutcome out = discover_within(lib, timed, scope, owned, links, &read_more);
        // A GPU of the set read first was not of the best class: the next best joined set of the others is read
        // with those, as a read in index order reads one more, until the GPUs to read are all read.
        std::vector<unsigned> passed;
        const bool processes = read_plan(request.busy).processes;
        while (read_more && joined && scope.only.has_value()) {
            for (const DeviceState& s : out.choice.states)
                if (!ReadScope::best(s, processes) && !contains(passed, s.nvml_index)) passed.push_back(s.nvml_index);
            if (!read_first(request, owned, topology, candidates, passed, &scope)) break;
            timed.spent =
                request.spent + std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            out = discover_within(lib, timed, scope, owned, links, &read_more);
        }
        // Too few among what was read (or taken meanwhile under the claim's lock) while some GPUs were not
        // read: the whole host decides, within what is left of the deadline, and its shortage names every GPU.
        if (read_more) {
            DiscoveryRequest whole = request;
            whole.spent += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
            for (const DeviceInfo& d : out.enumeration.devices)  // enumerated in the first round
                whole.known_devices.push_back(d.index);
            Enumeration first = std::move(out.enumeration);
            out = discover_within(lib, whole, scope.whole(), owned, links, &read_more);
            merge(std::move(first), &out.enumeration);
        }
        return out;
    } catch (const std::bad_alloc&) {
        DiscoveryOutcome out;
        out.status = failure(StatusCode::kOutOfMemory, "Out of memory while discovering GPUs.", ENOMEM);
        return out;
    }
}

}  // namespace policy
}  // namespace flinkgpu
