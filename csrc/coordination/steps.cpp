// See coordination/steps.hpp.
#include "coordination/steps.hpp"

#include "base/gpu_index.hpp"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>

namespace flinkgpu {
namespace coordination {

void mark_alive(std::vector<Line>* lines, LineJudge* judge) {
    for (Line& l : *lines) {
        if (l.kind == LineKind::kEntry) judge->judge(&l.entry);
    }
}

bool slot_in_use(const std::vector<Line>& lines, std::uint32_t slot, pid_t self) {
    for (const Line& l : lines) {
        if (l.keep && l.kind == LineKind::kEntry && l.entry.has_lease && l.entry.lease == slot &&
            (l.entry.pid == self || !l.entry.slot.empty())) {
            return true;
        }
    }
    return false;
}

namespace {

// Marks this process's lease idle when no kept line of `lines` names it.
void idle_unless_named(const std::vector<Line>& lines, Leases* leases, pid_t self) {
    std::uint32_t slot = 0;
    if (leases->held(&slot) && !slot_in_use(lines, slot, self)) leases->set_idle();
}

// Whether `e` is a line of this process (`self`, as new_holder() names it): its own, or one of its slot
// threads' (coordination/bindings.hpp: a thread of this process now, with the thread's start time). The byte and token
// of a lease do not say so: two lease files without a token each give some holder the same byte, `lf=none`.
bool line_of(const Entry& e, const HolderIdentity& self, const PidNamespace& ours) {
    if (e.slot.empty()) return e.written_for(self, ours);
    if (!e.pid_is_in(ours) || !own_thread(self.pid, e.pid)) return false;
    return e.written_for(new_holder(e.pid, probe_process(e.pid), ours, e.tm, e.slot), ours);
}

// This process's lines of its lease on a lease file since deleted or replaced (or without a token until now)
// get the new lease, so that they die with this process in every namespace.
void move_to_lease(std::vector<Line>* lines, const Leases::Replaced& old, std::uint32_t slot,
                   const std::string& token) {
    const pid_t self = own_pid();
    const PidNamespace ours = own_pid_namespace(self);
    const HolderIdentity process = new_holder(self, probe_process(self), ours);
    for (Line& l : *lines) {
        const Entry& e = l.entry;
        if (!l.keep || l.kind != LineKind::kEntry || !e.has_lease || e.lease != old.slot || e.lease_file.empty() ||
            e.lease_file != old.token || !line_of(e, process, ours))
            continue;
        HolderIdentity moved = e;
        moved.lease = slot;
        moved.lease_file = token;
        Line again = new_line(e.index, moved, e.share, e.memory);
        again.number = l.number;
        again.entry.line_number = e.line_number;
        again.entry.verdict = e.verdict;
        again.entry.alive = e.alive;
        l = std::move(again);
    }
}

}  // namespace

HolderIdentity new_holder(pid_t pid, const ProcInfo& info, const PidNamespace& ours, pid_t tm,
                          const std::string& slot) {
    HolderIdentity h;
    h.pid = pid;
    h.has_start_time = info.has_start_time;
    h.start_time = info.has_start_time ? info.start_time : 0;
    h.has_ns = ours.known;
    h.ns = ours.inode;
    h.tm = tm;
    h.slot = slot;
    return h;
}

Status write_lines(LockedFile* file, const std::string& old_text, std::vector<Line>* lines, Leases* leases,
                   HolderIdentity holder, bool lease, const LineTerms& terms, const std::vector<std::string>& write,
                   Status* lease_problem) {
    if (lease) {
        std::vector<std::uint32_t> named;
        for (const Line& l : *lines) {
            if (l.kind == LineKind::kEntry && l.entry.has_lease) named.push_back(l.entry.lease);
        }
        std::sort(named.begin(), named.end());
        std::uint32_t slot = 0;
        std::string token;
        Leases::Replaced replaced;
        Status token_problem;
        *lease_problem =
            leases->acquire(file->mode(), file->identity(), named, &slot, &token, &replaced, &token_problem);
        if (lease_problem->ok()) {
            holder.has_lease = true;
            holder.lease = slot;
            holder.lease_file = token;
            if (replaced.held) move_to_lease(lines, replaced, slot, token);
            *lease_problem = token_problem;  // leased, but other namespaces cannot rely on it (lf=none)
        }
    }
    const std::size_t before = lines->size();
    for (const std::string& idx : write) lines->push_back(new_line(idx, holder, terms.share, terms.memory));
    Status st = file->rewrite(old_text, serialize(*lines));
    if (!st.ok() && holder.has_lease) {
        lines->resize(before);  // what the file holds: the lines were not written
        idle_unless_named(*lines, leases, own_pid());
    }
    if (st.ok()) leases->close_replaced();  // no line names it any more
    return st;
}

Status remove_lines(LockedFile* file, const std::string& old_text, const std::vector<Line>& lines, Leases* leases,
                    pid_t self) {
    if (std::any_of(lines.begin(), lines.end(), [](const Line& l) { return !l.keep; })) {
        Status st = file->rewrite(old_text, serialize(lines));
        if (!st.ok()) return st;
    }
    idle_unless_named(lines, leases, self);
    return {};
}

std::string join(const std::vector<std::string>& v) {
    std::string out;
    for (const std::string& s : v) {
        if (!out.empty()) out += ", ";
        out += s;
    }
    return out;
}

std::string printable(const std::string& text) {
    std::string shown;
    for (unsigned char c : text) {
        if (c >= 0x20 && c < 0x7f) {
            shown += static_cast<char>(c);
        } else {
            char hex[8];
            std::snprintf(hex, sizeof hex, "\\x%02x", c);
            shown += hex;
        }
    }
    return shown;
}

Status validate_indices(const std::vector<std::string>& indices, std::vector<std::string>* out) {
    std::set<std::string> seen;
    for (const std::string& s : indices) {
        if (!valid_index(s)) {
            return failure(StatusCode::kInvalidArgument,
                           "Invalid GPU index '" + printable(s) +
                               "': an index is a non-empty word of printable "
                               "ASCII without spaces, as nvidia-smi prints it; in numbers, a GPU's without a "
                               "leading zero (e.g. 0) or a MIG unit's <gpu>:<slot> (e.g. 0:1).");
        }
        if (seen.insert(s).second) out->push_back(s);
    }
    sort_indices(out);
    return {};
}

Status IndexRanks::assign(const std::vector<std::string>& indices, const std::vector<int>& ranks) {
    best_.clear();
    if (!ranks.empty() && ranks.size() != indices.size()) {
        return failure(StatusCode::kInvalidArgument, "Got " + std::to_string(ranks.size()) + " ranks for " +
                                                         std::to_string(indices.size()) +
                                                         " GPU indices: give one rank per index.");
    }
    for (std::size_t i = 0; i < ranks.size(); ++i) {
        auto it = best_.emplace(indices[i], ranks[i]).first;
        it->second = std::min(it->second, ranks[i]);
    }
    return {};
}

int IndexRanks::of(const std::string& index) const {
    auto it = best_.find(index);
    return it == best_.end() ? 0 : it->second;
}

Status open_and_read(const Options& opts, Access access, LockedFile* file, bool* exists, std::string* text) {
    Status st = file->open(opts.path, opts.timeout_ms, access, exists);
    if (!st.ok() || !*exists) return st;
    if (!(st = file->read(text)).ok()) return st;
    return refuse_lease_file(opts.path, *text);
}

}  // namespace coordination
}  // namespace flinkgpu
