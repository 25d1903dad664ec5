// The line format of the coordination file (docs/design.md §5.2), pure: no I/O.
//
// A line is `<index> <pid>`, as Flink's stock script writes it, optionally followed by a tab and the
// owner's start time (field 22 of /proc/<pid>/stat), which we add so that a recycled pid does not keep
// a GPU owned forever. The stock script reads only two fields (`awk '{print $2}'` splits on tabs too),
// and the tab keeps its unanchored `sed "/<index> /d"` from matching inside our lines. Blank lines are
// kept; a line that is neither an entry nor blank is kept byte for byte and its first word blocks
// that index.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flinkgpu {
namespace coordination {

// One parsed line `<index> <pid>[ <start time>]`.
struct Entry {
    std::size_t line_number = 0;  // 1-based
    std::string index;
    pid_t pid = 0;
    bool has_start_time = false;
    std::uint64_t start_time = 0;  // clock ticks since boot, as in /proc/<pid>/stat
    bool alive = false;            // not part of the line: filled from process liveness
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

// The file's lines, split at '\n' (a last line without one included).
std::vector<Line> parse_file(const std::string& text);

// The kept lines, each ended by '\n'.
std::string serialize(const std::vector<Line>& lines);

std::vector<BadLine> bad_lines(const std::vector<Line>& lines);

// The line recording `owner` for `index`: `<index> <pid>\t<start time>` when the start time is known.
Line new_line(const std::string& index, pid_t owner, bool has_start_time, std::uint64_t start_time);

}  // namespace coordination
}  // namespace flinkgpu
