// flink-gpu-discovery: a native drop-in for Flink's nvidia-gpu-discovery.sh (docs/design.md §6.1).
//
//   flink-gpu-discovery <amount> [--enable-coordination-mode] [--coordination-file PATH]
//                       [--busy-gpus avoid|exclude|ignore] [--topology prefer|ignore] [--nvml-timeout DURATION]
//   flink-gpu-discovery --help | -h
//
// Same arguments, stdout and exit codes as the stock script, so that a Java TaskManager can use it
// as its discovery script; it asks NVML in-process instead of spawning nvidia-smi. Anything meant
// for people goes to stderr: Flink parses stdout. Beyond the stock script it chooses by the GPUs'
// state (nvml/choice.hpp): unhealthy GPUs are never printed, and GPUs with processes that are not
// the TaskManager's (our parent's) are avoided, excluded or ignored as --busy-gpus says; two or more are the
// best joined set (NVLink, then PCIe) of their class unless --topology ignore. All of its
// NVML work (nvmlInit, the state reads) has one deadline, --nvml-timeout (default
// 5 s, inside Flink's 10 s discovery-script.timeout): past it, it says which call stalled and exits 1.
#include "base/gpu_index.hpp"
#include "coordination/claims.hpp"
#include "flink/script_args.hpp"
#include "host/process_tree.hpp"
#include "nvml/choice.hpp"
#include "nvml/deadline.hpp"
#include "nvml/devices.hpp"
#include "nvml/loader.hpp"
#include "nvml/read.hpp"
#include "nvml/settings.hpp"
#include "nvml/state.hpp"
#include "policy/discover.hpp"
#include "policy/shortage.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <memory>
#include <string>
#include <vector>

namespace {

const char* const kUsage =
    "Usage: ./nvidia-gpu-discovery.sh gpu-amount [--enable-coordination-mode] [--coordination-file filePath]";
const char* const kNotEnough = "Could not get enough GPU resources.";

// `--help`: the usage text on stdout, exit 0 (exit 1 when it cannot be written). The flags are the grammar's
// (flink/script_args.hpp), their values the settings' (nvml/choice.hpp, nvml/deadline.hpp).
int print_usage() {
    using namespace flinkgpu;
    std::printf(
        "Usage: flink-gpu-discovery <amount> [%s] [%s PATH]\n"
        "                           [%s VALUE] [%s VALUE] [%s DURATION]\n"
        "       flink-gpu-discovery %s | %s\n"
        "\n"
        "A native drop-in for Flink's nvidia-gpu-discovery.sh: the same arguments, output and exit codes,\n"
        "with NVML asked in-process. Point external-resource.<name>.param.discovery-script.path at it;\n"
        "Flink runs it as `<script> <amount> <discovery-script.args>`.\n"
        "\n"
        "  %-28s how many GPUs to find (0: nothing printed, exit 0)\n"
        "  %-28s claim them in the coordination file for the process that ran this\n"
        "  %-28s one (the TaskManager): the TaskManagers of a host get different GPUs\n"
        "  %-28s the coordination file (default: %s)\n"
        "  %-28s ours: one of %s (default avoid): a GPU running\n"
        "  %-28s processes that are not the TaskManager's is taken only when short\n"
        "  %-28s (avoid), never (exclude), or as any other (ignore)\n"
        "  %-28s ours: one of %s (default prefer): of two or more GPUs, the\n"
        "  %-28s best joined set (NVLink, then PCIe), or index order (ignore)\n"
        "  %-28s ours: the deadline of all NVML work, a Flink duration (default %g s)\n"
        "  %-28s this text (only in place of the amount)\n"
        "Any other argument is ignored, as the stock script ignores it, and named on stderr.\n"
        "\n"
        "Prints on stdout what Flink reads: the GPUs' indices, comma-separated (0,1), or\n"
        "\"%s\"; what is meant for people goes to stderr. An unhealthy GPU is\n"
        "never printed.\n"
        "Exit codes: 0 the indices were printed (or the amount is 0); 1 too few GPUs, a bad argument,\n"
        "NVML not usable or past its deadline, the TaskManager gone; 1 without arguments (the stock\n"
        "script's usage line).\n",
        kEnableCoordinationFlag, kCoordinationFileFlag, kBusyGpusFlag, kTopologyFlag, kNvmlTimeoutFlag, kHelpFlag,
        kShortHelpFlag, "<amount>", kEnableCoordinationFlag, "", (std::string(kCoordinationFileFlag) + " PATH").c_str(),
        kDefaultCoordinationFile, (std::string(kBusyGpusFlag) + " VALUE").c_str(), kBusyPolicyValues, "", "",
        (std::string(kTopologyFlag) + " VALUE").c_str(), kTopologyPolicyValues, "",
        (std::string(kNvmlTimeoutFlag) + " DURATION").c_str(), kDefaultNvmlTimeoutSeconds,
        (std::string(kShortHelpFlag) + ", " + kHelpFlag).c_str(), kNotEnough);
    if (std::fflush(stdout) != 0 || std::ferror(stdout)) {
        std::fprintf(stderr, "flink-gpu-discovery: cannot write the usage to stdout: %s\n", std::strerror(errno));
        return 1;
    }
    return 0;
}

struct Arguments {
    long long amount = 0;
    bool beyond_range = false;  // a whole number above LLONG_MAX: more GPUs than any host has
    flinkgpu::ScriptArgs script;
    flinkgpu::BusyPolicy busy = flinkgpu::BusyPolicy::kAvoid;
    flinkgpu::TopologyPolicy topology = flinkgpu::TopologyPolicy::kPrefer;
    double nvml_timeout = flinkgpu::kDefaultNvmlTimeoutSeconds;  // seconds
};

// Parses like the stock script: the first argument is the amount, then its flags (flink/script_args.hpp).
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
    flinkgpu::SettingsText text;
    text.script = args->script;
    text.flags_on_command_line = true;
    const flinkgpu::Settings settings = flinkgpu::read_settings(text);
    if (!settings.flag_error.empty()) {
        std::fprintf(stderr, "flink-gpu-discovery: %s\n", settings.flag_error.c_str());
        return false;
    }
    args->busy = settings.busy;
    args->topology = settings.topology;
    args->nvml_timeout = settings.nvml_timeout;
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

// The TaskManager that ran us: our parent when we started, read once. If it dies, we are handed to a
// reaper (pid 1, or a subreaper) that getppid() would then name: recording that one would keep the
// GPUs taken for as long as the reaper lives, so it is never asked again.
struct Parent {
    pid_t pid = 0;
    bool has_start_time = false;
    std::uint64_t start_time = 0;  // tells the parent from a process that got its pid after it died
};

Parent read_parent() {
    Parent p;
    p.pid = getppid();
    p.has_start_time = flinkgpu::coordination::process_start_time(p.pid, &p.start_time);
    return p;
}

// Whether the parent we started with is still our parent and still the same process. While it is our
// parent its pid cannot be reused; once getppid() names another, it died.
bool parent_unchanged(const Parent& parent) {
    if (getppid() != parent.pid) return false;
    std::uint64_t now = 0;
    return !parent.has_start_time ||
           (flinkgpu::coordination::process_start_time(parent.pid, &now) && now == parent.start_time);
}

int parent_gone(const Parent& parent, const std::string& what) {
    const char* end = !what.empty() && what.back() == '.' ? "" : ".";
    std::fprintf(stderr, "flink-gpu-discovery: the TaskManager that ran this discovery (pid %ld) has exited; %s%s\n",
                 static_cast<long>(parent.pid), what.c_str(), end);
    return 1;
}

// Whether the parent we read is the process that ran us. A TaskManager that died before we read
// getppid() left us to a reaper (pid 1, or a subreaper), which would own the GPUs for as long as it
// lives: a parent that nothing shows to have started us (host/process_tree.hpp) is taken for one, and no
// GPU is claimed for it.
bool parent_ran_us(const Parent& parent) {
    if (parent.pid <= 0) {
        std::fprintf(stderr,
                     "flink-gpu-discovery: the process that ran this discovery is outside its PID namespace "
                     "(getppid() is 0), so there is no owner to record; no GPU was claimed. Run it from the "
                     "TaskManager, in the TaskManager's PID namespace.\n");
        return false;
    }
    if (flinkgpu::parent_evidence(parent.pid) != flinkgpu::ParentEvidence::kNone) return true;
    if (!parent_unchanged(parent)) {
        parent_gone(parent, "no GPU was claimed");
        return false;
    }
    std::fprintf(stderr,
                 "flink-gpu-discovery: pid %ld, the parent of this discovery, is in neither its process group nor "
                 "its session and does not read its output, so it is taken for a reaper (pid 1 or a subreaper) "
                 "that adopted it after the TaskManager that ran it exited; no GPU was claimed. A TaskManager "
                 "runs it as its own child (a wrapper script must exec it).\n",
                 static_cast<long>(parent.pid));
    return false;
}

// What was claimed for our parent (the TaskManager, as the stock script records $PPID), in the stock
// script's order. It may have died during the claim (waiting for the lock): what was written for its pid
// is then taken back, since a process that got that pid since would own it.
int print_claimed(const Arguments& args, const flinkgpu::policy::DiscoveryOutcome& out, const Parent& parent) {
    namespace coord = flinkgpu::coordination;
    if (out.owner_gone) return parent_gone(parent, "no GPU was claimed");
    if (!parent_unchanged(parent)) {
        if (out.added.empty()) return parent_gone(parent, "no GPU was claimed");
        coord::Options opts;
        opts.path = args.script.coordination_file;
        const coord::ReleaseResult undo = coord::release_indices(opts, parent.pid, out.added);
        if (!undo.status.ok())
            return parent_gone(parent, "the GPUs claimed for it could not be released: " + undo.status.message);
        return parent_gone(parent, "the GPUs claimed for it were released");
    }
    return print_indices(out.chosen);
}

// Leaves with `code`. While a thread is still inside an NVML call that missed its deadline, exit()
// would run static destructors and atexit handlers under it (the library's own among them): flush
// what was written and _exit instead.
int leave(int code) {
    if (!flinkgpu::nvml_call_outstanding()) return code;
    std::fflush(stdout);
    std::fflush(stderr);
    _exit(code);
}

double seconds_since(const timespec& start) {
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return static_cast<double>(now.tv_sec - start.tv_sec) + static_cast<double>(now.tv_nsec - start.tv_nsec) / 1e9;
}

// Proof that constructors ran (discovery/glibc_start_compat.cpp runs them on old and new glibc alike).
bool g_constructors_ran = false;
const struct ConstructorProbe {
    ConstructorProbe() { g_constructors_ran = true; }
} g_constructor_probe;

}  // namespace

int main(int argc, char** argv) {
    // Before anything else: the process that ran us, and writes that fail rather than kill. A JVM's
    // child starts with SIGXFSZ at its default action, which under `ulimit -f` ends the process at the
    // write that crosses the limit, with half a line in the coordination file; ignored, the write fails
    // with EFBIG, what it changed is put back, and the message says whether the file is unchanged or
    // restored (coordination/file.hpp).
    const Parent parent = read_parent();
    std::signal(SIGXFSZ, SIG_IGN);
    if (!g_constructors_ran) {
        std::fprintf(stderr, "flink-gpu-discovery: internal error: static constructors did not run\n");
        return 70;
    }
    if (argc < 2) {
        std::puts(kUsage);
        return 1;
    }
    if (flinkgpu::asks_for_usage(std::vector<std::string>(argv + 1, argv + argc))) return print_usage();
    Arguments args;
    if (!parse_arguments(argc, argv, &args)) return 1;
    if (args.amount == 0) return 0;
    if (args.beyond_range) {
        std::puts(kNotEnough);
        std::fprintf(stderr, "flink-gpu-discovery: %s GPUs requested, more than any host has\n", argv[1]);
        return 1;
    }
    if (args.script.coordination_mode && !parent_ran_us(parent)) return 1;

    // One deadline for all NVML work: nvmlInit can hang (NVIDIA/go-nvml#152), any query can.
    timespec start{};
    clock_gettime(CLOCK_MONOTONIC, &start);
    // No enumeration: the state read takes a GPU's handle (seconds each without persistence mode) only
    // when it reads that GPU.
    const flinkgpu::NvmlLibrary* lib = nullptr;
    flinkgpu::Stall stall;
    const flinkgpu::Status status = flinkgpu::open_within("", args.nvml_timeout, &lib, &stall);
    if (!status.ok() && !stall.function.empty()) {  // past the deadline: the core's sentence (with its advice)
        std::fprintf(stderr, "flink-gpu-discovery: %s No GPU was claimed.\n", status.message.c_str());
        return leave(1);
    }
    if (!status.ok()) {
        std::fprintf(stderr, "flink-gpu-discovery: %s\n", status.message.c_str());
        return 1;
    }

    // The state now, judged for our parent (it is the owner and the TaskManager), then the best or a claim.
    // The coordination file is locked only after the read, with no NVML call of ours waited for (a stuck
    // one is abandoned on its own thread, holding no lock of ours).
    flinkgpu::policy::DiscoveryRequest request;
    request.enumerate_by_reading = true;
    request.owner = request.taskmanager = parent.pid;
    request.busy = args.busy;
    request.topology = args.topology;
    request.nvml_timeout = args.nvml_timeout;
    request.spent = seconds_since(start);
    request.amount = static_cast<std::size_t>(args.amount);
    request.coordinated = args.script.coordination_mode;
    request.coordination.path = args.script.coordination_file;
    // What the choice found is said before anything is claimed; NVML may have taken long: a parent that
    // died meanwhile asks for nothing any more.
    // A claim that finds a GPU taken meanwhile reads again and comes here again: each line is said once.
    std::vector<std::string> said;
    const auto say = [&said](std::string line) {
        if (std::find(said.begin(), said.end(), line) != said.end()) return;
        std::fprintf(stderr, "flink-gpu-discovery: %s\n", line.c_str());
        said.push_back(std::move(line));
    };
    request.before_claim = [&](const flinkgpu::Choice& choice) {
        for (const auto& s : choice.stalls)
            say((s.gpu == flinkgpu::ReadMonitor::kLibrary ? "" : "GPU " + std::to_string(s.gpu) + ": ") +
                flinkgpu::stall_text(s, args.nvml_timeout) + ": its GPUs are unknown and not handed out");
        for (const auto& state : choice.states)
            for (const auto& warning : state.warnings) say("GPU " + state.index + ": " + warning);
        for (const auto& [index, why] : choice.ranking.left_out) say(flinkgpu::policy::left_out_text(index, why));
        return !args.script.coordination_mode || parent_unchanged(parent);
    };
    const flinkgpu::policy::DiscoveryOutcome out = flinkgpu::policy::discover(*lib, request);
    for (const flinkgpu::Notice& notice : out.notices)  // the claim's: unparsable lines, a lease problem, reclaims
        if (notice.level == flinkgpu::NoticeLevel::kWarning)
            std::fprintf(stderr, "flink-gpu-discovery: %s\n", notice.text.c_str());
    if (out.status.code == flinkgpu::StatusCode::kNotEnough) std::puts(kNotEnough);
    if (!out.status.ok()) {
        std::fprintf(stderr, "flink-gpu-discovery: %s\n", out.status.message.c_str());
        return leave(1);
    }
    if (args.script.coordination_mode) return leave(print_claimed(args, out, parent));
    // the best `amount`, printed in index order as the stock script prints its first ones
    std::vector<std::string> chosen = out.chosen;
    flinkgpu::sort_indices(&chosen);
    return leave(print_indices(chosen));
}
