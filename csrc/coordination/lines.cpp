#include "coordination/lines.hpp"

#include <algorithm>
#include <climits>
#include <cstring>
#include <utility>

namespace flinkgpu {
namespace coordination {

namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// A GPU or slot number as NVML prints it: decimal digits without a leading zero ("0" itself excepted), so
// that one number has one spelling and "00" or "01" never escapes the exclusion of "0" or "1".
bool canonical_number(const std::string& s, std::size_t begin, std::size_t end) {
    if (begin >= end || (s[begin] == '0' && end - begin > 1)) return false;
    for (std::size_t i = begin; i < end; ++i) {
        if (!is_digit(s[i])) return false;
    }
    return true;
}

}  // namespace

bool valid_index(const std::string& s) {
    if (s.empty()) return false;
    bool numeric = true, colon = false;  // only digits and colons: a GPU's or a unit's number
    for (unsigned char c : s) {
        if (c <= 0x20 || c >= 0x7f) return false;
        numeric = numeric && (is_digit(static_cast<char>(c)) || c == ':');
        colon = colon || c == ':';
    }
    if (!numeric) return true;  // another discovery's name ("GPU-a", "card:0"): opaque
    return colon ? unit_gpu(s, nullptr) : canonical_number(s, 0, s.size());
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
    if (colon == std::string::npos || !canonical_number(index, 0, colon) ||
        !canonical_number(index, colon + 1, index.size())) {
        return false;
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

// The parsers below read the line in place (pointer and length): a coordination file of 1000 lines is
// parsed on every claim and release, and the only allocation a line costs is its `raw` copy.

bool parse_decimal(const char* s, std::size_t n, std::uint64_t max, std::uint64_t* out) {
    if (n == 0 || n > 20) return false;
    std::uint64_t v = 0;
    for (std::size_t i = 0; i < n; ++i) {
        const char c = s[i];
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

bool key_is(const char* key, std::size_t n, const char* name) {
    return std::strlen(name) == n && std::memcmp(key, name, n) == 0;
}

// Which known keys a line has named, so that none is given twice.
struct SeenKeys {
    bool ns = false, lease = false, lease_file = false, tm = false, share = false, memory = false, slot = false;
};

// A `key=value` field: the known keys parsed into `e` (false for a bad value or a repeated key), any
// other key accepted and ignored. False when the word is no key=value field at all.
bool parse_field(const char* word, std::size_t n, Entry* e, SeenKeys* seen) {
    const char* eq_at = static_cast<const char*>(std::memchr(word, '=', n));
    if (eq_at == nullptr || eq_at == word) return false;
    const std::size_t eq = static_cast<std::size_t>(eq_at - word);
    for (std::size_t i = 0; i < eq; ++i) {
        if (!is_key_char(word[i])) return false;
    }
    const char* value = word + eq + 1;
    const std::size_t value_len = n - eq - 1;
    std::uint64_t v = 0;
    if (key_is(word, eq, "ns")) {
        if (seen->ns || !parse_decimal(value, value_len, UINT64_MAX, &v)) return false;
        seen->ns = e->has_ns = true;
        e->ns = v;
    } else if (key_is(word, eq, "mig")) {
        // a unit of the line's GPU (checked by the caller): "<gpu>:<slot>", never "<digit><space>"
        std::string unit(value, value_len);
        if (!e->index.empty() || !unit_gpu(unit, nullptr)) return false;
        e->index = std::move(unit);
    } else if (key_is(word, eq, "lease")) {
        if (seen->lease || !parse_decimal(value, value_len, kMaxLeaseSlot, &v)) return false;
        seen->lease = e->has_lease = true;
        e->lease = static_cast<std::uint32_t>(v);
    } else if (key_is(word, eq, "lf")) {
        std::string token(value, value_len);
        if (seen->lease_file || (!valid_lease_file_token(token) && token != kNoLeaseFileToken)) return false;
        seen->lease_file = true;
        e->lease_file = std::move(token);
    } else if (key_is(word, eq, "tm")) {
        if (seen->tm || !parse_decimal(value, value_len, INT_MAX, &v) || v == 0) return false;
        seen->tm = true;
        e->tm = static_cast<pid_t>(v);
    } else if (key_is(word, eq, "share")) {
        if (seen->share || !parse_decimal(value, value_len, kMaxShare, &v) || v == 0) return false;
        seen->share = true;
        e->share = static_cast<std::uint32_t>(v);
    } else if (key_is(word, eq, "mem")) {
        if (seen->memory || !parse_decimal(value, value_len, kMaxMemoryRequest, &v) || v == 0) return false;
        seen->memory = true;
        e->memory = v;
    } else if (key_is(word, eq, "slot")) {
        std::string slot(value, value_len);
        if (seen->slot || !valid_slot(slot)) return false;
        seen->slot = true;
        e->slot = std::move(slot);
    }
    return true;
}

bool is_separator(char c) { return c == ' ' || c == '\t'; }

// The next word of s[*i, n) (split on spaces and tabs) into [*begin, *begin + *len); false at the end.
bool next_word(const char* s, std::size_t n, std::size_t* i, std::size_t* begin, std::size_t* len) {
    std::size_t k = *i;
    while (k < n && is_separator(s[k])) ++k;
    if (k == n) {
        *i = k;
        return false;
    }
    std::size_t j = k;
    while (j < n && !is_separator(s[j])) ++j;
    *begin = k;
    *len = j - k;
    *i = j;
    return true;
}

// `<index> <pid>[ <start time>][ key=value]...`: the index starts the line and is followed by a space
// (what the stock script's `grep "^$i "` finds); the rest is split on blanks (its `awk '{print $2}'`).
// Fills `line`, a default Line.
void parse_line(const char* s, std::size_t n, std::size_t number, Line* out) {
    Line& line = *out;
    line.number = number;
    line.raw.assign(s, n);
    if (std::all_of(s, s + n, is_blank_char)) {
        line.kind = LineKind::kBlank;
        return;
    }
    line.kind = LineKind::kBad;
    std::size_t i = 0, w0 = 0, w0_len = 0;
    next_word(s, n, &i, &w0, &w0_len);  // there is one: the line is not blank
    line.word.assign(s + w0, w0_len);
    // the first word starts the line and ends at its first space (a tab before it: no entry)
    if (w0 != 0 || w0_len == n || s[w0_len] != ' ' || !valid_index(line.word)) return;  // the one rule
    std::size_t w1 = 0, w1_len = 0;
    if (!next_word(s, n, &i, &w1, &w1_len)) return;
    std::uint64_t pid = 0, start = 0;
    if (!parse_decimal(s + w1, w1_len, INT_MAX, &pid) || pid == 0) return;
    Entry& e = line.entry;
    std::size_t w = 0, w_len = 0;
    bool more = next_word(s, n, &i, &w, &w_len);
    if (more && parse_decimal(s + w, w_len, UINT64_MAX, &start)) {
        e.has_start_time = true;
        e.start_time = start;
        more = next_word(s, n, &i, &w, &w_len);
    }
    SeenKeys seen;
    for (; more; more = next_word(s, n, &i, &w, &w_len)) {
        if (!parse_field(s + w, w_len, &e, &seen)) {
            e = Entry();
            return;
        }
    }
    if (!e.index.empty() && gpu_of(e.index) != line.word) {
        e = Entry();
        return;  // a unit of another GPU than the line's: unreadable, it blocks its first word
    }
    line.kind = LineKind::kEntry;
    e.line_number = number;
    // a line `<gpu>:<slot> <pid>` (not how we write a unit) still holds that unit of that GPU
    e.gpu = e.index.empty() ? gpu_of(line.word) : line.word;
    if (e.index.empty()) e.index = line.word;
    e.pid = static_cast<pid_t>(pid);
}

}  // namespace

std::vector<Line> parse_file(const std::string& text) {
    std::vector<Line> lines;
    // one allocation for the vector: its Lines are never moved
    lines.reserve(static_cast<std::size_t>(std::count(text.begin(), text.end(), '\n')) + 1);
    const char* const data = text.data();
    std::size_t pos = 0, number = 0;
    while (pos < text.size()) {
        const char* nl = static_cast<const char*>(std::memchr(data + pos, '\n', text.size() - pos));
        const std::size_t end = nl == nullptr ? text.size() : static_cast<std::size_t>(nl - data);
        lines.emplace_back();
        parse_line(data + pos, end - pos, ++number, &lines.back());
        pos = end + 1;
    }
    return lines;
}

std::string serialize(const std::vector<Line>& lines) {
    std::size_t size = 0;
    for (const Line& l : lines) {
        if (l.keep) size += l.raw.size() + 1;
    }
    std::string out;
    out.reserve(size);
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
Line new_line(const std::string& index, const HolderIdentity& holder, std::uint32_t share, std::uint64_t memory) {
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
    if (memory > 0) l.raw += "\tmem=" + std::to_string(memory);
    if (!holder.slot.empty()) l.raw += "\tslot=" + holder.slot;
    static_cast<HolderIdentity&>(l.entry) = holder;
    if (!holder.has_lease) l.entry.lease_file.clear();
    l.entry.index = index;
    l.entry.gpu = gpu;
    l.entry.share = share;
    l.entry.memory = memory;
    return l;
}

Status check_share(long long n, const char* what, const std::string& written) {
    if (n >= 1 && n <= kMaxShare) return {};
    return failure(StatusCode::kInvalidArgument, std::string("Invalid ") + what + " " +
                                                     (written.empty() ? std::to_string(n) : written) +
                                                     ": it must be 1 to " + std::to_string(kMaxShare) + ".");
}

Status check_memory_request(std::uint64_t bytes, const char* what, const std::string& written) {
    if (bytes <= kMaxMemoryRequest) return {};
    return failure(StatusCode::kInvalidArgument,
                   std::string("Invalid ") + what + " " +
                       (written.empty() ? "of " + std::to_string(bytes) + " bytes" : written) +
                       ": it must be at most " + std::to_string(kMaxMemoryRequest) + " bytes.");
}

}  // namespace coordination
}  // namespace flinkgpu
