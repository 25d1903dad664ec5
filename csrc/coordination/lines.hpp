// The line format of the coordination file and the bindings file, pure: no I/O. docs/design.md §5.2
// (File format) is its one description: the fields, their order and values, and what makes a line
// unparsable; the MIG unit lines and the exclusion rule are there too.
#pragma once

#include "base/status.hpp"
#include "coordination/identity.hpp"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flinkgpu {
namespace coordination {

// One parsed line `<index> <pid>[\t<start time>][\tkey=value]...`: its holder (coordination/identity.hpp) and
// what it holds.
struct Entry : HolderIdentity {
    std::size_t line_number = 0;  // 1-based
    std::string index;            // what the line holds: its first word, or for a MIG unit's line its `mig` value
    std::string gpu;              // the GPU: the line's first word, a unit's parent
    std::uint32_t share = 0;      // the bindings file's `share`; 0: not recorded
    std::uint64_t memory = 0;     // the bindings file's `mem`: bytes the holder requested of the GPU; 0: none
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

// An index as NVML/nvidia-smi prints it: a non-empty word of printable ASCII without spaces. One of
// digits and colons only must be a GPU's number without a leading zero ("0", "12"; never "00") or a MIG
// unit's (unit_gpu): one spelling per GPU and unit, so that no spelling of GPU 0 escapes the exclusion of
// another (docs/design.md §5.2). Other words ("GPU-a", "card:0") are another discovery's opaque names.
bool valid_index(const std::string& s);

// Whether `index` is a MIG unit's, "<gpu>:<slot>" (both numbers without a leading zero: "0:1", never
// "00:01", "0:" or "0:1:2"); its GPU's index into *gpu.
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

// kInvalidArgument unless 1 <= `n` <= kMaxShare: "Invalid <what> <n>: it must be 1 to 1024." `written`: the
// value as the caller wrote it where `n` could not hold it ("": `n`).
Status check_share(long long n, const char* what, const std::string& written = "");

// A slot id as a bindings line may name it: 1 to 128 of [A-Za-z0-9_.:-] (a Flink allocation id is 32
// hex digits).
bool valid_slot(const std::string& s);

// The largest lease slot a line may name (a byte offset of the lease file).
inline constexpr std::uint32_t kMaxLeaseSlot = 65535;

// The largest memory request a bindings line may record (bytes): Flink's MemorySize is a Java long.
inline constexpr std::uint64_t kMaxMemoryRequest = 9223372036854775807ULL;

// kInvalidArgument when `bytes` > kMaxMemoryRequest: "Invalid <what> <written>: it must be at most
// 9223372036854775807 bytes." `written`: the value as the caller wrote it ("": "of <bytes> bytes").
Status check_memory_request(std::uint64_t bytes, const char* what, const std::string& written = "");

// The line recording `holder` for `index`: `<index> <pid>`, then a tab before each field it knows
// (`share` and `memory`: the bindings file's, 0 for none).
Line new_line(const std::string& index, const HolderIdentity& holder, std::uint32_t share = 0,
              std::uint64_t memory = 0);

}  // namespace coordination
}  // namespace flinkgpu
