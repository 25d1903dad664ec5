// The line format of the coordination file (docs/design.md §5.2), pure: no I/O.
//
// A line is `<index> <pid>`, as Flink's stock script writes it, optionally followed by a tab and the
// owner's start time (field 22 of /proc/<pid>/stat), which we add so that a recycled pid does not keep
// a GPU owned forever, then by tab-separated `key=value` fields (docs/design.md §9.4):
//
//   <index> <pid>\t<start time>\tns=<pid namespace inode>[\tlease=<slot>\tlf=<token>][\tmig=<gpu>:<slot>]
//
// The bindings file (binding.hpp, docs/design.md §9.3) uses the same lines with three more fields:
// `tm=<pid>` (the process whose GPUs are bound, its TaskManager), `share=<k>` (how many holders the
// binder lets share the GPU) and `slot=<id>` (a Flink slot bound from a thread: the line's pid is then
// the binding thread's id, and its start time that thread's).
//
// A MIG unit's line (docs/design.md §5.2, §9.2) starts with its GPU's index and names the unit in `mig`:
// the stock script, which knows only GPUs, sees that GPU recorded while a unit of it is held (one line:
// its owner is the live holder; two or more: its `[ -n $owner ]` fails and it reclaims nothing).
//
// `ns` is the pid namespace in which <pid> means something (the writer's), `lease` the byte of the lease
// file the owner keeps locked while it lives and `lf` the token of that lease file (coordination_lease.hpp:
// a lease proves nothing on another lease file). Unknown keys are kept and ignored,
// so later versions can add fields; a known key with a bad value, or given twice, makes the line
// unparsable (kept, its index never reclaimed). The stock script reads only two fields (`awk '{print
// $2}'` splits on tabs too), and the tabs keep its unanchored `sed "/<index> /d"` from matching inside
// our lines: no field we write holds "<digit><space>". Blank lines are kept; a line that is neither an
// entry nor blank is kept byte for byte and its first word blocks that index.
#pragma once

#include "holder_identity.hpp"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flinkgpu {
namespace coordination {

// One parsed line `<index> <pid>[\t<start time>][\tkey=value]...`: its holder (holder_identity.hpp) and
// what it holds.
struct Entry : HolderIdentity {
    std::size_t line_number = 0;  // 1-based
    std::string index;  // what the line holds: its first word, or for a MIG unit's line its `mig` value
    std::string gpu;    // the GPU: the line's first word, a unit's parent
    std::uint32_t share = 0;  // the bindings file's `share`; 0: not recorded
    // Not part of the line: filled from the judge.
    Verdict verdict = Verdict::kGone;
    bool alive = false;
};

// A line that is neither an entry nor blank. Kept as is; its first word blocks that index.
struct BadLine {
    std::size_t line_number = 0;
    std::string text;
};

enum class LineKind { kEntry, kBlank, kBad };

struct Line {
    LineKind kind = LineKind::kBad;
    std::size_t number = 0;  // 1-based
    std::string raw;         // without the '\n'
    std::string word;        // kBad: the first word, which blocks that index
    Entry entry;             // kEntry
    bool keep = true;        // serialize() writes only the lines kept
};

// An index as NVML/nvidia-smi prints it: a non-empty word of printable ASCII without spaces.
bool valid_index(const std::string& s);

// Whether `index` is a MIG unit's, "<gpu>:<slot>" (both all digits); its GPU's index into *gpu.
bool unit_gpu(const std::string& index, std::string* gpu);

// The GPU of an index: a unit's parent, else the index itself.
std::string gpu_of(const std::string& index);

// Whether a live line `e` keeps `index` from being claimed by another: the same index, or the same
// GPU where one of the two is the whole GPU (two units of one GPU do not exclude each other).
bool excludes(const Entry& e, const std::string& index);

// The file's lines, split at '\n' (a last line without one included).
std::vector<Line> parse_file(const std::string& text);

// The kept lines, each ended by '\n'.
std::string serialize(const std::vector<Line>& lines);

std::vector<BadLine> bad_lines(const std::vector<Line>& lines);

// The most holders a binding lets share one GPU.
inline constexpr std::uint32_t kMaxShare = 1024;

// A slot id as a bindings line may name it: 1 to 128 of [A-Za-z0-9_.:-] (a Flink allocation id is 32
// hex digits).
bool valid_slot(const std::string& s);

// The largest lease slot a line may name (a byte offset of the lease file).
inline constexpr std::uint32_t kMaxLeaseSlot = 65535;

// The line recording `holder` for `index`: `<index> <pid>`, then a tab before each field it knows
// (`share`: the bindings file's, 0 for none).
Line new_line(const std::string& index, const HolderIdentity& holder, std::uint32_t share = 0);

}  // namespace coordination
}  // namespace flinkgpu
