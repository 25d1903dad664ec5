// libFuzzer target for the coordination file reader (csrc/coordination/claims.*, docs/design.md §5.2).
//
// The parser is internal to coordination/claims.cpp, so it is driven through the public API on a real file:
// each input becomes the file's content, then snapshot, claim, release and clean_stale run on it.
// Before the content is written, "$$" is replaced by this process's pid, "$T" by its start time and "$N" by
// its pid namespace, so that the corpus can hold lines of a live owner (this process; pid 1 is another
// live one). A line of this pid counts as this process's where HolderIdentity::records says it records it.
//
// Checked for every input, besides "no crash, no hang, no sanitizer report":
//   * every call succeeds (the file is small, regular and unlocked) or, for claim, reports kNotEnough
//     and leaves the file byte for byte unchanged;
//   * a successful claim returns `amount` distinct indices of the host (whole GPUs and MIG units), none
//     of them held, or excluded by a whole-GPU or unit line (excludes()), by another live owner (an entry of another
//     pid namespace without a lease always is one) nor blocked by an unparsable line; it removes only reclaimed lines
//     of dead owners;
//   * unparsable lines survive every rewrite byte for byte and in order;
//   * after release no line of this process is left, and release touches nothing else.
//
// The file lives in a fresh directory under $FUZZ_TMPDIR (default /dev/shm, else /tmp).
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "coordination/claims.hpp"
#include "coordination/liveness.hpp"

namespace co = flinkgpu::coordination;

namespace {

std::string g_dir;
co::Options g_opts;
std::string g_self_pid;
std::string g_self_start;
std::string g_self_ns;
co::PidNamespace g_ns;
// Whole GPUs and the MIG units of GPU 1 (a host may mix them; a claim never takes both kinds of one GPU).
const std::vector<std::string> kHost = {"0", "1", "1:0", "1:2", "2", "3", "4", "5", "6", "7", "10", "11"};

[[noreturn]] void fail(const char* what, const std::string& detail = "") {
    std::fprintf(stderr, "contract violated: %s %s\n", what, detail.c_str());
    std::abort();
}

void remove_dir() {
    unlink(g_opts.path.c_str());
    unlink((g_opts.path + ".lease").c_str());
    rmdir(g_dir.c_str());
}

void write_file(const std::string& content) {
    const int fd = open(g_opts.path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) fail("cannot write the fuzz file", g_opts.path);
    std::size_t done = 0;
    while (done < content.size()) {
        const ssize_t n = write(fd, content.data() + done, content.size() - done);
        if (n <= 0) fail("cannot write the fuzz file", g_opts.path);
        done += static_cast<std::size_t>(n);
    }
    close(fd);
}

std::string read_file() {
    std::string out;
    const int fd = open(g_opts.path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) fail("cannot read the fuzz file back", g_opts.path);
    char buf[8192];
    ssize_t n;
    while ((n = read(fd, buf, sizeof buf)) > 0) out.append(buf, static_cast<std::size_t>(n));
    close(fd);
    return out;
}

std::string substitute(const std::string& in) {
    std::string out;
    for (std::size_t i = 0; i < in.size(); ++i) {
        if (in[i] == '$' && i + 1 < in.size() && (in[i + 1] == '$' || in[i + 1] == 'T' || in[i + 1] == 'N')) {
            out += in[i + 1] == '$' ? g_self_pid : in[i + 1] == 'T' ? g_self_start : g_self_ns;
            ++i;
        } else {
            out += in[i];
        }
    }
    return out;
}

std::vector<std::string> bad_texts(const std::vector<co::BadLine>& lines) {
    std::vector<std::string> out;
    for (const co::BadLine& l : lines) out.push_back(l.text);
    return out;
}

// Other processes of the host come and go while the fuzzer runs: an owner that died between the
// snapshot and the claim may rightly lose its GPU.
bool still_alive(const co::Entry& e) {
    if (e.verdict == co::Verdict::kOtherNamespace) return true;  // never judged by pid: never reclaimable
    std::uint64_t start = 0;
    return co::process_start_time(e.pid, &start) && (!e.has_start_time || start == e.start_time);
}

bool mine(const co::Entry& e) { return e.records(getpid(), true, g_ns); }

void expect_ok(const flinkgpu::Status& s, const char* what) {
    if (!s.ok()) fail(what, s.message);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
    const char* base = std::getenv("FUZZ_TMPDIR");
    std::string root = base != nullptr ? base : (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    std::string templ = root + "/flink-gpu-fuzz-XXXXXX";
    std::vector<char> buf(templ.begin(), templ.end());
    buf.push_back('\0');
    if (mkdtemp(buf.data()) == nullptr) fail("mkdtemp failed in", root);
    g_dir = buf.data();
    g_opts.path = g_dir + "/coordination";
    g_opts.timeout_ms = 2000;
    g_self_pid = std::to_string(getpid());
    std::uint64_t start = 0;
    if (!co::process_start_time(getpid(), &start)) fail("no start time for this process");
    g_self_start = std::to_string(start);
    g_ns = co::own_pid_namespace();
    g_self_ns = std::to_string(g_ns.inode);
    std::atexit(remove_dir);
    return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    // First byte: the amount to claim (0..4); the rest: the file.
    const std::size_t amount = data[0] % 5;
    const std::string content = substitute(std::string(reinterpret_cast<const char*>(data) + 1, size - 1));
    write_file(content);

    const co::Snapshot before = co::snapshot(g_opts);
    expect_ok(before.status, "snapshot failed:");
    if (!before.exists) fail("snapshot does not see the file");
    const std::vector<std::string> bad_before = bad_texts(before.unparsable);
    std::set<std::string> blocked;
    for (const co::BadLine& l : before.unparsable) {
        const std::size_t begin = l.text.find_first_not_of(" \t");
        if (begin == std::string::npos) continue;
        const std::size_t end = l.text.find_first_of(" \t", begin);
        blocked.insert(l.text.substr(begin, end == std::string::npos ? std::string::npos : end - begin));
    }
    std::vector<co::Entry> held_by_others;
    for (const co::Entry& e : before.entries) {
        if (e.index.empty()) fail("an entry with an empty index");
        if (e.line_number == 0) fail("an entry without a line number");
        if (e.alive && !mine(e)) held_by_others.push_back(e);
    }

    const co::ClaimResult claim = co::claim(g_opts, getpid(), kHost, amount);
    const std::string after_claim = read_file();
    if (claim.status.code == flinkgpu::StatusCode::kNotEnough) {
        if (after_claim != content) fail("a refused claim changed the file");
    } else {
        expect_ok(claim.status, "claim failed:");
        if (claim.indices.size() != amount) fail("claim returned the wrong number of GPUs");
        std::set<std::string> got(claim.indices.begin(), claim.indices.end());
        if (got.size() != amount) fail("claim returned an index twice");
        for (const std::string& index : claim.indices) {
            if (std::find(kHost.begin(), kHost.end(), index) == kHost.end()) fail("claimed a foreign index", index);
        }
        // Only what this call added: an index the owner held already stays its own.
        for (const std::string& index : claim.added) {
            if (blocked.count(index) != 0 || blocked.count(co::gpu_of(index)) != 0)
                fail("claimed a GPU blocked by an unparsable line:", index);
            for (const co::Entry& e : held_by_others) {  // the same index, or its GPU / a unit of it
                if (co::excludes(e, index) && still_alive(e)) fail("claimed a GPU of another live owner:", index);
            }
        }
        if (amount == 0 && after_claim != content) fail("a claim of 0 GPUs changed the file");
    }

    const co::Snapshot mid = co::snapshot(g_opts);
    expect_ok(mid.status, "snapshot after claim failed:");
    if (bad_texts(mid.unparsable) != bad_before) fail("claim changed the unparsable lines");
    std::set<std::string> own;
    for (const co::Entry& e : mid.entries) {
        if (mine(e) && e.alive) own.insert(e.index);
    }
    for (const std::string& index : claim.indices) {
        if (own.count(index) == 0) fail("a claimed GPU is not recorded for its owner:", index);
    }

    const co::ReleaseResult released = co::release(g_opts, getpid());
    expect_ok(released.status, "release failed:");
    const co::Snapshot after = co::snapshot(g_opts);
    expect_ok(after.status, "snapshot after release failed:");
    if (bad_texts(after.unparsable) != bad_before) fail("release changed the unparsable lines");
    std::size_t others_mid = 0, others_after = 0;
    for (const co::Entry& e : mid.entries) others_mid += !mine(e);
    for (const co::Entry& e : after.entries) {
        if (mine(e)) fail("a line of the owner survived its release");
        ++others_after;
    }
    if (others_after != others_mid) fail("release removed another owner's line");

    const co::CleanResult cleaned = co::clean_stale(g_opts);
    expect_ok(cleaned.status, "clean_stale failed:");
    if (bad_texts(cleaned.unparsable) != bad_before) fail("clean_stale reported other unparsable lines");
    const co::Snapshot last = co::snapshot(g_opts);
    expect_ok(last.status, "snapshot after clean_stale failed:");
    if (bad_texts(last.unparsable) != bad_before) fail("clean_stale changed the unparsable lines");
    if (last.entries.size() + cleaned.removed.size() != after.entries.size()) {
        fail("clean_stale removed a different number of lines than it reported");
    }
    return 0;
}
