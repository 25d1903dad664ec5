// libFuzzer target for the coordination file's line format (csrc/coordination/lines.*,
// docs/design.md §5.2): pure parsing, no file. Besides "no crash, no hang, no sanitizer report",
// every input is checked against the format's contract:
//   * parse then serialize gives the input back byte for byte (plus a final '\n' where it lacked one);
//   * lines are numbered 1, 2, ... and never contain '\n';
//   * a blank line holds only spaces, tabs and '\r'; an entry's GPU (or its unit index) starts its line
//     followed by a space, its index is that GPU or (a MIG unit's line) "<GPU>:<slot>", and its pid is in
//     1..INT_MAX; a bad line's word is its first word;
//   * an entry excludes its own index and its GPU; a unit's entry excludes no other unit of its GPU;
//   * the lines of the entries, rebuilt with new_line(), parse back to the same entry (namespace,
//     lease and the bindings fields tm, share, mem and slot included), and hold no "<digit><space>"
//     after the pid (the stock script's unanchored `sed "/$i /d"` never matches inside them); a lease
//     names a slot up to kMaxLeaseSlot;
//   * dropping any subset of lines and parsing the result gives the kept lines, in order, unchanged.
#include <climits>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "coordination/lines.hpp"

namespace co = flinkgpu::coordination;

namespace {

[[noreturn]] void fail(const char* what, const std::string& detail = "") {
    std::fprintf(stderr, "contract violated: %s %s\n", what, detail.c_str());
    std::abort();
}

bool same_entry(const co::Entry& a, const co::Entry& b) {
    return a.index == b.index && a.gpu == b.gpu && a.pid == b.pid && a.has_start_time == b.has_start_time &&
           a.start_time == b.start_time && a.has_ns == b.has_ns && a.ns == b.ns && a.has_lease == b.has_lease &&
           a.lease == b.lease && (a.has_lease ? a.lease_file : "") == (b.has_lease ? b.lease_file : "") &&
           a.tm == b.tm && a.share == b.share && a.memory == b.memory && a.slot == b.slot;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string text(reinterpret_cast<const char*>(data), size);
    std::vector<co::Line> lines = co::parse_file(text);

    std::string expected = text;
    if (!expected.empty() && expected.back() != '\n') expected += '\n';
    if (co::serialize(lines) != expected) fail("serialize(parse_file(text)) is not the text");

    std::size_t bad = 0;
    for (std::size_t i = 0; i < lines.size(); ++i) {
        const co::Line& l = lines[i];
        if (l.number != i + 1) fail("lines are not numbered in order");
        if (l.raw.find('\n') != std::string::npos) fail("a line contains '\\n'");
        if (!l.keep) fail("a parsed line is not kept");
        switch (l.kind) {
            case co::LineKind::kBlank:
                if (l.raw.find_first_not_of(" \t\r") != std::string::npos) fail("a blank line is not blank", l.raw);
                break;
            case co::LineKind::kEntry: {
                const co::Entry& e = l.entry;
                if (e.line_number != l.number) fail("an entry's line number differs from its line's");
                if (!co::valid_index(e.index) || !co::valid_index(e.gpu)) fail("an entry with an invalid index", l.raw);
                if (l.raw.compare(0, e.gpu.size() + 1, e.gpu + " ") != 0 &&
                    l.raw.compare(0, e.index.size() + 1, e.index + " ") != 0) {
                    fail("neither an entry's GPU nor its index starts its line followed by a space", l.raw);
                }
                std::string parent;
                const bool unit = e.index != e.gpu;
                if (unit && !(co::unit_gpu(e.index, &parent) && parent == e.gpu)) {
                    fail("an entry's index is neither its GPU nor a unit of it", l.raw);
                }
                if (!co::excludes(e, e.index) || !co::excludes(e, e.gpu))
                    fail("an entry does not exclude itself", l.raw);
                if (unit && co::excludes(e, e.gpu + ":" + e.index.substr(e.gpu.size() + 1) + "0")) {
                    fail("a unit's entry excludes another unit of its GPU", l.raw);
                }
                if (e.pid <= 0) fail("an entry without a positive pid", l.raw);
                if (e.alive) fail("parsing decided liveness");
                if (e.has_lease && e.lease > co::kMaxLeaseSlot) fail("a lease beyond the last slot", l.raw);
                co::HolderIdentity holder;
                holder.pid = e.pid;
                holder.has_start_time = e.has_start_time;
                holder.start_time = e.start_time;
                holder.has_ns = e.has_ns;
                holder.ns = e.ns;
                holder.has_lease = e.has_lease;
                holder.lease = e.lease;
                holder.lease_file = e.lease_file;
                holder.tm = e.tm;
                holder.slot = e.slot;
                const co::Line rebuilt = co::new_line(e.index, holder, e.share, e.memory);
                if (rebuilt.raw.find(' ', e.gpu.size() + 1) != std::string::npos) {
                    fail("new_line() wrote a space after the pid", rebuilt.raw);
                }
                const std::vector<co::Line> again = co::parse_file(rebuilt.raw);
                if (again.size() != 1 || again[0].kind != co::LineKind::kEntry || !same_entry(again[0].entry, e) ||
                    !same_entry(rebuilt.entry, e)) {
                    fail("new_line() of an entry does not parse back to it", rebuilt.raw);
                }
                break;
            }
            case co::LineKind::kBad: {
                ++bad;
                const std::size_t begin = l.raw.find_first_not_of(" \t");
                const std::size_t end = begin == std::string::npos ? begin : l.raw.find_first_of(" \t", begin);
                const std::string first = begin == std::string::npos ? std::string() : l.raw.substr(begin, end - begin);
                if (l.word != first) fail("a bad line's word is not its first word", l.raw);
                break;
            }
        }
    }
    if (co::bad_lines(lines).size() != bad) fail("bad_lines() lists a different number of lines");

    // Drop every line whose number has the bit the input's first byte selects.
    const unsigned bit = size > 0 ? data[0] % 8 : 0;
    std::vector<std::string> kept;
    for (co::Line& l : lines) {
        l.keep = ((l.number >> bit) & 1) == 0;
        if (l.keep) kept.push_back(l.raw);
    }
    const std::vector<co::Line> reparsed = co::parse_file(co::serialize(lines));
    if (reparsed.size() != kept.size()) fail("dropping lines changed the other lines' count");
    for (std::size_t i = 0; i < kept.size(); ++i) {
        if (reparsed[i].raw != kept[i]) fail("dropping lines changed a kept line", kept[i]);
    }
    return 0;
}
