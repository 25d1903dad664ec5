// flink-gpu-discovery: a native drop-in for Flink's nvidia-gpu-discovery.sh (docs/design.md §6.1).
//
//   flink-gpu-discovery <amount> [--enable-coordination-mode] [--coordination-file PATH]
//
// Same arguments, stdout and exit codes as the stock script, so that a Java TaskManager can use it
// as its discovery script; it asks NVML in-process instead of spawning nvidia-smi. Anything meant
// for people goes to stderr: Flink parses stdout.
#include "coordination.hpp"
#include "devices.hpp"
#include "nvml_loader.hpp"
#include "script_args.hpp"

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <unistd.h>
#include <vector>

namespace {

const char* const kUsage =
    "Usage: ./nvidia-gpu-discovery.sh gpu-amount [--enable-coordination-mode] [--coordination-file filePath]";
const char* const kNotEnough = "Could not get enough GPU resources.";

struct Arguments {
    long long amount = 0;
    bool beyond_range = false;  // a whole number above LLONG_MAX: more GPUs than any host has
    flinkgpu::ScriptArgs script;
};

// Parses like the stock script: the first argument is the amount, then its flags (script_args.hpp).
// What the stock script silently ignores or defaults is noted on stderr.
bool parse_arguments(int argc, char** argv, Arguments* args) {
    const char* amount = argv[1];
    errno = 0;
    char* end = nullptr;
    args->amount = std::strtoll(amount, &end, 10);
    // Too large for 64 bits is still a count, only one no host can satisfy (the stock script's bash
    // wraps it around instead and may hand out every GPU: docs/design.md §11).
    args->beyond_range = errno == ERANGE && args->amount == LLONG_MAX && end != amount && *end == '\0';
    if (!args->beyond_range && (errno != 0 || end == amount || *end != '\0' || args->amount < 0)) {
        std::fprintf(stderr, "flink-gpu-discovery: the GPU amount must be a non-negative integer, got '%s'\n", amount);
        return false;
    }
    args->script = flinkgpu::parse_script_args(std::vector<std::string>(argv + 2, argv + argc));
    for (const auto& unknown : args->script.unknown) {
        if (!unknown.suggestion.empty()) {
            std::fprintf(stderr, "flink-gpu-discovery: ignoring unknown argument '%s' (did you mean %s?)\n",
                         unknown.token.c_str(), unknown.suggestion.c_str());
        } else {
            std::fprintf(stderr, "flink-gpu-discovery: ignoring unknown argument '%s' (known: %s, %s PATH)\n",
                         unknown.token.c_str(), flinkgpu::kEnableCoordinationFlag, flinkgpu::kCoordinationFileFlag);
        }
    }
    if (args->script.file_value_missing) {
        std::fprintf(stderr, "flink-gpu-discovery: %s has no value; using the default coordination file %s\n",
                     flinkgpu::kCoordinationFileFlag, args->script.coordination_file.c_str());
    }
    return true;
}

std::string join(const std::vector<std::string>& indices) {
    std::string out;
    for (const auto& index : indices) {
        if (!out.empty()) out += ',';
        out += index;
    }
    return out;
}

// The answer Flink parses. A write that fails (stdout closed, disk full) must not exit 0 with
// nothing read: Flink would start without GPUs and never know why.
int print_indices(const std::vector<std::string>& indices) {
    std::puts(join(indices).c_str());
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "flink-gpu-discovery: cannot write the GPU indices to stdout: %s\n", std::strerror(errno));
        return 1;
    }
    return 0;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
    for (const auto& e : v)
        if (e == x) return true;
    return false;
}

// Claims for our parent (the TaskManager, as the stock script records $PPID). Printed in the
// stock script's order: what the owner already held, free GPUs, then those taken from dead owners.
int claim_coordinated(const Arguments& args, const flinkgpu::Enumeration& found) {
    namespace coord = flinkgpu::coordination;
    coord::Options opts;
    opts.path = args.script.coordination_file;
    std::vector<std::string> existing;
    for (const auto& d : found.devices) existing.push_back(std::to_string(d.index));
    const coord::ClaimResult r = coord::claim(opts, getppid(), existing, static_cast<std::size_t>(args.amount));
    for (const auto& bad : r.unparsable)
        std::fprintf(stderr, "flink-gpu-discovery: %s:%zu: kept a line that is not '<index> <pid>': %s\n",
                     args.script.coordination_file.c_str(), bad.line_number, bad.text.c_str());
    if (r.status.code == flinkgpu::StatusCode::kNotEnough) {
        std::puts(kNotEnough);
        std::fprintf(stderr, "flink-gpu-discovery: %s\n", r.status.message.c_str());
        return 1;
    }
    if (!r.status.ok()) {
        std::fprintf(stderr, "flink-gpu-discovery: %s\n", r.status.message.c_str());
        return 1;
    }
    std::vector<std::string> ordered;
    for (const auto& i : r.indices)
        if (!contains(r.added, i)) ordered.push_back(i);
    for (const auto& i : r.added)
        if (!contains(r.reclaimed, i)) ordered.push_back(i);
    for (const auto& i : r.reclaimed) ordered.push_back(i);
    return print_indices(ordered);
}


// Proof that constructors ran (glibc_start_compat.cpp runs them on old and new glibc alike).
bool g_constructors_ran = false;
const struct ConstructorProbe {
    ConstructorProbe() { g_constructors_ran = true; }
} g_constructor_probe;

}  // namespace

int main(int argc, char** argv) {
    if (!g_constructors_ran) {
        std::fprintf(stderr, "flink-gpu-discovery: internal error: static constructors did not run\n");
        return 70;
    }
    if (argc < 2) {
        std::puts(kUsage);
        return 1;
    }
    Arguments args;
    if (!parse_arguments(argc, argv, &args)) return 1;
    if (args.amount == 0) return 0;
    if (args.beyond_range) {
        std::puts(kNotEnough);
        std::fprintf(stderr, "flink-gpu-discovery: %s GPUs requested, more than any host has\n", argv[1]);
        return 1;
    }

    flinkgpu::Status status;
    const flinkgpu::NvmlLibrary* lib = flinkgpu::NvmlLibrary::acquire("", &status);
    flinkgpu::Enumeration found;
    if (lib != nullptr) status = flinkgpu::enumerate_devices(*lib, &found);
    if (!status.ok()) {
        std::fprintf(stderr, "flink-gpu-discovery: %s\n", status.message.c_str());
        return 1;
    }
    for (const auto& skipped : found.skipped) std::fprintf(stderr, "flink-gpu-discovery: %s\n", skipped.reason.c_str());

    if (args.script.coordination_mode) return claim_coordinated(args, found);
    if (static_cast<unsigned long long>(args.amount) > found.devices.size()) {
        std::puts(kNotEnough);
        std::fprintf(stderr, "flink-gpu-discovery: %lld GPUs requested, %zu usable on this host\n", args.amount,
                     found.devices.size());
        return 1;
    }
    std::vector<std::string> chosen;
    for (long long i = 0; i < args.amount; ++i) chosen.push_back(std::to_string(found.devices[i].index));
    return print_indices(chosen);
}
