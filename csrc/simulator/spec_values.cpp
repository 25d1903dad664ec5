#include "spec_values.hpp"

#include <cerrno>
#include <cstdlib>
#include <string>
#include <vector>

#include "device_model.hpp"

namespace flinkgpu_sim {

bool parse_unsigned(const char* text, unsigned long long max, unsigned long long* out) {
    if (text == nullptr || *text == '\0') return false;
    errno = 0;
    char* end = nullptr;
    const unsigned long long v = std::strtoull(text, &end, 10);
    if (errno != 0 || *end != '\0' || v > max || text[0] == '-') return false;
    *out = v;
    return true;
}

// A JSON number that is a whole number in [0, limit). Converting anything else (negative, fractional,
// huge, infinite) to an unsigned integer type is undefined behaviour, so it is a configuration error.
bool whole_number(const simjson::Value& v, double limit, unsigned long long* out) {
    if (!(v.number >= 0.0) || !(v.number < limit) ||
        v.number != static_cast<double>(static_cast<unsigned long long>(v.number)))
        return false;
    *out = static_cast<unsigned long long>(v.number);
    return true;
}

// A key of a spec object that is given (null counts as absent, as in flink_gpu.simulator).
const simjson::Value* present(const simjson::Value& object, const char* key) {
    const simjson::Value* v = object.get(key);
    return v != nullptr && v->type != simjson::Value::Type::kNull ? v : nullptr;
}

// ", got VALUE" for an error naming a bad value (text quoted, as JSON writes it; lists and objects by kind).
std::string got(const simjson::Value& v) {
    using Type = simjson::Value::Type;
    if (v.type == Type::kString) return ", got \"" + v.string + "\"";
    if (v.type == Type::kBool) return v.boolean ? ", got true" : ", got false";
    if (v.type == Type::kNumber) {
        char buf[40];
        std::snprintf(buf, sizeof buf, "%.17g", v.number);
        return std::string(", got ") + buf;
    }
    if (v.type == Type::kArray) return ", got a list";
    if (v.type == Type::kObject) return ", got an object";
    return ", got null";
}

// Keys of a spec object outside `known` are a configuration error (a typo would be ignored): it names
// them and the known ones. `what` is the object's path, e.g. "devices[0]".
bool known_keys(const simjson::Value& object, std::initializer_list<const char*> known, const char* spec_path,
                const std::string& what) {
    std::string unknown;
    for (const auto& kv : object.object) {
        bool found = false;
        for (const char* key : known) found = found || kv.first == key;
        if (!found) unknown += (unknown.empty() ? "'" : ", '") + kv.first + "'";
    }
    if (unknown.empty()) return true;
    std::string names;
    for (const char* key : known) names += (names.empty() ? "" : ", ") + std::string(key);
    complain(std::string(spec_path) + ": " + what + " has unknown keys [" + unknown + "]; use " + names);
    return false;
}

// A string value of a spec object into *out; a value of another type is a configuration error
// naming the key (`where` is the object's path, e.g. "devices[0].").
bool read_string(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
                 std::string* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    if (!v->is_string()) {
        complain(std::string(spec_path) + ": " + where + key + " must be a string" + got(*v));
        return false;
    }
    *out = v->string;
    return true;
}

bool read_bool(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
               bool* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    if (v->type != simjson::Value::Type::kBool) {
        complain(std::string(spec_path) + ": " + where + key + " must be true or false" + got(*v));
        return false;
    }
    *out = v->boolean;
    return true;
}

bool read_number(const simjson::Value& object, const char* key, double limit, const char* spec_path,
                 const std::string& where, unsigned long long* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    if (!v->is_number() || !whole_number(*v, limit, out)) {
        complain(std::string(spec_path) + ": " + where + key + " must be a whole number (0.." +
                 (limit > 1e19 ? std::string("2^64-1") : std::to_string(static_cast<unsigned long long>(limit) - 1)) +
                 ")" + got(*v));
        return false;
    }
    return true;
}

// One of `names` (index into it), for the spec key `key`.
bool read_choice(const simjson::Value& object, const char* key, const char* const* names, unsigned count,
                 const char* spec_path, const std::string& where, unsigned* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    for (unsigned i = 0; v->is_string() && i < count; ++i) {
        if (names[i] != nullptr && v->string == names[i]) {
            *out = i;
            return true;
        }
    }
    std::string allowed;
    for (unsigned i = 0; i < count; ++i) {
        if (names[i] == nullptr) continue;
        if (!allowed.empty()) allowed += ", ";
        allowed += names[i];
    }
    complain(std::string(spec_path) + ": " + where + key + " must be one of " + allowed + got(*v));
    return false;
}

// A Linux cpulist ("0-3,8") into a bitmask; false when it is not one.
bool parse_cpulist(const std::string& text, std::vector<unsigned long>* mask) {
    constexpr unsigned kBits = sizeof(unsigned long) * 8;
    mask->clear();
    const char* p = text.c_str();
    if (*p == '\0') return false;
    while (*p != '\0') {
        char* end = nullptr;
        if (*p < '0' || *p > '9') return false;
        unsigned long first = std::strtoul(p, &end, 10), last = first;
        p = end;
        if (*p == '-') {
            ++p;
            if (*p < '0' || *p > '9') return false;
            last = std::strtoul(p, &end, 10);
            p = end;
        }
        if (last < first || last >= 4096) return false;
        if (mask->size() <= last / kBits) mask->resize(last / kBits + 1, 0);
        for (unsigned long c = first; c <= last; ++c) (*mask)[c / kBits] |= 1UL << (c % kBits);
        if (*p == ',') {
            ++p;
            if (*p == '\0') return false;
        } else if (*p != '\0') {
            return false;
        }
    }
    return true;
}

// A list of query names into a bitmask.
bool read_queries(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
                  unsigned* out) {
    const simjson::Value* v = present(object, key);
    if (v == nullptr) return true;
    bool ok = v->is_array();
    for (size_t i = 0; ok && i < v->array.size(); ++i) {
        const simjson::Value& item = v->array[i];
        bool known = false;
        for (unsigned q = 0; item.is_string() && q < kQueryCount; ++q) {
            if (item.string == kQueryNames[q]) {
                *out |= 1u << q;
                known = true;
            }
        }
        if (item.is_string() && item.string == "processes") {
            *out |= (1u << kQueryComputeProcesses) | (1u << kQueryGraphicsProcesses) | (1u << kQueryMpsProcesses);
            known = true;
        }
        ok = known;
    }
    if (!ok) {
        std::string names;
        for (unsigned q = 0; q < kQueryCount; ++q) names += std::string(kQueryNames[q]) + ", ";
        complain(std::string(spec_path) + ": " + where + key + " must be a list of query names: " + names +
                 "processes");
    }
    return ok;
}

}  // namespace flinkgpu_sim
