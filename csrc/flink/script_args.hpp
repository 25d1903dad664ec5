// The argument grammar of Flink's stock nvidia-gpu-discovery.sh after the GPU amount
// (docs/design.md §6.1), shared by flink-gpu-discovery and the Python NVML backend:
//   * --enable-coordination-mode turns coordination mode on;
//   * --coordination-file takes the next token as the file, whatever it is; when it is the last
//     token or the next token is empty, the file stays the default (file_value_missing says so);
//   * "null" (what Flink passes when discovery-script.args is unset) is ignored silently;
//   * --busy-gpus (ours: the stock script ignores it as an unknown token) takes the next token as
//     its value, as --coordination-file does; the value is checked by nvml/choice.hpp;
//   * --nvml-timeout (ours, flink-gpu-discovery's deadline for NVML, nvml/deadline.hpp) takes the
//     next token likewise; the value is a Flink duration (flink/duration.hpp), checked by the caller;
//   * --topology (ours: prefer or ignore, nvml/choice.hpp) takes the next token likewise;
//   * any other token is ignored by the script; it is reported with the flag it probably meant.
// Before the amount, flink-gpu-discovery alone takes --help (or -h) for a request of its usage (asks_for_usage).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace flinkgpu {

// The stock script's coordination file when --coordination-file is not given.
inline constexpr const char* kDefaultCoordinationFile = "/var/tmp/flink-gpu-coordination";

inline constexpr const char* kEnableCoordinationFlag = "--enable-coordination-mode";
inline constexpr const char* kCoordinationFileFlag = "--coordination-file";
inline constexpr const char* kBusyGpusFlag = "--busy-gpus";
inline constexpr const char* kNvmlTimeoutFlag = "--nvml-timeout";
inline constexpr const char* kTopologyFlag = "--topology";

inline constexpr const char* kHelpFlag = "--help";
inline constexpr const char* kShortHelpFlag = "-h";

// Whether a command line's arguments (argv[1] on) ask for the usage text: --help or -h first, where the stock
// script takes the GPU amount. Flink always passes the amount first (`<script> <amount> <args...>`), so no call of
// Flink's asks for it; after the amount both are unknown tokens like any other (parse_script_args).
bool asks_for_usage(const std::vector<std::string>& arguments);

struct UnknownToken {
    std::string token;
    std::string suggestion;  // the flag it probably meant; empty when it resembles none
};

struct ScriptArgs {
    bool coordination_mode = false;
    std::string coordination_file;  // the default coordination file unless given
    bool file_value_missing = false;
    bool has_busy_gpus = false;  // --busy-gpus was given; busy_gpus is its value ("" when missing)
    std::string busy_gpus;
    bool has_nvml_timeout = false;  // --nvml-timeout was given; nvml_timeout is its value ("" when missing)
    std::string nvml_timeout;
    bool has_topology = false;  // --topology was given; topology is its value ("" when missing)
    std::string topology;
    std::vector<UnknownToken> unknown;
};

ScriptArgs parse_script_args(const std::vector<std::string>& tokens);

// `tokens` with every --coordination-file and its value (as parse_script_args reads them: the
// next token, whatever it is) removed and `--coordination-file path` appended, so that the
// script uses `path`; everything else is kept in order.
std::vector<std::string> with_coordination_file(const std::vector<std::string>& tokens, const std::string& path);

// The flag `token` probably meant, else "": the flag it abbreviates (a token starting with "--"
// that begins a flag and keeps at least half of it: --enable-coord, --busy, not --enable), the
// flag it begins with (--coordination-file=/x), or else the flag it is closest to when at least
// 60% alike (1 - edit distance / longer length): Flink's documented typo --enable-coordination,
// dropped or doubled letters.
std::string suggest_flag(std::string_view token);

}  // namespace flinkgpu
