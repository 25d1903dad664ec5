// The steps every policy over a file of coordination lines takes (the coordination file's, coordination/claims.cpp;
// the bindings file's, coordination/bindings.cpp): check the caller's input, lock and read the file, judge its lines,
// lease the calling process, and keep exceptions from crossing the API. One implementation of each, shared.
#pragma once

#include "base/process_id.hpp"
#include "base/status.hpp"
#include "coordination/claims.hpp"
#include "coordination/file.hpp"
#include "coordination/lease.hpp"
#include "coordination/lines.hpp"
#include "coordination/liveness.hpp"

#include <cerrno>
#include <cstdint>
#include <map>
#include <new>
#include <string>
#include <vector>

namespace flinkgpu {
namespace coordination {

// Judges every entry of `lines`.
void mark_alive(std::vector<Line>* lines, LineJudge* judge);

// Whether a kept line of `self` names this lease slot (a line of another pid naming it never keeps our
// lease, and with it that line, alive). A slot thread's line (coordination/bindings.hpp) names its thread, not `self`:
// it counts by the slot alone, which only the lease's holder writes (a slot is taken only when no line
// names it).
bool slot_in_use(const std::vector<Line>& lines, std::uint32_t slot, pid_t self);

// The identity new lines record for the process (or thread) `pid` probed as `info`: its start time and
// our namespace; `tm` and `slot` for a binding.
HolderIdentity new_holder(pid_t pid, const ProcInfo& info, const PidNamespace& ours, pid_t tm = 0,
                          const std::string& slot = std::string());

// What a bindings line records beside its holder (coordination/lines.hpp's `share` and `mem`; 0: none,
// as a claim's lines have).
struct LineTerms {
    std::uint32_t share = 0;
    std::uint64_t memory = 0;
};

// The one tail of a claim and a bind: appends a line per index of `write` for `holder` (with `terms`) to
// the kept `lines` and rewrites the file. With `lease`, the calling process's lease goes into the lines first (one that
// cannot be had leaves them without, one whose lease file has no token gives them `lf=none`; either way
// the reason is in *lease_problem, and they are judged by pid in our namespace, of unknown liveness to
// other namespaces). A write that fails leaves the file as it was, and a lease no line names idle.
Status write_lines(LockedFile* file, const std::string& old_text, std::vector<Line>* lines, Leases* leases,
                   HolderIdentity holder, bool lease, const LineTerms& terms, const std::vector<std::string>& write,
                   Status* lease_problem);

// The one tail of a release and an unbind: rewrites the file without the lines marked not kept, when any
// is; then this process's lease (`self`), when no kept line names it, is idle (coordination/lease.hpp).
Status remove_lines(LockedFile* file, const std::string& old_text, const std::vector<Line>& lines, Leases* leases,
                    pid_t self);

// "a, b, c".
std::string join(const std::vector<std::string>& v);

// `text` for a message: printable ASCII as is, every other byte as \xNN (a caller's bytes must not
// break lines or drive a terminal).
std::string printable(const std::string& text);

// The valid, distinct `indices` into *out, in index order; kInvalidArgument naming a bad one.
Status validate_indices(const std::vector<std::string>& indices, std::vector<std::string>* out);

// The ranks a caller gives for its GPU indices (nvml/choice.hpp's ranks, parallel to the indices; none: all
// 0): the best one given for each index.
class IndexRanks {
public:
    // kInvalidArgument unless `ranks` is empty or one per index.
    Status assign(const std::vector<std::string>& indices, const std::vector<int>& ranks);
    int of(const std::string& index) const;

private:
    std::map<std::string, int> best_;
};

// kInvalidArgument unless `pid` is a positive process (or thread) id; `what` names it in the message: the one
// pid rule (base/process_id.hpp).
inline Status validate_pid(pid_t pid, const char* what) { return check_pid(pid, what); }

// Opens and locks the file for `access`, then reads it. `*exists` is false (and nothing is read) when an
// existing file was asked for and there is none.
Status open_and_read(const Options& opts, Access access, LockedFile* file, bool* exists, std::string* text);

// Runs `body` so that nothing escapes: std::bad_alloc (or anything else) becomes a Status.
template <typename Result, typename Body>
Result guarded(Body body) noexcept {
    Result r;
    try {
        return body();
    } catch (const std::bad_alloc&) {
        r.status = failure(StatusCode::kOutOfMemory, "out of memory", ENOMEM);
    } catch (...) {
        r.status = failure(StatusCode::kInternal, "internal error");
    }
    return r;
}

}  // namespace coordination
}  // namespace flinkgpu
