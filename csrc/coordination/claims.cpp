// The coordination policy (docs/design.md §5.2): who gets which GPU, what release and clean remove.
// The file itself is coordination/file.*, its lines coordination/lines.*, owners' liveness
// coordination/liveness.*; see coordination/claims.hpp for the rules and the reasons behind them.
#include "coordination/claims.hpp"

#include "base/gpu_index.hpp"
#include "coordination/steps.hpp"
#include "topology/sets.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <new>
#include <set>
#include <utility>

namespace flinkgpu {
namespace coordination {
namespace {

// The host's GPUs: the candidates a claim is given and those left out of them, valid, distinct and in index
// order.
Status host_gpus(const std::vector<std::string>& candidates, const LeftOut& left_out, std::vector<std::string>* out) {
    std::vector<std::string> all = candidates;
    for (const auto& [index, why] : left_out) all.push_back(index);
    return validate_indices(all, out);
}

// The one start of a claim's not-enough message: how many were requested, the host's GPUs, and each one left
// out of the candidates with why; a state not read in time (nvml/health.hpp's health text "unknown: <why>")
// is said to be unknown.
std::string shortage_head(const std::string& amount, const std::vector<std::string>& host, const LeftOut& left_out) {
    std::string msg = "Could not get enough GPU resources. Requested " + amount + ", the host has " +
                      std::to_string(host.size()) + " GPU" + (host.size() == 1 ? "" : "s") +
                      (host.empty() ? "" : " (" + join(host) + ")");
    static const std::string kUnknown = "unknown: ";
    for (std::size_t i = 0; i < left_out.size(); ++i) {
        const auto& [index, why] = left_out[i];
        msg += (i == 0 ? ", of which GPU " : ", GPU ") + index;
        msg += why.compare(0, kUnknown.size(), kUnknown) == 0 ? " is unknown (" + why.substr(kUnknown.size()) + ")"
                                                              : " is left out (" + why + ")";
    }
    return msg;
}

// What each existing index is to the owner: held by it, blocked by a line we cannot read, held by other live owners
// (by pid, what of theirs excludes it), free, or held by dead owners only (reclaimable).
struct Holdings {
    std::vector<std::string> held, free_idx, reclaimable, blocked;
    std::map<pid_t, std::vector<std::string>> others;
};

// Sorts `existing` into Holdings; an index that is not takeable goes to *untaken unless another live owner holds it.
Holdings sort_existing(const std::vector<std::string>& existing, const std::vector<Line>& lines, LineJudge* live,
                       pid_t owner, const ProcInfo& owner_info, const std::vector<std::string>& not_takeable,
                       std::vector<std::string>* untaken) {
    Holdings h;
    for (const std::string& idx : existing) {
        bool mine = false, bad = false, mentioned = false;
        pid_t live_other = 0;
        std::string live_what;
        const std::string gpu = gpu_of(idx);
        for (const Line& l : lines) {
            if (l.kind == LineKind::kBad && (l.word == idx || l.word == gpu)) bad = true;
            if (l.kind != LineKind::kEntry || !excludes(l.entry, idx)) continue;
            mentioned = true;
            if (!l.entry.alive) continue;
            if (l.entry.index == idx && live->owns(l.entry, owner, owner_info)) {
                mine = true;
            } else if (live_other == 0) {
                live_other = l.entry.pid;
                live_what = l.entry.index;  // idx itself, or a unit or whole GPU that excludes it
            }
        }
        const bool takeable = std::find(not_takeable.begin(), not_takeable.end(), idx) == not_takeable.end();
        if (!takeable && (mine || live_other == 0)) {
            untaken->push_back(idx);  // no longer another's: never taken unread
        } else if (mine) {
            h.held.push_back(idx);
        } else if (bad) {
            h.blocked.push_back(idx);
        } else if (live_other != 0) {
            std::vector<std::string>& theirs = h.others[live_other];
            if (std::find(theirs.begin(), theirs.end(), live_what) == theirs.end()) theirs.push_back(live_what);
        } else if (!mentioned) {
            h.free_idx.push_back(idx);
        } else {
            h.reclaimable.push_back(idx);
        }
    }
    return h;
}

// The indices to take for `need` more, rank by rank; within a rank free indices before reclaimable ones, each lowest
// first, and with `links` the best joined set of the last rank needed (topology/sets.hpp), what the owner holds
// among its members. The reclaimable ones taken go to *reclaimed too. Fewer than `need` when the host has no more.
std::vector<std::string> choose_take(const Holdings& h, std::size_t need, const IndexRanks& rank_of,
                                     const topology::Links* links, std::vector<std::string>* reclaimed) {
    std::vector<topology::Candidate> ordered;
    std::set<int> rank_order;
    for (const std::string& idx : h.free_idx) rank_order.insert(rank_of.of(idx));
    for (const std::string& idx : h.reclaimable) rank_order.insert(rank_of.of(idx));
    for (const int current : rank_order) {
        for (const std::string& idx : h.free_idx)
            if (rank_of.of(idx) == current) ordered.push_back({idx, current});
        for (const std::string& idx : h.reclaimable)
            if (rank_of.of(idx) == current) ordered.push_back({idx, current});
    }
    std::vector<std::size_t> picked;
    if (links != nullptr) {
        picked = topology::choose_set(*links, h.held, ordered, need);
    } else {
        for (std::size_t i = 0; i < std::min(need, ordered.size()); ++i) picked.push_back(i);
    }
    std::vector<std::string> take;
    for (const std::size_t i : picked) {
        take.push_back(ordered[i].index);
        if (std::find(h.reclaimable.begin(), h.reclaimable.end(), ordered[i].index) != h.reclaimable.end())
            reclaimed->push_back(ordered[i].index);
    }
    return take;
}

// kNotEnough for a claim of `amount` that the host cannot meet: the shortage's head, then who holds what.
Status shortage(const Options& opts, std::size_t amount, const std::vector<std::string>& host, const LeftOut& left_out,
                pid_t owner, const Holdings& h) {
    std::string msg = shortage_head(std::to_string(amount), host, left_out);
    std::string holders;
    for (const auto& kv : h.others) {
        if (!holders.empty()) holders += "; ";
        holders += "pid " + std::to_string(kv.first) + " holds " + join(kv.second);
    }
    if (!h.held.empty()) msg += "; this process (pid " + std::to_string(owner) + ") holds " + join(h.held);
    if (!holders.empty()) msg += "; " + holders;
    if (!h.blocked.empty()) {
        msg += "; " + join(h.blocked) + (h.blocked.size() == 1 ? " is" : " are") +
               " blocked by lines that cannot be parsed";
    }
    msg += ". Coordination file: " + opts.path + ".";
    return failure(StatusCode::kNotEnough, msg);
}

// Marks the lines of the `reclaimed` indices not kept: dead, for a live one would have kept its index taken.
void drop_reclaimed(std::vector<Line>* lines, const std::vector<std::string>& reclaimed) {
    const std::set<std::string> gone(reclaimed.begin(), reclaimed.end());
    for (Line& l : *lines) {
        if (l.kind != LineKind::kEntry) continue;
        for (const std::string& idx : gone) {
            if (excludes(l.entry, idx)) l.keep = false;
        }
    }
}

ClaimResult claim_impl(const Options& opts, pid_t owner, const std::vector<std::string>& existing_in,
                       std::size_t amount, const std::vector<int>& ranks, const LeftOut& left_out,
                       const std::vector<std::string>& not_takeable, const topology::Links* links) {
    ClaimResult r;
    if (!(r.status = validate_pid(owner, "owner pid")).ok()) return r;
    std::vector<std::string> existing, host;
    if (!(r.status = validate_indices(existing_in, &existing)).ok()) return r;
    if (!(r.status = host_gpus(existing, left_out, &host)).ok()) return r;
    IndexRanks rank_of;
    if (!(r.status = rank_of.assign(existing_in, ranks)).ok()) return r;
    if (amount == 0) return r;

    LineJudge live(nullptr);  // the leases once the file is locked: their registry is not held while waiting
    const ProcInfo owner_info = live.process(owner);
    if (!owner_info.exists) {
        r.status = failure(StatusCode::kInvalidArgument,
                           "Cannot claim GPUs for process " + std::to_string(owner) + ": it does not exist.");
        return r;
    }
    LockedFile file;
    bool exists = false;
    std::string text;
    if (!(r.status = open_and_read(opts, Access::kCreate, &file, &exists, &text)).ok()) return r;
    std::vector<Line> lines = parse_file(text);
    Leases leases(opts.path);
    live.use(&leases);
    mark_alive(&lines, &live);
    r.unparsable = bad_lines(lines);

    const Holdings h = sort_existing(existing, lines, &live, owner, owner_info, not_takeable, &r.untaken);
    if (h.held.size() >= amount) {
        r.indices.assign(h.held.begin(), h.held.begin() + static_cast<std::ptrdiff_t>(amount));
        return r;
    }
    std::vector<std::string> reclaimed;
    const std::vector<std::string> take = choose_take(h, amount - h.held.size(), rank_of, links, &reclaimed);
    if (h.held.size() + take.size() < amount) {
        r.status = shortage(opts, amount, host, left_out, owner, h);
        return r;
    }
    drop_reclaimed(&lines, reclaimed);
    r.status = write_lines(&file, text, &lines, &leases, new_holder(owner, owner_info, live.ns()), owner == live.self(),
                           LineTerms(), take, &r.lease_problem);
    if (!r.status.ok()) return r;
    r.added = take;
    r.reclaimed = std::move(reclaimed);
    r.indices = h.held;
    r.indices.insert(r.indices.end(), take.begin(), take.end());
    sort_indices(&r.indices);
    sort_indices(&r.added);
    sort_indices(&r.reclaimed);
    return r;
}

ReleaseResult release_impl(const Options& opts, pid_t owner, const std::vector<std::string>* only) {
    ReleaseResult r;
    if (!(r.status = validate_pid(owner, "owner pid")).ok()) return r;
    std::set<std::string> wanted;
    if (only != nullptr) {
        std::vector<std::string> v;
        if (!(r.status = validate_indices(*only, &v)).ok()) return r;
        wanted.insert(v.begin(), v.end());
        if (wanted.empty()) return r;
    }
    LockedFile file;
    bool exists = false;
    std::string text;
    const pid_t self = own_pid();
    const bool for_self = owner == self;
    if (!(r.status = open_and_read(opts, Access::kWriteExisting, &file, &exists, &text)).ok() || !exists) return r;
    std::vector<Line> lines = parse_file(text);
    Leases leases(opts.path);
    const PidNamespace ns = own_pid_namespace(self);
    std::set<std::string> released;
    for (Line& l : lines) {
        if (l.kind == LineKind::kEntry && l.entry.records(owner, for_self, ns) &&
            (only == nullptr || wanted.count(l.entry.index))) {
            l.keep = false;
            released.insert(l.entry.index);
        }
    }
    if (!(r.status = remove_lines(&file, text, lines, &leases, self)).ok()) return r;
    r.released.assign(released.begin(), released.end());
    sort_indices(&r.released);
    return r;
}

Snapshot snapshot_impl(const Options& opts) {
    Snapshot r;
    LockedFile file;
    std::string text;
    if (!(r.status = open_and_read(opts, Access::kReadExisting, &file, &r.exists, &text)).ok() || !r.exists) return r;
    file.unlock();  // liveness is probed after unlocking: the lock only guards the file's bytes
    std::vector<Line> lines = parse_file(text);
    Leases leases(opts.path);
    LineJudge live(&leases);
    mark_alive(&lines, &live);
    for (const Line& l : lines) {
        if (l.kind == LineKind::kEntry) r.entries.push_back(l.entry);
    }
    r.unparsable = bad_lines(lines);
    return r;
}

CleanResult clean_stale_impl(const Options& opts, bool other_namespaces) {
    CleanResult r;
    LockedFile file;
    bool exists = false;
    std::string text;
    if (!(r.status = open_and_read(opts, Access::kWriteExisting, &file, &exists, &text)).ok() || !exists) return r;
    std::vector<Line> lines = parse_file(text);
    Leases leases(opts.path);
    LineJudge live(&leases);
    mark_alive(&lines, &live);
    r.unparsable = bad_lines(lines);
    std::vector<Entry> removed;
    for (Line& l : lines) {
        if (l.kind == LineKind::kEntry &&
            (!l.entry.alive || (other_namespaces && l.entry.verdict == Verdict::kOtherNamespace))) {
            l.keep = false;
            removed.push_back(l.entry);
        }
    }
    if (removed.empty()) return r;
    if (!(r.status = file.rewrite(text, serialize(lines))).ok()) return r;
    r.removed = std::move(removed);
    return r;
}

}  // namespace

std::string unparsable_text(const char* role, const std::string& path, const BadLine& line, const char* never) {
    return "Line " + std::to_string(line.line_number) + " of the " + role + " " + path +
           " cannot be parsed and is left as it is (its GPU is never " + never + "): '" + printable(line.text) + "'";
}

std::string lease_problem_text(const std::vector<std::string>& gpus, const std::string& path, const std::string& why,
                               pid_t pid) {
    return "Took GPU(s) " + join(gpus) + " in " + path + " without a lease that other pid namespaces can rely on (" +
           why + "): they cannot tell when pid " + std::to_string(pid) +
           " dies, and keep its GPUs taken until `flink-gpu coordination clean --foreign-namespaces`.";
}

ClaimResult claim(const Options& opts, pid_t owner, const std::vector<std::string>& existing_indices,
                  std::size_t amount, const std::vector<int>& ranks, const LeftOut& left_out,
                  const std::vector<std::string>& not_takeable, const topology::Links* links) noexcept {
    return guarded<ClaimResult>([&] {
        ClaimResult r = claim_impl(opts, owner, existing_indices, amount, ranks, left_out, not_takeable, links);
        for (const BadLine& line : r.unparsable)
            warn(&r.notices, unparsable_text("coordination file", opts.path, line, "reclaimed"));
        if (!r.lease_problem.ok())
            warn(&r.notices, lease_problem_text(r.added, opts.path, r.lease_problem.message, owner));
        if (!r.reclaimed.empty())
            inform(&r.notices, "Reclaimed GPU(s) " + join(r.reclaimed) + " of dead owners in " + opts.path +
                                   " for pid " + std::to_string(owner) + ".");
        return r;
    });
}

Status not_enough(const Options& opts, const std::string& amount, const std::vector<std::string>& existing_indices,
                  const LeftOut& left_out) noexcept {
    struct Result {
        Status status;
    };
    return guarded<Result>([&] {
        Result r;
        std::vector<std::string> host;
        if ((r.status = host_gpus(existing_indices, left_out, &host)).ok())
            r.status = failure(StatusCode::kNotEnough,
                               shortage_head(amount, host, left_out) + ". Coordination file: " + opts.path + ".");
        return r;
    }).status;
}

ReleaseResult release(const Options& opts, pid_t owner) noexcept {
    return guarded<ReleaseResult>([&] { return release_impl(opts, owner, nullptr); });
}

ReleaseResult release_indices(const Options& opts, pid_t owner, const std::vector<std::string>& indices) noexcept {
    return guarded<ReleaseResult>([&] { return release_impl(opts, owner, &indices); });
}

Snapshot snapshot(const Options& opts) noexcept {
    return guarded<Snapshot>([&] { return snapshot_impl(opts); });
}

CleanResult clean_stale(const Options& opts, bool other_namespaces) noexcept {
    return guarded<CleanResult>([&] { return clean_stale_impl(opts, other_namespaces); });
}

std::vector<Status> check_companions(const Options& opts) noexcept {
    std::vector<Status> problems;
    try {
        for (const std::string& companion : companion_paths(opts.path)) {
            Status st = check_companion_owner(companion);
            if (!st.ok()) problems.push_back(std::move(st));
        }
    } catch (...) {
        problems.clear();  // out of memory: nothing found is the answer a caller can always take
    }
    return problems;
}

bool process_start_time(pid_t pid, std::uint64_t* start_time) noexcept {
    const ProcInfo info = probe_process(pid);
    if (!info.exists || !info.has_start_time) return false;
    *start_time = info.start_time;
    return true;
}

}  // namespace coordination
}  // namespace flinkgpu
