// The small JSON reader the simulator needs for FLINK_GPU_SIM_SPEC (objects, arrays, strings,
// numbers, true/false/null). Errors carry the byte offset so a broken spec file is easy to fix.
#pragma once

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/file_kind.hpp"

namespace simjson {

struct Value {
    enum class Type { kNull, kBool, kNumber, kString, kArray, kObject } type = Type::kNull;
    bool boolean = false;
    double number = 0;
    std::string string;
    std::vector<Value> array;
    std::vector<std::pair<std::string, Value>> object;

    bool is_number() const { return type == Type::kNumber; }
    bool is_string() const { return type == Type::kString; }
    bool is_array() const { return type == Type::kArray; }
    bool is_object() const { return type == Type::kObject; }
    const Value* get(const std::string& key) const {
        for (const auto& kv : object)
            if (kv.first == key) return &kv.second;
        return nullptr;
    }
};

class Parser {
public:
    explicit Parser(const std::string& text) : s_(text) {}

    bool parse(Value* out, std::string* error) {
        if (!value(out, 0) || (skip_ws(), pos_ != s_.size())) {
            if (error_.empty()) error_ = "unexpected trailing characters";
            *error = error_ + " at byte " + std::to_string(pos_);
            return false;
        }
        return true;
    }

private:
    const std::string& s_;
    size_t pos_ = 0;
    std::string error_;

    bool fail(const char* what) {
        if (error_.empty()) error_ = what;
        return false;
    }
    void skip_ws() {
        while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == '\n' || s_[pos_] == '\r'))
            ++pos_;
    }
    bool literal(const char* word) {
        size_t n = std::char_traits<char>::length(word);
        if (s_.compare(pos_, n, word) != 0) return fail("invalid literal");
        pos_ += n;
        return true;
    }
    bool value(Value* out, int depth) {
        if (depth > 32) return fail("nesting too deep");
        skip_ws();
        if (pos_ >= s_.size()) return fail("unexpected end of input");
        const char c = s_[pos_];
        if (c == '{') return object(out, depth);
        if (c == '[') return array(out, depth);
        if (c == '"') {
            out->type = Value::Type::kString;
            return string(&out->string);
        }
        if (c == 't') {
            out->type = Value::Type::kBool;
            out->boolean = true;
            return literal("true");
        }
        if (c == 'f') {
            out->type = Value::Type::kBool;
            return literal("false");
        }
        if (c == 'n') {
            out->type = Value::Type::kNull;
            return literal("null");
        }
        return number(out);
    }
    bool number(Value* out) {
        const char* begin = s_.c_str() + pos_;
        char* end = nullptr;
        out->number = std::strtod(begin, &end);
        if (end == begin) return fail("expected a value");
        pos_ += static_cast<size_t>(end - begin);
        out->type = Value::Type::kNumber;
        return true;
    }
    static void append_utf8(std::string* out, unsigned cp) {
        if (cp < 0x80) {
            out->push_back(static_cast<char>(cp));
        } else if (cp < 0x800) {
            out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
            out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        } else if (cp < 0x10000) {
            out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
            out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        } else {
            out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
            out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
            out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
        }
    }
    bool hex4(unsigned* out) {
        if (pos_ + 4 > s_.size()) return fail("truncated \\u escape");
        unsigned v = 0;
        for (int i = 0; i < 4; ++i) {
            const char h = s_[pos_++];
            v <<= 4;
            if (h >= '0' && h <= '9') v |= static_cast<unsigned>(h - '0');
            else if (h >= 'a' && h <= 'f') v |= static_cast<unsigned>(h - 'a' + 10);
            else if (h >= 'A' && h <= 'F') v |= static_cast<unsigned>(h - 'A' + 10);
            else return fail("invalid \\u escape");
        }
        *out = v;
        return true;
    }
    bool string(std::string* out) {
        ++pos_;  // opening quote
        out->clear();
        while (pos_ < s_.size()) {
            const char c = s_[pos_++];
            if (c == '"') return true;
            if (c != '\\') {
                out->push_back(c);
                continue;
            }
            if (pos_ >= s_.size()) break;
            const char e = s_[pos_++];
            switch (e) {
                case '"':
                case '\\':
                case '/': out->push_back(e); break;
                case 'b': out->push_back('\b'); break;
                case 'f': out->push_back('\f'); break;
                case 'n': out->push_back('\n'); break;
                case 'r': out->push_back('\r'); break;
                case 't': out->push_back('\t'); break;
                case 'u': {
                    unsigned cp = 0;
                    if (!hex4(&cp)) return false;
                    if (cp >= 0xD800 && cp < 0xDC00 && s_.compare(pos_, 2, "\\u") == 0) {
                        pos_ += 2;
                        unsigned low = 0;
                        if (!hex4(&low)) return false;
                        if (low < 0xDC00 || low > 0xDFFF) return fail("invalid surrogate pair");
                        cp = 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00);
                    }
                    append_utf8(out, cp);
                    break;
                }
                default: return fail("invalid escape");
            }
        }
        return fail("unterminated string");
    }
    bool array(Value* out, int depth) {
        ++pos_;
        out->type = Value::Type::kArray;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == ']') {
            ++pos_;
            return true;
        }
        for (;;) {
            out->array.emplace_back();
            if (!value(&out->array.back(), depth + 1)) return false;
            skip_ws();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < s_.size() && s_[pos_] == ']') {
                ++pos_;
                return true;
            }
            return fail("expected ',' or ']'");
        }
    }
    bool object(Value* out, int depth) {
        ++pos_;
        out->type = Value::Type::kObject;
        skip_ws();
        if (pos_ < s_.size() && s_[pos_] == '}') {
            ++pos_;
            return true;
        }
        for (;;) {
            skip_ws();
            if (pos_ >= s_.size() || s_[pos_] != '"') return fail("expected a string key");
            std::string key;
            if (!string(&key)) return false;
            skip_ws();
            if (pos_ >= s_.size() || s_[pos_] != ':') return fail("expected ':'");
            ++pos_;
            out->object.emplace_back(std::move(key), Value());
            if (!value(&out->object.back().second, depth + 1)) return false;
            skip_ws();
            if (pos_ < s_.size() && s_[pos_] == ',') {
                ++pos_;
                continue;
            }
            if (pos_ < s_.size() && s_[pos_] == '}') {
                ++pos_;
                return true;
            }
            return fail("expected ',' or '}'");
        }
    }
};

// The most bytes read from a spec file (as flink_gpu.base.regular_files.MAX_FILE_SIZE).
constexpr size_t kMaxFileSize = 16u << 20;

// Reads a regular file of at most kMaxFileSize bytes. A FIFO or device is refused before it is
// read (a FIFO without a writer would block, /dev/zero never ends): it is opened O_NONBLOCK and
// checked on the open descriptor. statx, not stat/fstat: those are GLIBC_2.33 symbols, beyond
// what a manylinux_2_28 wheel may need.
inline bool read_regular_file(const char* path, std::string* text, std::string* error) {
    struct statx status{};
    if (::statx(AT_FDCWD, path, 0, STATX_TYPE, &status) != 0) {
        *error = std::string("cannot open the file: ") + std::strerror(errno);
        return false;
    }
    if (!S_ISREG(status.stx_mode)) {
        *error = std::string("it is ") + flinkgpu::file_kind(status.stx_mode) + ", not a regular file";
        return false;
    }
    const int fd = ::open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC | O_NOCTTY);
    if (fd < 0) {
        *error = std::string("cannot open the file: ") + std::strerror(errno);
        return false;
    }
    bool ok = ::statx(fd, "", AT_EMPTY_PATH, STATX_TYPE, &status) == 0;
    if (!ok) {
        *error = std::string("cannot read the file: ") + std::strerror(errno);
    } else if (!S_ISREG(status.stx_mode)) {  // replaced between statx and open
        *error = std::string("it is ") + flinkgpu::file_kind(status.stx_mode) + ", not a regular file";
        ok = false;
    }
    char buf[4096];
    while (ok) {
        const ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) {
            *error = std::string("cannot read the file: ") + std::strerror(errno);
            ok = false;
        } else if (n == 0) {
            break;
        } else if (text->size() + static_cast<size_t>(n) > kMaxFileSize) {
            *error = "it is larger than 16 MiB, the most the simulator reads";
            ok = false;
        } else {
            text->append(buf, static_cast<size_t>(n));
        }
    }
    ::close(fd);
    return ok;
}

inline bool parse_file(const char* path, Value* out, std::string* error) {
    std::string text;
    if (!read_regular_file(path, &text, error)) return false;
    return Parser(text).parse(out, error);
}

}  // namespace simjson
