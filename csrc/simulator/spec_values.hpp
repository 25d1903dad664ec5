// The values of a simulator spec (spec.hpp), read with the errors that name their key and path: whole
// numbers, strings, booleans, choices among names, cpulists, query names. A configuration error is said
// (complain) and the reader answers false.
#pragma once

#include <initializer_list>
#include <string>
#include <vector>

#include "json.hpp"

namespace flinkgpu_sim {

// A decimal whole number in [0, max] (an environment variable's value); false for anything else.
bool parse_unsigned(const char* text, unsigned long long max, unsigned long long* out);

// A JSON number that is a whole number in [0, limit). Converting anything else (negative, fractional,
// huge, infinite) to an unsigned integer type is undefined behaviour, so it is a configuration error.
bool whole_number(const simjson::Value& v, double limit, unsigned long long* out);

// A key of a spec object that is given (null counts as absent, as in flink_gpu.simulator).
const simjson::Value* present(const simjson::Value& object, const char* key);

// ", got VALUE" for an error naming a bad value (text quoted, as JSON writes it; lists and objects by kind).
std::string got(const simjson::Value& v);

// Keys of a spec object outside `known` are a configuration error (a typo would be ignored): it names
// them and the known ones. `what` is the object's path, e.g. "devices[0]".
bool known_keys(const simjson::Value& object, std::initializer_list<const char*> known, const char* spec_path,
                const std::string& what);

// A string value of a spec object into *out; a value of another type is a configuration error
// naming the key (`where` is the object's path, e.g. "devices[0].").
bool read_string(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
                 std::string* out);

// Likewise a boolean, and a whole number in [0, limit).
bool read_bool(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
               bool* out);

bool read_number(const simjson::Value& object, const char* key, double limit, const char* spec_path,
                 const std::string& where, unsigned long long* out);

// One of `names` (index into it), for the spec key `key`.
bool read_choice(const simjson::Value& object, const char* key, const char* const* names, unsigned count,
                 const char* spec_path, const std::string& where, unsigned* out);

// A Linux cpulist ("0-3,8") into a bitmask; false when it is not one.
bool parse_cpulist(const std::string& text, std::vector<unsigned long>* mask);

// A list of query names into a bitmask.
bool read_queries(const simjson::Value& object, const char* key, const char* spec_path, const std::string& where,
                  unsigned* out);

}  // namespace flinkgpu_sim
