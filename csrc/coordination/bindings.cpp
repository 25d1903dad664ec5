// The binding policy (docs/design.md §9.3); see coordination/bindings.hpp for the rules and the reasons behind them.
#include "coordination/bindings.hpp"

#include "base/gpu_index.hpp"
#include "coordination/steps.hpp"
#include "flink/memory_size.hpp"
#include "topology/sets.hpp"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

namespace flinkgpu {
namespace binding {

using coordination::Entry;
using coordination::Line;
using coordination::LineKind;

namespace {

// How a message names the holder of a line.
std::string describe(const Entry& e) {
    if (e.slot.empty()) return "pid " + std::to_string(e.pid);
    std::string out = "slot " + e.slot;
    if (e.tm > 0) out += " of pid " + std::to_string(e.tm);
    return out;
}

std::string describe(const Holder& h) {
    if (h.slot.empty()) return "pid " + std::to_string(h.pid);
    std::string out = "slot " + h.slot;
    if (h.taskmanager > 0) out += " of pid " + std::to_string(h.taskmanager);
    return out + " (thread " + std::to_string(h.pid) + ")";
}

// Whether the holder's lines get this process's lease: a process holder that is this process, or a slot
// thread of it (the lease then proves the process to other pid namespaces, which cannot probe the thread).
bool leases_for(const Holder& holder, pid_t self) {
    if (holder.slot.empty()) return holder.pid == self;
    return coordination::own_thread(self, holder.pid);
}

}  // namespace

std::string orphan_text(pid_t pid, pid_t taskmanager, const std::string& gpus) {
    return "pid " + std::to_string(pid) + ", a worker of TaskManager " + std::to_string(taskmanager) +
           " which is gone, still runs on GPU " + gpus;
}

Status check_slot(const std::string& slot) {
    if (coordination::valid_slot(slot)) return {};
    // a message, not a dump: a huge id is shown by its start and its length
    constexpr std::size_t kShown = 64;
    const std::string shown =
        slot.size() <= kShown ? coordination::printable(slot) : coordination::printable(slot.substr(0, kShown)) + "...";
    const std::string length = slot.size() <= kShown ? "" : " (" + std::to_string(slot.size()) + " bytes)";
    return failure(StatusCode::kInvalidArgument, "Invalid slot id '" + shown + "'" + length +
                                                     ": a slot id is 1 to 128 letters, digits, '_', "
                                                     "'.', ':' or '-' (e.g. a Flink allocation id).");
}

namespace {

Status validate(const Holder& holder, std::uint32_t holders_per_gpu) {
    Status st = coordination::validate_pid(holder.pid, holder.slot.empty() ? "holder pid" : "thread id");
    if (!st.ok()) return st;
    if (!holder.slot.empty() && !(st = check_slot(holder.slot)).ok()) return st;
    if (holder.taskmanager < 0) return coordination::validate_pid(holder.taskmanager, "TaskManager pid");
    return coordination::check_share(holders_per_gpu, "number of holders per GPU");
}

// The given GPUs' memory by index (MemoryRequest::of, parallel to `gpus`), and the request's own checks:
// within a line's range, one reading per GPU.
Status memory_by_index(const std::vector<std::string>& gpus, const MemoryRequest& memory,
                       std::map<std::string, GpuMemory>* out) {
    const Status st = coordination::check_memory_request(memory.bytes, "memory request");
    if (!st.ok()) return st;
    if (!memory.of.empty() && memory.of.size() != gpus.size()) {
        return failure(StatusCode::kInvalidArgument, "The GPUs' memory readings (" + std::to_string(memory.of.size()) +
                                                         ") do not match the GPUs given (" +
                                                         std::to_string(gpus.size()) + ").");
    }
    for (std::size_t i = 0; i < memory.of.size(); ++i) (*out)[gpus[i]] = memory.of[i];
    return {};
}

// "10 GiB", or "none" for no request.
std::string request_text(std::uint64_t bytes) { return bytes == 0 ? "none" : format_memory_size(bytes); }

std::uint64_t saturating_add(std::uint64_t a, std::uint64_t b) { return b > UINT64_MAX - a ? UINT64_MAX : a + b; }

// Whether `e` is the line of a process holder that runs on though the TaskManager it bound for is gone (the
// judge saw its pid alive, with its start time, before it looked at the TaskManager).
bool orphaned(const Entry& e) { return e.verdict == coordination::Verdict::kTaskManagerGone && e.slot.empty(); }

// The lines of one call and what they say about the holder.
class View {
public:
    View(const Holder& holder, coordination::LineJudge* live, const coordination::ProcInfo& holder_info)
        : holder_(holder),
          live_(live),
          holder_info_(holder_info),
          identity_(coordination::new_holder(holder.pid, holder_info, live->ns(), holder.taskmanager, holder.slot)) {}

    // Whether the live entry `e` is one of the holder's lines (of any of a slot's threads).
    bool holders(const Entry& e) const {
        if (!e.alive) return false;
        if (holder_.slot.empty()) return e.slot.empty() && live_->owns(e, holder_.pid, holder_info_);
        return e.same_holder(identity_, live_->ns());
    }

    // The key of the live entry's holder, for counting a GPU's holders (every namespace's apart).
    std::string key(const Entry& e) const { return e.key(live_->ns()); }

    // Whether the live entry `e` was written by the calling thread of a slot holder (or is the process
    // holder's line).
    bool written_by_caller(const Entry& e) const {
        if (!holders(e)) return false;
        return holder_.slot.empty() || (e.pid == holder_.pid && coordination::same_process(e, holder_info_));
    }

    // Whether `e` binds for the process the holder's CUDA runs in: a process holder's own line, or a line of
    // any slot of the holder's TaskManager (its threads share the process).
    bool same_cuda_process(const Entry& e) const {
        if (!e.alive) return false;
        if (holder_.slot.empty()) return holders(e);
        return !e.slot.empty() && e.taskmanager_key(live_->ns()) == identity_.taskmanager_key(live_->ns());
    }

    const coordination::HolderIdentity& identity() const { return identity_; }

private:
    const Holder& holder_;
    coordination::LineJudge* live_;
    const coordination::ProcInfo& holder_info_;
    coordination::HolderIdentity identity_;  // what the holder's new lines record
};

// What a GPU offers a new holder.
struct Offer {
    std::string index;
    std::set<std::string> holders;                    // keys of its live holders (this one excluded)
    std::vector<std::string> who;                     // how the message names them
    std::uint32_t limit = 0;                          // the most holders it may have
    std::string excluded_by;                          // a holder of the other granularity (whole GPU / unit), if any
    bool blocked = false;                             // a line that cannot be parsed names it
    std::vector<std::size_t> blocked_by;              // the numbers of those lines
    std::map<std::string, std::uint64_t> request_of;  // each live holder's memory request (its largest line's)
    std::uint64_t requested = 0;                      // their sum
    std::uint64_t siblings_requested = 0;             // the part of it of holders in the holder's CUDA process
    std::vector<Orphan> orphans;                      // live processes on it whose TaskManager is gone
    GpuMemory memory;                                 // what NVML reads of it now
    // Whether a request of `bytes` fits: the requests with it within the total, and as much free now (with
    // what the binding process itself uses of it beyond its other holders' requests, up to the request: in
    // thread mode the TaskManager's use is its live slots' too).
    bool fits(std::uint64_t bytes) const {
        if (bytes == 0) return true;
        if (!memory.total || !memory.free) return false;
        const std::uint64_t reusable = memory.own_used > siblings_requested ? memory.own_used - siblings_requested : 0;
        const std::uint64_t available = saturating_add(*memory.free, std::min(reusable, bytes));
        return saturating_add(requested, bytes) <= *memory.total && available >= bytes;
    }
};

// What the holder's own lines say: the given GPUs it binds already (`mine`, in index order), those of them the
// calling thread has a line for, and the request its lines record per GPU, on every GPU it binds, not only those of
// this call (a holder has one request).
struct Bound {
    std::set<std::string> mine_set, by_caller;
    std::vector<std::string> mine;
    std::map<std::string, std::uint64_t> recorded;
};

Bound bound_already(const std::vector<Line>& lines, const View& view, const std::vector<std::string>& gpus) {
    Bound b;
    const std::set<std::string> candidates(gpus.begin(), gpus.end());
    for (const Line& l : lines) {
        if (l.kind != LineKind::kEntry || !view.holders(l.entry)) continue;
        std::uint64_t& recorded = b.recorded[l.entry.index];
        recorded = std::max(recorded, l.entry.memory);
        if (!candidates.count(l.entry.index)) continue;
        b.mine_set.insert(l.entry.index);
        if (view.written_by_caller(l.entry)) b.by_caller.insert(l.entry.index);
    }
    b.mine.assign(b.mine_set.begin(), b.mine_set.end());
    sort_indices(&b.mine);
    return b;
}

// The request the binding goes by, into *request (untouched when it is refused). A binding keeps the request it was
// made with: the holder's other code (another thread of the slot, a chained operator) asking without one gets it, and
// asking with another one is a configuration to fix, not one to guess between.
Status keep_request(const coordination::Options& opts, const Holder& holder, const MemoryRequest& memory,
                    const Bound& bound, std::uint64_t* request) {
    std::uint64_t kept = memory.bytes;
    for (const auto& [index, recorded] : bound.recorded) {
        if (memory.bytes == 0) kept = std::max(kept, recorded);
        if (memory.bytes == 0 || recorded == memory.bytes) continue;
        return failure(StatusCode::kInvalidArgument,
                       "Cannot bind GPUs to " + describe(holder) + " with a memory request of " +
                           request_text(memory.bytes) + ": it binds GPU " + index + " with a memory request of " +
                           request_text(recorded) +
                           " already. A binding keeps its request while it holds: ask with the same one (or "
                           "none), or release the binding first. Bindings file: " +
                           opts.path + ".");
    }
    *request = kept;
    return {};
}

// What GPU `g` offers the holder, by the lines: who binds it, the most holders it may have, what is requested of
// its memory, whether a line of the other granularity or one that cannot be parsed keeps it, its orphans.
Offer offer_of(const std::string& g, const std::vector<Line>& lines, const View& view, std::uint32_t holders_per_gpu,
               const std::map<std::string, GpuMemory>& memory_of) {
    Offer o;
    o.index = g;
    o.limit = holders_per_gpu;
    const auto reading = memory_of.find(g);
    if (reading != memory_of.end()) o.memory = reading->second;
    const std::string parent = coordination::gpu_of(g);
    std::set<std::string> siblings;  // keys of its holders in the holder's CUDA process
    for (const Line& l : lines) {
        if (l.kind == LineKind::kBad && (l.word == g || l.word == parent)) {
            o.blocked = true;
            o.blocked_by.push_back(l.number);
        }
        if (l.kind == LineKind::kEntry && orphaned(l.entry) && coordination::excludes(l.entry, g))
            o.orphans.push_back({l.entry.pid, l.entry.tm, l.entry.index});
        if (l.kind != LineKind::kEntry || !l.entry.alive || !coordination::excludes(l.entry, g)) continue;
        if (l.entry.index != g) {
            if (o.excluded_by.empty()) o.excluded_by = describe(l.entry) + " (binds " + l.entry.index + ")";
            continue;
        }
        if (view.holders(l.entry)) continue;
        const std::string key = view.key(l.entry);
        if (o.holders.insert(key).second) o.who.push_back(describe(l.entry));
        if (view.same_cuda_process(l.entry)) siblings.insert(key);
        o.limit = std::min(o.limit, l.entry.share == 0 ? 1u : l.entry.share);
        std::uint64_t& request = o.request_of[key];
        request = std::max(request, l.entry.memory);
    }
    for (const auto& [key, request] : o.request_of) {
        o.requested = saturating_add(o.requested, request);
        if (siblings.count(key)) o.siblings_requested = saturating_add(o.siblings_requested, request);
    }
    return o;
}

// The offers that take the holder with `request`: the best rank first, then least-bound (pack: most-bound);
// `offers` is in index order,
// so a stable sort keeps the lowest index among equals.
std::vector<const Offer*> open_offers(const std::vector<Offer>& offers, std::uint64_t request,
                                      const coordination::IndexRanks& rank_of, bool pack) {
    std::vector<const Offer*> open;
    for (const Offer& o : offers) {
        if (!o.blocked && o.excluded_by.empty() && o.holders.size() + 1 <= o.limit && o.fits(request))
            open.push_back(&o);
    }
    auto rank = [&rank_of](const Offer* o) { return rank_of.of(o->index); };
    std::stable_sort(open.begin(), open.end(), [&rank, pack](const Offer* a, const Offer* b) {
        if (rank(a) != rank(b)) return rank(a) < rank(b);
        return pack ? a->holders.size() > b->holders.size() : a->holders.size() < b->holders.size();
    });
    return open;
}

// The one MIG unit the holder's process binds already, if any (CUDA uses one per process).
std::string process_unit_of(const std::vector<Line>& lines, const View& view) {
    std::vector<std::string> process_units;
    for (const Line& l : lines) {
        if (l.kind == LineKind::kEntry && coordination::unit_gpu(l.entry.index, nullptr) &&
            view.same_cuda_process(l.entry))
            process_units.push_back(l.entry.index);
    }
    sort_indices(&process_units);
    return process_units.empty() ? std::string() : process_units.front();
}

// What a bind takes of the open offers for `need` more GPUs: in their order, at most one MIG unit for the holder's
// process (*process_unit: the one it binds, or takes now; *skipped_unit: another was passed over for it); with
// `links` and no MIG unit among them, the best joined set of the last rank needed, `mine` among its members.
std::vector<std::string> choose_take(const std::vector<const Offer*>& open, std::size_t need,
                                     const coordination::IndexRanks& rank_of, const topology::Links* links,
                                     const std::vector<std::string>& mine, std::string* process_unit,
                                     bool* skipped_unit) {
    std::vector<std::string> take;
    const bool units =
        std::any_of(open.begin(), open.end(), [](const Offer* o) { return coordination::unit_gpu(o->index, nullptr); });
    if (links != nullptr && !units) {
        std::vector<topology::Candidate> ordered;
        for (const Offer* o : open) ordered.push_back({o->index, rank_of.of(o->index)});
        for (const std::size_t i : topology::choose_set(*links, mine, ordered, need)) take.push_back(ordered[i].index);
        return take;
    }
    for (const Offer* o : open) {
        if (need == 0) break;
        if (coordination::unit_gpu(o->index, nullptr)) {
            if (!process_unit->empty() && o->index != *process_unit) {
                *skipped_unit = true;
                continue;
            }
            *process_unit = o->index;
        }
        take.push_back(o->index);
        --need;
    }
    return take;
}

// The GPUs a bind offers beyond those the holder binds already, and what it takes of them.
struct Choice {
    std::vector<Offer> offers;  // in index order
    std::vector<std::string> take;
    std::string process_unit;   // the MIG unit of the holder's process, if any
    bool skipped_unit = false;  // another MIG unit was passed over for it
};

Choice choose(const std::vector<Line>& lines, const View& view, const std::vector<std::string>& gpus,
              const Bound& bound, std::uint32_t holders_per_gpu, const std::map<std::string, GpuMemory>& memory_of,
              const coordination::IndexRanks& rank_of, std::uint64_t request, std::size_t need,
              const Placement& placement) {
    Choice c;
    for (const std::string& g : gpus) {
        if (!bound.mine_set.count(g)) c.offers.push_back(offer_of(g, lines, view, holders_per_gpu, memory_of));
    }
    const std::vector<const Offer*> open = open_offers(c.offers, request, rank_of, placement.pack);
    c.process_unit = process_unit_of(lines, view);
    c.take = choose_take(open, need, rank_of, placement.links, bound.mine, &c.process_unit, &c.skipped_unit);
    return c;
}

// How a shortage names GPU `o`: who binds it, and with a request what of its memory is requested and free.
std::string offer_text(const Offer& o, std::uint64_t request) {
    std::string part = "GPU " + o.index;
    if (o.blocked) {
        std::vector<std::string> numbers;
        for (std::size_t n : o.blocked_by) numbers.push_back(std::to_string(n));
        part += " is blocked by line" + std::string(numbers.size() == 1 ? " " : "s ") + coordination::join(numbers) +
                ", which cannot be parsed";
    } else if (!o.excluded_by.empty()) {
        part += " is taken by " + o.excluded_by;
    } else if (o.holders.empty()) {
        part += " is free";
    } else {
        part += " is bound by " + coordination::join(o.who) + " (" + std::to_string(o.holders.size()) + " of at most " +
                std::to_string(o.limit) + ")";
    }
    if (request > 0 && !o.blocked && o.excluded_by.empty()) {
        if (!o.memory.total || !o.memory.free) {
            part += ", its memory not known (NVML did not read it)";
        } else {
            part += std::string(", ") + (o.requested == 0 ? "none" : format_memory_size(o.requested)) + " of its " +
                    format_memory_size(*o.memory.total) + " requested, " + format_memory_size(*o.memory.free) + " free";
        }
    }
    return part;
}

// What to do about a shortage: end the orphans on GPUs short of memory (into *orphans: they hold what the request
// lacks), else ask for less; correct a line that cannot be parsed, which blocks its GPU whatever is asked.
std::string shortage_advice(const coordination::Options& opts, std::size_t count, const std::vector<std::string>& gpus,
                            std::uint64_t request, const std::vector<Offer>& offers, std::vector<Orphan>* orphans) {
    std::string msg;
    std::set<std::pair<pid_t, std::string>> named;
    for (const Offer& o : offers) {
        if (request == 0 || o.fits(request)) continue;
        for (const Orphan& orphan : o.orphans) {
            if (!named.insert({orphan.pid, orphan.index}).second) continue;
            msg += " " + orphan_text(orphan.pid, orphan.taskmanager, orphan.index) + ": end it (kill " +
                   std::to_string(orphan.pid) + ").";
            orphans->push_back(orphan);
        }
    }
    const bool memory_known = std::any_of(offers.begin(), offers.end(), [](const Offer& o) {
        return o.memory.total.has_value() && o.memory.free.has_value();
    });
    const bool any_blocked = std::any_of(offers.begin(), offers.end(), [](const Offer& o) { return o.blocked; });
    const bool only_blocked =
        count <= gpus.size() && std::all_of(offers.begin(), offers.end(), [](const Offer& o) { return o.blocked; });
    if (request > 0 && memory_known && !only_blocked && orphans->empty()) {
        msg += " Ask for less memory, run fewer subtasks per GPU, or give the TaskManager more GPUs.";
    }
    if (any_blocked) {
        msg +=
            " A line that cannot be parsed blocks its GPU for every holder: correct or delete it by hand "
            "(flink-gpu coordination show --file " +
            opts.path + " lists such lines).";
    }
    return msg;
}

// kNotEnough for a bind of `count` GPUs that `c` cannot meet: what was asked, each offer, what the holder binds
// already, the MIG unit rule when it passed a unit over, and what to do.
Status shortage(const coordination::Options& opts, const Holder& holder, const std::vector<std::string>& gpus,
                std::size_t count, std::uint32_t holders_per_gpu, std::uint64_t request,
                const std::vector<std::string>& mine, const Choice& c, std::vector<Orphan>* orphans) {
    std::string msg = "Could not bind " + std::to_string(count) + " GPU" + (count == 1 ? "" : "s") + " to " +
                      describe(holder) + " with at most " + std::to_string(holders_per_gpu) + " holder" +
                      (holders_per_gpu == 1 ? "" : "s") + " per GPU";
    if (request > 0) msg += " and " + format_memory_size(request) + " of memory on each";
    msg += ": ";
    if (count > gpus.size()) {
        msg += "it was given " + std::string(gpus.empty() ? "no GPUs"
                                                          : "only " + std::to_string(gpus.size()) + " (" +
                                                                coordination::join(gpus) + ")");
        if (!gpus.empty()) msg += ": ";
    }
    for (std::size_t i = 0; i < c.offers.size(); ++i) msg += (i == 0 ? "" : "; ") + offer_text(c.offers[i], request);
    if (!mine.empty()) {
        msg += std::string("; it binds GPU") + (mine.size() == 1 ? " " : "s ") + coordination::join(mine) + " already";
    }
    if (c.skipped_unit) {
        msg += holder.slot.empty()
                   ? "; a process binds at most one MIG unit (CUDA uses one MIG instance per process)"
                   : "; the slots of one TaskManager process share at most one MIG unit, " + c.process_unit +
                         " (CUDA uses one MIG instance per process: bind MIG units from separate processes, "
                         "e.g. PyFlink's process mode, to give each slot its own)";
    }
    msg += "." + shortage_advice(opts, count, gpus, request, c.offers, orphans);
    msg += " Bindings file: " + opts.path + ".";
    return failure(StatusCode::kNotEnough, msg);
}

// The holder's binding topped up with `take`: in index order.
std::vector<std::string> topped_up(const std::vector<std::string>& mine, const std::vector<std::string>& take) {
    std::vector<std::string> result = mine;
    result.insert(result.end(), take.begin(), take.end());
    sort_indices(&result);
    return result;
}

// The lines a bind writes for `result`: of the GPUs the calling thread has no line for (new ones, and for a slot's
// thread the GPUs of the slot).
std::vector<std::string> unwritten(const std::vector<std::string>& result, const Bound& bound) {
    std::vector<std::string> write;
    for (const std::string& idx : result) {
        if (!bound.by_caller.count(idx)) write.push_back(idx);
    }
    return write;
}

// Dead holders' lines go; an orphan's stay while it runs, counting for nothing, to name it where the memory it still
// uses is short (here, `flink-gpu list`, doctor).
void drop_dead(std::vector<Line>* lines) {
    for (Line& l : *lines) {
        if (l.kind == LineKind::kEntry && !l.entry.alive && !orphaned(l.entry)) l.keep = false;
    }
}

BindResult bind_impl(const coordination::Options& opts, const Holder& holder, const std::vector<std::string>& gpus_in,
                     std::size_t count, std::uint32_t holders_per_gpu, const std::vector<int>& ranks,
                     const MemoryRequest& memory, const Placement& placement) {
    BindResult r;
    if (!(r.status = validate(holder, holders_per_gpu)).ok()) return r;
    std::vector<std::string> gpus;
    if (!(r.status = coordination::validate_indices(gpus_in, &gpus)).ok()) return r;
    coordination::IndexRanks rank_of;
    if (!(r.status = rank_of.assign(gpus_in, ranks)).ok()) return r;
    std::map<std::string, GpuMemory> memory_of;
    if (!(r.status = memory_by_index(gpus_in, memory, &memory_of)).ok()) return r;
    if (count == 0) return r;

    coordination::LineJudge live(nullptr);  // leases once the file is locked, as in coordination::claim
    const coordination::ProcInfo holder_info = live.process(holder.pid);
    if (!holder_info.exists) {
        r.status =
            failure(StatusCode::kInvalidArgument, "Cannot bind GPUs to " + describe(holder) + ": it does not exist.");
        return r;
    }
    coordination::LockedFile file;
    bool exists = false;
    std::string text;
    if (!(r.status = coordination::open_and_read(opts, coordination::Access::kCreate, &file, &exists, &text)).ok())
        return r;
    r.file_identity = file.identity();
    r.start_time = holder_info.has_start_time ? holder_info.start_time : 0;
    std::vector<Line> lines = coordination::parse_file(text);
    coordination::Leases leases(opts.path);
    live.use(&leases);
    coordination::mark_alive(&lines, &live);
    r.unparsable = coordination::bad_lines(lines);
    const View view(holder, &live, holder_info);

    const Bound bound = bound_already(lines, view, gpus);
    if (!(r.status = keep_request(opts, holder, memory, bound, &r.memory)).ok()) return r;
    std::vector<std::string> take;
    if (bound.mine.size() >= count) {
        r.indices.assign(bound.mine.begin(), bound.mine.begin() + static_cast<std::ptrdiff_t>(count));
    } else {
        Choice c = choose(lines, view, gpus, bound, holders_per_gpu, memory_of, rank_of, r.memory,
                          count - bound.mine.size(), placement);
        if (bound.mine.size() + c.take.size() < count) {
            r.status = shortage(opts, holder, gpus, count, holders_per_gpu, r.memory, bound.mine, c, &r.orphans);
            return r;
        }
        take = std::move(c.take);
        r.indices = topped_up(bound.mine, take);
    }
    const std::vector<std::string> write = unwritten(r.indices, bound);
    if (write.empty()) return r;
    drop_dead(&lines);
    r.status = coordination::write_lines(&file, text, &lines, &leases, view.identity(), leases_for(holder, live.self()),
                                         coordination::LineTerms{holders_per_gpu, r.memory}, write, &r.lease_problem);
    if (!r.status.ok()) {
        r.indices.clear();
        return r;
    }
    r.added = std::move(take);
    sort_indices(&r.added);
    return r;
}

coordination::ReleaseResult unbind_impl(const coordination::Options& opts, const Holder& holder) {
    coordination::ReleaseResult r;
    if (!(r.status = validate(holder, 1)).ok()) return r;
    coordination::LockedFile file;
    bool exists = false;
    std::string text;
    const pid_t self = coordination::own_pid();
    if (!(r.status = coordination::open_and_read(opts, coordination::Access::kWriteExisting, &file, &exists, &text))
             .ok() ||
        !exists) {
        return r;
    }
    std::vector<Line> lines = coordination::parse_file(text);
    coordination::Leases leases(opts.path);
    const coordination::PidNamespace ns = coordination::own_pid_namespace(self);
    std::set<std::string> released;
    for (Line& l : lines) {
        if (l.kind != LineKind::kEntry) continue;
        const Entry& e = l.entry;
        if (e.slot != holder.slot || (!holder.slot.empty() && e.tm != holder.taskmanager)) continue;
        if (!e.records(holder.pid, holder.pid == self, ns)) continue;
        if (holder.start_time != 0 && e.has_start_time && e.start_time != holder.start_time) continue;
        l.keep = false;
        released.insert(e.index);
    }
    if (!(r.status = coordination::remove_lines(&file, text, lines, &leases, self)).ok()) return r;
    r.released.assign(released.begin(), released.end());
    sort_indices(&r.released);
    return r;
}

}  // namespace

BindResult bind(const coordination::Options& opts, const Holder& holder, const std::vector<std::string>& gpus,
                std::size_t count, std::uint32_t holders_per_gpu, const std::vector<int>& ranks,
                const MemoryRequest& memory, const Placement& placement) noexcept {
    return coordination::guarded<BindResult>(
        [&] { return bind_impl(opts, holder, gpus, count, holders_per_gpu, ranks, memory, placement); });
}

coordination::ReleaseResult unbind(const coordination::Options& opts, const Holder& holder) noexcept {
    return coordination::guarded<coordination::ReleaseResult>([&] { return unbind_impl(opts, holder); });
}

}  // namespace binding
}  // namespace flinkgpu
