#include "coordination_lines.hpp"

#include <algorithm>
#include <climits>
#include <utility>

namespace flinkgpu {
namespace coordination {

bool valid_index(const std::string& s) {
    if (s.empty()) return false;
    for (unsigned char c : s) {
        if (c <= 0x20 || c >= 0x7f) return false;
    }
    return true;
}

bool valid_slot(const std::string& s) {
    if (s.empty() || s.size() > 128) return false;
    for (char c : s) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                        c == '.' || c == ':' || c == '-';
        if (!ok) return false;
    }
    return true;
}

bool unit_gpu(const std::string& index, std::string* gpu) {
    const std::size_t colon = index.find(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == index.size()) return false;
    for (std::size_t i = 0; i < index.size(); ++i) {
        if (i != colon && (index[i] < '0' || index[i] > '9')) return false;
    }
    if (gpu != nullptr) *gpu = index.substr(0, colon);
    return true;
}

std::string gpu_of(const std::string& index) {
    std::string gpu;
    return unit_gpu(index, &gpu) ? gpu : index;
}

bool excludes(const Entry& e, const std::string& index) {
    if (e.index == index) return true;
    std::string gpu;
    const bool unit = unit_gpu(index, &gpu);
    if (!unit) gpu = index;
    return e.gpu == gpu && (!unit || e.index == e.gpu);
}

namespace {

bool is_blank_char(char c) { return c == ' ' || c == '\t' || c == '\r'; }

bool parse_decimal(const std::string& s, std::uint64_t max, std::uint64_t* out) {
    if (s.empty() || s.size() > 20) return false;
    std::uint64_t v = 0;
    for (char c : s) {
        if (c < '0' || c > '9') return false;
        const std::uint64_t d = static_cast<std::uint64_t>(c - '0');
        if (v > (max - d) / 10) return false;
        v = v * 10 + d;
    }
    *out = v;
    return true;
}

bool is_key_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-' ||
           c == '.';
}

// Which known keys a line has named, so that none is given twice.
struct SeenKeys {
    bool ns = false, lease = false, lease_file = false, tm = false, share = false, slot = false;
};

// A `key=value` field: the known keys parsed into `e` (false for a bad value or a repeated key), any
// other key accepted and ignored. False when `word` is no key=value field at all.
bool parse_field(const std::string& word, Entry* e, SeenKeys* seen) {
    const std::size_t eq = word.find('=');
    if (eq == std::string::npos || eq == 0) return false;
    for (std::size_t i = 0; i < eq; ++i) {
        if (!is_key_char(word[i])) return false;
    }
    const std::string key = word.substr(0, eq), value = word.substr(eq + 1);
    std::uint64_t v = 0;
    if (key == "ns") {
        if (seen->ns || !parse_decimal(value, UINT64_MAX, &v)) return false;
        seen->ns = e->has_ns = true;
        e->ns = v;
    } else if (key == "mig") {
        // a unit of the line's GPU (checked by the caller): "<gpu>:<slot>", never "<digit><space>"
        if (!e->index.empty() || !unit_gpu(value, nullptr)) return false;
        e->index = value;
    } else if (key == "lease") {
        if (seen->lease || !parse_decimal(value, kMaxLeaseSlot, &v)) return false;
        seen->lease = e->has_lease = true;
        e->lease = static_cast<std::uint32_t>(v);
    } else if (key == "lf") {
        if (seen->lease_file || !valid_lease_file_token(value)) return false;
        seen->lease_file = true;
        e->lease_file = value;
    } else if (key == "tm") {
        if (seen->tm || !parse_decimal(value, INT_MAX, &v) || v == 0) return false;
        seen->tm = true;
        e->tm = static_cast<pid_t>(v);
    } else if (key == "share") {
        if (seen->share || !parse_decimal(value, kMaxShare, &v) || v == 0) return false;
        seen->share = true;
        e->share = static_cast<std::uint32_t>(v);
    } else if (key == "slot") {
        if (seen->slot || !valid_slot(value)) return false;
        seen->slot = true;
        e->slot = value;
    }
    return true;
}

// `<index> <pid>[ <start time>][ key=value]...`: the index starts the line and is followed by a space
// (what the stock script's `grep "^$i "` finds); the rest is split on blanks (its `awk '{print $2}'`).
Line parse_line(std::string raw, std::size_t number) {
    Line line;
    line.number = number;
    line.raw = std::move(raw);
    const std::string& s = line.raw;
    if (std::all_of(s.begin(), s.end(), is_blank_char)) {
        line.kind = LineKind::kBlank;
        return line;
    }
    std::vector<std::string> words;
    std::size_t i = 0;
    while (i < s.size()) {
        while (i < s.size() && (s[i] == ' ' || s[i] == '\t')) ++i;
        std::size_t j = i;
        while (j < s.size() && s[j] != ' ' && s[j] != '\t') ++j;
        if (j > i) words.push_back(s.substr(i, j - i));
        i = j;
    }
    line.kind = LineKind::kBad;
    line.word = words.empty() ? std::string() : words[0];
    const std::size_t space = s.find(' ');
    if (space == std::string::npos || space == 0 || words.size() < 2) return line;
    if (s.compare(0, space, words[0]) != 0 || !valid_index(words[0])) return line;
    std::uint64_t pid = 0, start = 0;
    if (!parse_decimal(words[1], INT_MAX, &pid) || pid == 0) return line;
    Entry& e = line.entry;
    std::size_t next = 2;
    if (words.size() > 2 && parse_decimal(words[2], UINT64_MAX, &start)) {
        e.has_start_time = true;
        e.start_time = start;
        next = 3;
    }
    SeenKeys seen;
    for (; next < words.size(); ++next) {
        if (!parse_field(words[next], &e, &seen)) {
            e = Entry();
            return line;
        }
    }
    if (!e.index.empty() && gpu_of(e.index) != words[0]) {
        e = Entry();
        return line;  // a unit of another GPU than the line's: unreadable, it blocks its first word
    }
    line.kind = LineKind::kEntry;
    e.line_number = number;
    // a line `<gpu>:<slot> <pid>` (not how we write a unit) still holds that unit of that GPU
    e.gpu = e.index.empty() ? gpu_of(words[0]) : words[0];
    if (e.index.empty()) e.index = words[0];
    e.pid = static_cast<pid_t>(pid);
    return line;
}

}  // namespace

std::vector<Line> parse_file(const std::string& text) {
    std::vector<Line> lines;
    std::size_t pos = 0, number = 0;
    while (pos < text.size()) {
        std::size_t end = text.find('\n', pos);
        if (end == std::string::npos) end = text.size();
        lines.push_back(parse_line(text.substr(pos, end - pos), ++number));
        pos = end + 1;
    }
    return lines;
}

std::string serialize(const std::vector<Line>& lines) {
    std::string out;
    for (const Line& l : lines) {
        if (!l.keep) continue;
        out += l.raw;
        out += '\n';
    }
    return out;
}

std::vector<BadLine> bad_lines(const std::vector<Line>& lines) {
    std::vector<BadLine> out;
    for (const Line& l : lines) {
        if (l.kind == LineKind::kBad) out.push_back(BadLine{l.number, l.raw});
    }
    return out;
}

// A tab, not a space, before each field: see the header.
Line new_line(const std::string& index, const HolderIdentity& holder, std::uint32_t share) {
    Line l;
    l.kind = LineKind::kEntry;
    const std::string gpu = gpu_of(index);
    l.raw = gpu + " " + std::to_string(holder.pid);
    if (holder.has_start_time) l.raw += "\t" + std::to_string(holder.start_time);
    if (holder.has_ns) l.raw += "\tns=" + std::to_string(holder.ns);
    if (holder.has_lease) {
        l.raw += "\tlease=" + std::to_string(holder.lease);
        if (!holder.lease_file.empty()) l.raw += "\tlf=" + holder.lease_file;
    }
    if (gpu != index) l.raw += "\tmig=" + index;
    if (holder.tm > 0) l.raw += "\ttm=" + std::to_string(holder.tm);
    if (share > 0) l.raw += "\tshare=" + std::to_string(share);
    if (!holder.slot.empty()) l.raw += "\tslot=" + holder.slot;
    static_cast<HolderIdentity&>(l.entry) = holder;
    if (!holder.has_lease) l.entry.lease_file.clear();
    l.entry.index = index;
    l.entry.gpu = gpu;
    l.entry.share = share;
    return l;
}

}  // namespace coordination
}  // namespace flinkgpu
