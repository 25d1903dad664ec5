// Unit tests of the binding policy (docs/design.md §9.3), with real files, real processes and real threads.
#include "coordination/bindings.hpp"
#include "coordination/liveness.hpp"

#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "tests/check.hpp"
#include "tests/fixtures.hpp"

namespace bi = flinkgpu::binding;
namespace co = flinkgpu::coordination;
using fixtures::gpus;
using fixtures::joined;
using fixtures::kill_and_reap;
using fixtures::lift_growth_limit;
using fixtures::limit_growth_to;
using fixtures::read_text;
using fixtures::spawn_sleeper;

static std::string g_dir;

static std::string fresh_path(const char* name) {
    static int counter = 0;
    return g_dir + "/" + name + "-" + std::to_string(++counter) + ".bindings";
}

static co::Options opts_for(const std::string& path) {
    co::Options o;
    o.path = path;
    return o;
}

static bi::Holder process(pid_t pid) {
    bi::Holder h;
    h.pid = pid;
    h.taskmanager = getpid();
    return h;
}

static bi::Holder slot(pid_t tid, const std::string& id) {
    bi::Holder h;
    h.pid = tid;
    h.slot = id;
    h.taskmanager = getpid();
    return h;
}

static std::string bound(const std::string& path, const bi::Holder& h, const std::vector<std::string>& g,
                         std::size_t count, std::uint32_t share) {
    const bi::BindResult r = bi::bind(opts_for(path), h, g, count, share);
    if (!r.status.ok()) return "error: " + r.status.message;
    return joined(r.indices);
}

// A thread that lives until released, for slot holders (a slot's lines are judged by their thread).
class LiveThread {
public:
    LiveThread() : thread_([this] { run(); }) {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this] { return tid_ != 0; });
    }
    ~LiveThread() { end(); }
    pid_t tid() const { return tid_; }
    void end() {
        {
            std::lock_guard<std::mutex> lock(mutex_);
            done_ = true;
        }
        cv_.notify_all();
        if (thread_.joinable()) thread_.join();
    }

private:
    void run() {
        std::unique_lock<std::mutex> lock(mutex_);
        tid_ = static_cast<pid_t>(syscall(SYS_gettid));
        cv_.notify_all();
        cv_.wait(lock, [this] { return done_; });
    }
    std::mutex mutex_;
    std::condition_variable cv_;
    pid_t tid_ = 0;
    bool done_ = false;
    std::thread thread_;
};

TEST_CASE(least_bound_first_lowest_index_among_equals) {
    const std::string path = fresh_path("spread");
    std::vector<pid_t> holders;
    for (int i = 0; i < 5; ++i) holders.push_back(spawn_sleeper());
    CHECK_EQ(bound(path, process(holders[0]), gpus(2), 1, 2), std::string("0"));
    CHECK_EQ(bound(path, process(holders[1]), gpus(2), 1, 2), std::string("1"));
    CHECK_EQ(bound(path, process(holders[2]), gpus(2), 1, 2), std::string("0"));
    CHECK_EQ(bound(path, process(holders[3]), gpus(2), 1, 2), std::string("1"));
    const bi::BindResult full = bi::bind(opts_for(path), process(holders[4]), gpus(2), 1, 2);
    CHECK(full.status.code == flinkgpu::StatusCode::kNotEnough);
    const std::string a = std::to_string(holders[0]), c = std::to_string(holders[2]);
    CHECK(full.status.message.find("GPU 0 is bound by pid " + a + ", pid " + c + " (2 of at most 2)") !=
          std::string::npos);
    CHECK(full.status.message.find("Bindings file: " + path) != std::string::npos);
    // a freed place is taken before a GPU with more holders: kill one holder of GPU 1
    kill_and_reap(holders[1]);
    CHECK_EQ(bound(path, process(holders[4]), gpus(2), 1, 2), std::string("1"));
    CHECK(read_text(path).find(std::to_string(holders[1]) + "\t") == std::string::npos);  // its line went
    for (pid_t p : holders) kill_and_reap(p);
}

TEST_CASE(pack_fills_a_gpu_before_the_next_one) {
    const std::string path = fresh_path("pack");
    std::vector<pid_t> holders;
    for (int i = 0; i < 4; ++i) holders.push_back(spawn_sleeper());
    bi::Placement pack;
    pack.pack = true;
    auto packed = [&](pid_t pid) {
        const bi::BindResult r = bi::bind(opts_for(path), process(pid), gpus(2), 1, 2, {}, {}, pack);
        return r.status.ok() ? joined(r.indices) : "error: " + r.status.message;
    };
    // spread would give 0, 1, 0, 1: pack fills GPU 0 up to its two holders first, and GPU 1 stays whole
    CHECK_EQ(packed(holders[0]), std::string("0"));
    CHECK_EQ(packed(holders[1]), std::string("0"));
    CHECK_EQ(packed(holders[2]), std::string("1"));
    CHECK_EQ(packed(holders[3]), std::string("1"));
    for (pid_t p : holders) kill_and_reap(p);
}

TEST_CASE(a_bind_of_two_takes_the_bridged_pair) {
    const std::string path = fresh_path("joined");
    const pid_t a = spawn_sleeper(), b = spawn_sleeper();
    flinkgpu::topology::Links links;  // bridges on 0-2 and 1-3, the rest through a host bridge
    for (unsigned x = 0; x < 4; ++x)
        for (unsigned y = x + 1; y < 4; ++y)
            links.set(x, y,
                      {(x == 0 && y == 2) || (x == 1 && y == 3) ? 4u : 0u, flinkgpu::topology::Pcie::kHostBridge});
    bi::Placement joined_best;
    joined_best.links = &links;
    const bi::BindResult first = bi::bind(opts_for(path), process(a), gpus(4), 2, 1, {}, {}, joined_best);
    CHECK_EQ(joined(first.indices), std::string("0,2"));
    const bi::BindResult second = bi::bind(opts_for(path), process(b), gpus(4), 2, 1, {}, {}, joined_best);
    CHECK_EQ(joined(second.indices), std::string("1,3"));
    // without links: index order
    const std::string other = fresh_path("joined");
    CHECK_EQ(bound(other, process(a), gpus(4), 2, 1), std::string("0,1"));
    for (pid_t p : {a, b}) kill_and_reap(p);
}

TEST_CASE(least_bound_wins_over_lower_index) {
    const std::string path = fresh_path("least");
    const pid_t a = spawn_sleeper(), b = spawn_sleeper(), c = spawn_sleeper(), d = spawn_sleeper();
    // GPU 0 gets two holders (given only 0), GPU 1 one: the next binder of {0, 1} takes 1
    CHECK_EQ(bound(path, process(a), {"0"}, 1, 3), std::string("0"));
    CHECK_EQ(bound(path, process(b), {"0"}, 1, 3), std::string("0"));
    CHECK_EQ(bound(path, process(c), {"1"}, 1, 3), std::string("1"));
    CHECK_EQ(bound(path, process(d), gpus(2), 1, 3), std::string("1"));
    for (pid_t p : {a, b, c, d}) kill_and_reap(p);
}

TEST_CASE(every_holders_share_limits_the_gpu) {
    const std::string path = fresh_path("share");
    const pid_t a = spawn_sleeper(), b = spawn_sleeper();
    CHECK_EQ(bound(path, process(a), {"0"}, 1, 1), std::string("0"));
    const bi::BindResult r = bi::bind(opts_for(path), process(b), {"0"}, 1, 4);
    CHECK(r.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(r.status.message.find("(1 of at most 1)") != std::string::npos);
    const std::string other = fresh_path("share");
    CHECK_EQ(bound(other, process(a), {"0"}, 1, 4), std::string("0"));
    CHECK(bi::bind(opts_for(other), process(b), {"0"}, 1, 1).status.code == flinkgpu::StatusCode::kNotEnough);
    for (pid_t p : {a, b}) kill_and_reap(p);
}

TEST_CASE(a_holder_asking_again_gets_what_it_holds) {
    const std::string path = fresh_path("again");
    const pid_t a = spawn_sleeper();
    CHECK_EQ(bound(path, process(a), gpus(4), 1, 1), std::string("0"));
    const bi::BindResult more = bi::bind(opts_for(path), process(a), gpus(4), 2, 1);
    CHECK(more.status.ok() && joined(more.indices) == "0,1" && joined(more.added) == "1");
    const std::string before = read_text(path);
    const bi::BindResult fewer = bi::bind(opts_for(path), process(a), gpus(4), 1, 1);
    CHECK(fewer.status.ok() && joined(fewer.indices) == "0" && fewer.added.empty());
    CHECK_EQ(read_text(path), before);  // nothing new: nothing written
    kill_and_reap(a);
}

TEST_CASE(whole_gpu_and_its_units_exclude_each_other) {
    const std::string path = fresh_path("mig");
    const pid_t a = spawn_sleeper(), b = spawn_sleeper(), c = spawn_sleeper();
    CHECK_EQ(bound(path, process(a), {"0"}, 1, 1), std::string("0"));
    CHECK_EQ(bound(path, process(b), {"0:1", "0:2", "1"}, 1, 1), std::string("1"));
    const bi::BindResult r = bi::bind(opts_for(path), process(c), {"0:1"}, 1, 8);
    CHECK(r.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(r.status.message.find("GPU 0:1 is taken by pid " + std::to_string(a) + " (binds 0)") != std::string::npos);
    for (pid_t p : {a, b, c}) kill_and_reap(p);
}

TEST_CASE(a_holder_binds_one_mig_unit) {
    const std::string path = fresh_path("unit");
    const pid_t a = spawn_sleeper();
    const bi::BindResult two = bi::bind(opts_for(path), process(a), {"0:1", "0:2"}, 2, 1);
    CHECK(two.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(two.status.message.find("at most one MIG unit") != std::string::npos);
    CHECK_EQ(bound(path, process(a), {"0:1", "0:2"}, 1, 1), std::string("0:1"));
    CHECK(bi::bind(opts_for(path), process(a), {"0:1", "0:2"}, 2, 1).status.code == flinkgpu::StatusCode::kNotEnough);
    // a unit and a whole GPU of another GPU are fine together
    CHECK_EQ(bound(path, process(a), {"0:1", "0:2", "1"}, 2, 1), std::string("0:1,1"));
    kill_and_reap(a);
}

TEST_CASE(the_slots_of_one_taskmanager_share_one_mig_unit) {
    const std::string path = fresh_path("slot-unit");
    LiveThread t1, t2, t3;
    const std::vector<std::string> units = {"0:1", "0:2"};
    CHECK_EQ(bound(path, slot(t1.tid(), "a"), units, 1, 2), std::string("0:1"));
    // another slot of the same TaskManager process: only the unit the process has, while it can be shared
    CHECK_EQ(bound(path, slot(t2.tid(), "b"), units, 1, 2), std::string("0:1"));
    const bi::BindResult third = bi::bind(opts_for(path), slot(t3.tid(), "c"), units, 1, 2);
    CHECK(third.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(third.status.message.find("share at most one MIG unit, 0:1") != std::string::npos);
    // a slot of another TaskManager process may take the other unit
    bi::Holder elsewhere = slot(t3.tid(), "c");
    elsewhere.taskmanager = 1;
    CHECK_EQ(bound(path, elsewhere, units, 1, 2), std::string("0:2"));
}

TEST_CASE(more_gpus_asked_than_given_is_refused) {
    const pid_t a = spawn_sleeper();
    const bi::BindResult r = bi::bind(opts_for(fresh_path("more")), process(a), gpus(2), 3, 1);
    CHECK(r.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(r.status.message.find("it was given only 2 (0, 1)") != std::string::npos);
    CHECK(bi::bind(opts_for(fresh_path("none")), process(a), {}, 1, 1).status.message.find("it was given no GPUs") !=
          std::string::npos);
    kill_and_reap(a);
}

TEST_CASE(a_slot_lives_while_any_of_its_threads_does) {
    const std::string path = fresh_path("slot");
    LiveThread t1, t2, t3;
    CHECK_EQ(bound(path, slot(t1.tid(), "s1"), gpus(2), 1, 1), std::string("0"));
    // a second thread of the slot gets the same binding and writes its own line
    CHECK_EQ(bound(path, slot(t2.tid(), "s1"), gpus(2), 1, 1), std::string("0"));
    CHECK(read_text(path).find(std::to_string(t2.tid()) + "\t") != std::string::npos);
    t1.end();
    CHECK_EQ(bound(path, slot(t3.tid(), "s2"), gpus(2), 1, 1), std::string("1"));  // s1 still holds 0 via t2
    t2.end();
    LiveThread t4;
    CHECK_EQ(bound(path, slot(t4.tid(), "s3"), {"0"}, 1, 1), std::string("0"));  // s1's threads are gone
    // the same slot id under another TaskManager is another holder
    bi::Holder elsewhere = slot(t4.tid(), "s2");
    elsewhere.taskmanager = 1;
    CHECK(bi::bind(opts_for(path), elsewhere, gpus(2), 1, 1).status.code == flinkgpu::StatusCode::kNotEnough);
}

TEST_CASE(unbind_removes_what_the_holder_wrote) {
    const std::string path = fresh_path("unbind");
    LiveThread t1, t2;
    const bi::Holder me = process(getpid());
    CHECK_EQ(bound(path, me, gpus(3), 1, 1), std::string("0"));
    CHECK(read_text(path).find("\tlease=0\t") != std::string::npos);  // the calling process leases
    CHECK_EQ(bound(path, slot(t1.tid(), "s"), gpus(3), 1, 1), std::string("1"));
    CHECK_EQ(bound(path, slot(t2.tid(), "s"), gpus(3), 1, 1), std::string("1"));
    const co::ReleaseResult r1 = bi::unbind(opts_for(path), slot(t1.tid(), "s"));
    CHECK(r1.status.ok() && joined(r1.released) == "1");
    CHECK(read_text(path).find(std::to_string(t2.tid()) + "\t") != std::string::npos);  // t2's line stays
    const co::ReleaseResult r2 = bi::unbind(opts_for(path), me);
    CHECK(r2.status.ok() && joined(r2.released) == "0");
    CHECK(read_text(path).find("0 " + std::to_string(getpid()) + "\t") == std::string::npos);
    CHECK(bi::unbind(opts_for(fresh_path("none")), me).status.ok());  // no file: nothing held
}

// A slot thread of this process writes the process's lease (other pid namespaces cannot probe the thread),
// the one lease the process keeps for the file for its life. A thread of another process gets none.
TEST_CASE(slot_threads_of_this_process_carry_its_lease) {
    const std::string path = fresh_path("thread-lease");
    LiveThread t1;
    std::uint32_t lease = 99;
    CHECK_EQ(bound(path, slot(t1.tid(), "s"), gpus(3), 1, 1), std::string("0"));
    CHECK(read_text(path).find("0 " + std::to_string(t1.tid()) + "\t") != std::string::npos);
    CHECK(read_text(path).find("\tlease=0\t") != std::string::npos);
    CHECK(co::Leases(path).held(&lease) && lease == 0);
    const bi::Holder me = process(getpid());
    CHECK_EQ(bound(path, me, gpus(3), 1, 1), std::string("1"));
    CHECK(read_text(path).find("\tlease=0\t") != std::string::npos);  // the process holder's line: the same lease
    CHECK(joined(bi::unbind(opts_for(path), me).released) == "1");
    CHECK(joined(bi::unbind(opts_for(path), slot(t1.tid(), "s")).released) == "0");
    CHECK(co::Leases(path).held(&lease) && lease == 0);  // no line names it: it proves nothing, and is reused

    // released after its thread ended (from another thread)
    LiveThread t2;
    const pid_t ended = t2.tid();
    CHECK_EQ(bound(path, slot(ended, "s"), gpus(3), 1, 1), std::string("0"));
    CHECK(read_text(path).find("\tlease=0\t") != std::string::npos);
    t2.end();
    CHECK(joined(bi::unbind(opts_for(path), slot(ended, "s")).released) == "0");
    CHECK(read_text(path).empty());

    const pid_t other = spawn_sleeper();
    CHECK_EQ(bound(path, slot(other, "t"), gpus(3), 1, 1), std::string("0"));
    CHECK(read_text(path).find("lease=") == std::string::npos);
    kill_and_reap(other);
}

// A bind whose write fails leaves the file as it was, for a process holder and a slot thread alike; the
// process keeps its one lease (which no line names then, and so proves nothing) for the next bind.
TEST_CASE(a_failed_write_leaves_the_file_as_it_was) {
    const std::string path = fresh_path("efbig");
    const int failed_before = check::failures();
    const pid_t child = fork();  // the file size limit and the lease are the child's
    if (child == 0) {
        signal(SIGXFSZ, SIG_IGN);
        LiveThread t;
        std::uint32_t lease = 0;
        {
            std::ofstream(path) << "\n";
        }
        CHECK(limit_growth_to(path));
        CHECK(!bi::bind(opts_for(path), slot(t.tid(), "s"), gpus(2), 1, 1).status.ok());
        CHECK(!bi::bind(opts_for(path), process(getpid()), gpus(2), 1, 1).status.ok());
        CHECK(read_text(path) == "\n");

        CHECK(lift_growth_limit());
        CHECK_EQ(bound(path, process(getpid()), gpus(2), 1, 1), std::string("0"));
        const std::string one = read_text(path);
        CHECK(limit_growth_to(path));
        CHECK(!bi::bind(opts_for(path), slot(t.tid(), "s"), gpus(2), 1, 1).status.ok());
        CHECK(read_text(path) == one);
        CHECK(co::Leases(path).held(&lease) && lease == 0);  // the one lease, which the process's line names
        t.end();
        std::fflush(stderr);
        _exit(check::failures() == failed_before ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

TEST_CASE(an_unparsable_line_blocks_its_gpu) {
    const std::string path = fresh_path("bad");
    {
        std::ofstream out(path);
        out << "0 garbage\n";
    }
    const pid_t a = spawn_sleeper();
    const bi::BindResult r = bi::bind(opts_for(path), process(a), gpus(2), 1, 1);
    CHECK(r.status.ok() && joined(r.indices) == "1" && r.unparsable.size() == 1);
    CHECK(read_text(path).rfind("0 garbage\n", 0) == 0);  // kept byte for byte
    const bi::BindResult none = bi::bind(opts_for(path), process(a), {"0"}, 1, 1);
    CHECK(none.status.message.find("GPU 0 is blocked by line 1, which cannot be parsed.") != std::string::npos);
    CHECK(none.status.message.find("correct or delete it by hand (flink-gpu coordination show --file " + path +
                                   " lists such lines).") != std::string::npos);
    kill_and_reap(a);
}

TEST_CASE(invalid_holders_counts_and_shares_are_refused) {
    const std::string path = fresh_path("invalid");
    const pid_t me = getpid();
    auto code = [&](const bi::Holder& h, const std::vector<std::string>& g, std::size_t n, std::uint32_t k) {
        return bi::bind(opts_for(path), h, g, n, k).status.code;
    };
    const auto invalid = flinkgpu::StatusCode::kInvalidArgument;
    CHECK(code(process(0), gpus(1), 1, 1) == invalid);
    CHECK(code(slot(me, "a/b"), gpus(1), 1, 1) == invalid);
    CHECK(code(slot(me, std::string(129, 'a')), gpus(1), 1, 1) == invalid);
    CHECK(bi::check_slot("").code == invalid && bi::check_slot("a\nb").message.find("'a\\x0ab'") != std::string::npos);
    CHECK(code(process(me), gpus(1), 1, 0) == invalid);
    CHECK(code(process(me), gpus(1), 1, co::kMaxShare + 1) == invalid);
    CHECK(code(process(me), {"0 1"}, 1, 1) == invalid);
    pid_t gone = fork();
    if (gone == 0) _exit(0);
    waitpid(gone, nullptr, 0);
    const bi::BindResult r = bi::bind(opts_for(path), process(gone), gpus(1), 1, 1);
    CHECK(r.status.code == invalid && r.status.message.find("does not exist") != std::string::npos);
    CHECK(bi::bind(opts_for(path), process(me), gpus(1), 0, 1).status.ok());  // count 0 binds nothing
    std::ifstream created(path);
    CHECK(!created.good());  // and touched no file
}

// Processes binding at once, each for itself (with its lease): never more holders on a GPU than allowed.
// Runs `bind` in `n` forked processes at once (each binds for itself and holds its binding until killed):
// how many got each binding ("0", "1", ...; "refused" for a failure). The processes are killed after.
static std::map<std::string, int> bind_at_once(int n, const std::function<bi::BindResult()>& bind) {
    int results[2];
    CHECK(pipe(results) == 0);
    int go[2];
    CHECK(pipe(go) == 0);
    std::vector<pid_t> children;
    for (int i = 0; i < n; ++i) {
        const pid_t pid = fork();
        if (pid == 0) {
            close(results[0]);
            close(go[1]);
            char c;
            if (read(go[0], &c, 1) != 0) _exit(5);  // all start when the parent closes the pipe
            const bi::BindResult r = bind();
            const std::string line = (r.status.ok() ? joined(r.indices) : "refused") + "\n";
            if (write(results[1], line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(6);
            for (;;) pause();  // hold the binding until killed
        }
        children.push_back(pid);
    }
    close(results[1]);
    close(go[0]);
    close(go[1]);
    std::string all;
    char buf[256];
    while (std::count(all.begin(), all.end(), '\n') < n) {
        const ssize_t got = read(results[0], buf, sizeof buf);
        if (got <= 0) break;
        all.append(buf, static_cast<std::size_t>(got));
    }
    close(results[0]);
    std::map<std::string, int> per_binding;
    std::istringstream lines(all);
    for (std::string l; std::getline(lines, l);) ++per_binding[l];
    for (pid_t p : children) kill_and_reap(p);
    return per_binding;
}

TEST_CASE(concurrent_processes_never_exceed_a_gpus_share) {
    for (const std::uint32_t share : {1u, 2u}) {
        const std::string path = fresh_path("concurrent");
        const std::map<std::string, int> per_gpu = bind_at_once(static_cast<int>(4 * share), [&] {
            return bi::bind(opts_for(path), process(getpid()), gpus(4), 1, share);
        });
        CHECK_EQ(per_gpu.size(), std::size_t{4});
        for (const auto& kv : per_gpu) CHECK_EQ(kv.second, static_cast<int>(share));
    }
}

// Memory requests (docs/design.md §9.3, Memory). GiB, as the messages print them.
static constexpr std::uint64_t kGiB = 1ULL << 30;

static bi::MemoryRequest request_of(std::uint64_t bytes,
                                    const std::vector<std::pair<std::uint64_t, std::uint64_t>>& gpu_memory) {
    bi::MemoryRequest m;
    m.bytes = bytes;
    for (const auto& [total, free] : gpu_memory) {
        bi::GpuMemory g;
        g.total = total;
        g.free = free;
        m.of.push_back(g);
    }
    return m;
}

static bi::BindResult bind_memory(const std::string& path, const bi::Holder& h, std::size_t gpu_count,
                                  std::uint32_t share, const bi::MemoryRequest& memory) {
    return bi::bind(opts_for(path), h, gpus(gpu_count), 1, share, {}, memory);
}

TEST_CASE(memory_requests_spread_and_a_request_that_fits_nowhere_is_refused_naming_memory) {
    const std::string path = fresh_path("memory-spread");
    const auto two_idle = request_of(30 * kGiB, {{80 * kGiB, 80 * kGiB}, {80 * kGiB, 80 * kGiB}});
    std::vector<pid_t> holders;
    for (int i = 0; i < 5; ++i) holders.push_back(spawn_sleeper());
    std::vector<std::string> got;
    for (int i = 0; i < 4; ++i) {
        const bi::BindResult r = bind_memory(path, process(holders[i]), 2, 8, two_idle);
        CHECK(r.status.ok());
        CHECK_EQ(r.memory, 30 * kGiB);
        got.push_back(joined(r.indices));
    }
    CHECK_EQ(joined(got), std::string("0,1,0,1"));  // two and two: 60 of 80 GiB on each
    CHECK(read_text(path).find("\tmem=" + std::to_string(30 * kGiB)) != std::string::npos);
    // a fifth 30 GiB fits neither (90 > 80), though 8 holders may share each
    const bi::BindResult fifth = bind_memory(path, process(holders[4]), 2, 8, two_idle);
    CHECK(fifth.status.code == flinkgpu::StatusCode::kNotEnough);
    const std::string& msg = fifth.status.message;
    CHECK(msg.find("30 GiB of memory on each") != std::string::npos);
    CHECK(msg.find("GPU 0 is bound by pid " + std::to_string(holders[0]) + ", pid " + std::to_string(holders[2]) +
                   " (2 of at most 8), 60 GiB of its 80 GiB requested, 80 GiB free") != std::string::npos);
    CHECK(msg.find("GPU 1 is bound by") != std::string::npos);
    CHECK(msg.find("Ask for less memory, run fewer subtasks per GPU, or give the TaskManager more GPUs.") !=
          std::string::npos);
    // a killed holder's request is free again with its binding
    kill_and_reap(holders[1]);
    const bi::BindResult again = bind_memory(path, process(holders[4]), 2, 8, two_idle);
    CHECK(again.status.ok());
    CHECK_EQ(joined(again.indices), std::string("1"));
    for (pid_t p : holders) kill_and_reap(p);
}

TEST_CASE(a_gpu_only_an_unparsable_line_blocks_is_not_told_to_ask_for_less_memory) {
    const std::string path = fresh_path("memory-bad");
    {
        std::ofstream out(path);
        out << "\n0 garbage\n";
    }
    const pid_t a = spawn_sleeper();
    const bi::BindResult r = bind_memory(path, process(a), 1, 1, request_of(10 * kGiB, {{80 * kGiB, 80 * kGiB}}));
    CHECK(r.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(r.status.message.find("GPU 0 is blocked by line 2, which cannot be parsed. A line that cannot be parsed "
                                "blocks its GPU for every holder: correct or delete it by hand") != std::string::npos);
    CHECK(r.status.message.find("Ask for less memory") == std::string::npos);
    kill_and_reap(a);
}

TEST_CASE(a_gpu_without_the_free_memory_is_not_given_a_request_another_fits) {
    const std::string path = fresh_path("memory-free");
    const pid_t a = spawn_sleeper(), b = spawn_sleeper();
    // GPU 0 is preferred (index order) but has 11 GiB free; GPU 1 has 40
    const auto memory = request_of(20 * kGiB, {{80 * kGiB, 11 * kGiB}, {80 * kGiB, 40 * kGiB}});
    const bi::BindResult r = bind_memory(path, process(a), 2, 4, memory);
    CHECK(r.status.ok());
    CHECK_EQ(joined(r.indices), std::string("1"));
    // without a request the ranking is as before: GPU 0
    CHECK_EQ(bound(path, process(b), gpus(2), 1, 4), std::string("0"));
    // the shortage names each GPU's free memory, and one whose memory is not known
    bi::MemoryRequest none_known = request_of(20 * kGiB, {{80 * kGiB, 11 * kGiB}});
    none_known.of.push_back(bi::GpuMemory());
    const pid_t c = spawn_sleeper();
    const bi::BindResult short_of = bind_memory(path, process(c), 2, 4, none_known);
    CHECK(short_of.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(short_of.status.message.find("none of its 80 GiB requested, 11 GiB free") != std::string::npos);
    CHECK(short_of.status.message.find("GPU 1 is bound by pid " + std::to_string(a) +
                                       " (1 of at most 4), its memory not known") != std::string::npos);
    for (pid_t p : {a, b, c}) kill_and_reap(p);
}

TEST_CASE(a_memory_request_is_checked_and_kept_by_its_holder) {
    const std::string path = fresh_path("memory-holder");
    const pid_t a = spawn_sleeper();
    const auto idle = request_of(10 * kGiB, {{80 * kGiB, 80 * kGiB}, {80 * kGiB, 80 * kGiB}});
    CHECK(bind_memory(path, process(a), 2, 4, idle).status.ok());
    // asking again with the same request gets what it has; with another one is refused, naming both
    const bi::BindResult same = bind_memory(path, process(a), 2, 4, idle);
    CHECK(same.status.ok());
    CHECK_EQ(joined(same.indices), std::string("0"));
    const bi::BindResult other =
        bind_memory(path, process(a), 2, 4, request_of(12 * kGiB, {{80 * kGiB, 80 * kGiB}, {80 * kGiB, 80 * kGiB}}));
    CHECK(other.status.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK(other.status.message.find("with a memory request of 12 GiB: it binds GPU 0 with a memory request of 10 GiB "
                                    "already") != std::string::npos);
    // asking again without a request gets the one it has
    const bi::BindResult adopted = bi::bind(opts_for(path), process(a), gpus(2), 1, 4);
    CHECK(adopted.status.ok());
    CHECK_EQ(adopted.memory, 10 * kGiB);
    // topping up with it: the new GPU takes the same request, checked like any other
    const bi::BindResult topped = bi::bind(opts_for(path), process(a), gpus(2), 2, 4, {}, idle);
    CHECK(topped.status.ok());
    CHECK_EQ(joined(topped.indices), std::string("0,1"));
    std::size_t recorded = 0;
    for (const co::Line& l : co::parse_file(read_text(path)))
        if (l.kind == co::LineKind::kEntry && l.entry.pid == a && l.entry.memory == 10 * kGiB) ++recorded;
    CHECK_EQ(recorded, std::size_t{2});
    // larger than every GPU: nothing fits (the policy names it as a bad request, policy/bind.cpp)
    const pid_t b = spawn_sleeper();
    const bi::BindResult huge =
        bind_memory(path, process(b), 2, 4, request_of(100 * kGiB, {{80 * kGiB, 80 * kGiB}, {40 * kGiB, 40 * kGiB}}));
    CHECK(huge.status.code == flinkgpu::StatusCode::kNotEnough);
    // readings that are not one per GPU are a caller's error
    const bi::BindResult mismatched = bind_memory(path, process(b), 2, 4, request_of(kGiB, {{80 * kGiB, 80 * kGiB}}));
    CHECK(mismatched.status.code == flinkgpu::StatusCode::kInvalidArgument);
    for (pid_t p : {a, b}) kill_and_reap(p);
}

TEST_CASE(the_slots_threads_share_one_request) {
    const std::string path = fresh_path("memory-slot");
    const auto memory = request_of(50 * kGiB, {{80 * kGiB, 80 * kGiB}});
    LiveThread t1, t2;
    // two threads of one slot: one holder, one 50 GiB request, though each writes its line
    CHECK(bi::bind(opts_for(path), slot(t1.tid(), "s1"), gpus(1), 1, 2, {}, memory).status.ok());
    CHECK(bi::bind(opts_for(path), slot(t2.tid(), "s1"), gpus(1), 1, 2, {}, memory).status.ok());
    // another slot's 50 GiB does not fit beside it (100 > 80); 30 GiB does
    LiveThread t3;
    const bi::BindResult refused = bi::bind(opts_for(path), slot(t3.tid(), "s2"), gpus(1), 1, 2, {}, memory);
    CHECK(refused.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(refused.status.message.find("50 GiB of its 80 GiB requested") != std::string::npos);
    CHECK(bi::bind(opts_for(path), slot(t3.tid(), "s2"), gpus(1), 1, 2, {},
                   request_of(30 * kGiB, {{80 * kGiB, 80 * kGiB}}))
              .status.ok());
}

TEST_CASE(memory_decides_before_the_least_bound_gpu_and_holders_without_a_request_count_nothing) {
    const std::string path = fresh_path("memory-decides");
    const pid_t a = spawn_sleeper(), b = spawn_sleeper(), c = spawn_sleeper(), d = spawn_sleeper();
    // GPU 0: two holders of 10 GiB each and one without a request; GPU 1: one holder of 60 GiB
    CHECK(bi::bind(opts_for(path), process(a), {"0"}, 1, 8, {}, request_of(10 * kGiB, {{80 * kGiB, 80 * kGiB}}))
              .status.ok());
    CHECK(bi::bind(opts_for(path), process(b), {"0"}, 1, 8, {}, request_of(10 * kGiB, {{80 * kGiB, 80 * kGiB}}))
              .status.ok());
    CHECK_EQ(bound(path, process(c), {"0"}, 1, 8), std::string("0"));
    CHECK(bi::bind(opts_for(path), process(d), {"1"}, 1, 8, {}, request_of(60 * kGiB, {{80 * kGiB, 80 * kGiB}}))
              .status.ok());
    // least-bound would be GPU 1 (one holder), but 60 + 30 > 80: GPU 0 (20 + 30 of 80)
    const pid_t e = spawn_sleeper();
    const bi::BindResult r =
        bind_memory(path, process(e), 2, 8, request_of(30 * kGiB, {{80 * kGiB, 80 * kGiB}, {80 * kGiB, 80 * kGiB}}));
    CHECK(r.status.ok());
    CHECK_EQ(joined(r.indices), std::string("0"));
    for (pid_t p : {a, b, c, d, e}) kill_and_reap(p);
}

TEST_CASE(what_the_binders_own_processes_use_counts_as_free_for_its_request) {
    const std::string path = fresh_path("memory-own");
    const pid_t a = spawn_sleeper();
    // 20 GiB free, 30 asked: refused, unless the binder's own processes hold at least 10 GiB it may reuse
    bi::MemoryRequest memory = request_of(30 * kGiB, {{80 * kGiB, 20 * kGiB}});
    CHECK(bind_memory(path, process(a), 1, 2, memory).status.code == flinkgpu::StatusCode::kNotEnough);
    memory.of[0].own_used = 10 * kGiB;
    CHECK(bind_memory(path, process(a), 1, 2, memory).status.ok());
    kill_and_reap(a);
}

TEST_CASE(a_slot_reuses_only_what_its_taskmanager_uses_beyond_its_other_slots_requests) {
    const std::string path = fresh_path("memory-siblings");
    // slot a binds 60 GiB of an 80 GiB GPU; the TaskManager (this process) then uses them: 5 GiB free
    auto a = std::make_unique<LiveThread>();
    CHECK(bi::bind(opts_for(path), slot(a->tid(), "a"), gpus(1), 1, 4, {},
                   request_of(60 * kGiB, {{80 * kGiB, 80 * kGiB}}))
              .status.ok());
    bi::MemoryRequest used = request_of(10 * kGiB, {{80 * kGiB, 5 * kGiB}});
    used.of[0].own_used = 60 * kGiB;
    // slot b's 10 GiB: the process's 60 GiB are slot a's, none of it b's to reuse (another process is refused
    // too)
    LiveThread b;
    const bi::BindResult refused = bi::bind(opts_for(path), slot(b.tid(), "b"), gpus(1), 1, 4, {}, used);
    CHECK(refused.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(refused.status.message.find("GPU 0 is bound by slot a of pid " + std::to_string(getpid()) +
                                      " (1 of at most 4), 60 GiB of its 80 GiB requested, 5 GiB free") !=
          std::string::npos);
    // a restarted slot a (its old thread ended, its line dead) reuses what the allocator still caches
    a.reset();
    LiveThread again;
    used.bytes = 60 * kGiB;
    const bi::BindResult rebound = bi::bind(opts_for(path), slot(again.tid(), "a"), gpus(1), 1, 4, {}, used);
    CHECK(rebound.status.ok());
    CHECK_EQ(joined(rebound.indices), std::string("0"));
}

TEST_CASE(a_holder_has_one_memory_request_on_every_gpu_it_binds) {
    const std::string path = fresh_path("memory-one-request");
    const pid_t a = spawn_sleeper();
    const auto idle = [](std::uint64_t bytes) {
        return request_of(bytes, {{80 * kGiB, 80 * kGiB}, {80 * kGiB, 80 * kGiB}});
    };
    CHECK(bi::bind(opts_for(path), process(a), {"0", "1"}, 2, 4, {}, idle(30 * kGiB)).status.ok());
    // among GPUs 2 and 3, none of which it binds: another request is refused, naming both
    const bi::BindResult other = bi::bind(opts_for(path), process(a), {"2", "3"}, 1, 4, {}, idle(40 * kGiB));
    CHECK(other.status.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK(other.status.message.find("with a memory request of 40 GiB: it binds GPU 0 with a memory request of 30 GiB "
                                    "already") != std::string::npos);
    // without one, it gets its request there
    const bi::BindResult adopted = bi::bind(opts_for(path), process(a), {"2", "3"}, 1, 4, {}, idle(0));
    CHECK(adopted.status.ok());
    CHECK_EQ(joined(adopted.indices), std::string("2"));
    CHECK_EQ(adopted.memory, 30 * kGiB);
    for (const co::Line& l : co::parse_file(read_text(path)))
        if (l.kind == co::LineKind::kEntry) CHECK_EQ(l.entry.memory, 30 * kGiB);
    kill_and_reap(a);
}

TEST_CASE(concurrent_binders_never_request_more_than_a_gpu_has) {
    const std::string path = fresh_path("memory-concurrent");
    constexpr int kBinders = 8;  // 8 x 30 GiB asked of 2 x 80 GiB: 2 fit on each, whatever the order
    std::map<std::string, int> per_gpu = bind_at_once(kBinders, [&] {
        return bind_memory(path, process(getpid()), 2, 8,
                           request_of(30 * kGiB, {{80 * kGiB, 80 * kGiB}, {80 * kGiB, 80 * kGiB}}));
    });
    CHECK_EQ(per_gpu["0"], 2);
    CHECK_EQ(per_gpu["1"], 2);
    CHECK_EQ(per_gpu["refused"], kBinders - 4);
}

// A process-mode worker whose TaskManager died lives on, orphaned: its line counts for nothing but stays while it
// runs, and where the memory it still uses is short, the shortage names it and how to end it instead of asking
// for less.
TEST_CASE(an_orphans_line_counts_for_nothing_stays_while_it_runs_and_is_named_where_memory_is_short) {
    const std::string path = fresh_path("orphan");
    const pid_t orphan = spawn_sleeper(), taskmanager = spawn_sleeper(), other = spawn_sleeper(),
                third = spawn_sleeper();
    bi::Holder worker;
    worker.pid = orphan;
    worker.taskmanager = taskmanager;
    CHECK(bind_memory(path, worker, 1, 1, request_of(60 * kGiB, {{80 * kGiB, 80 * kGiB}})).status.ok());
    kill_and_reap(taskmanager);
    // 70 GiB of the GPU in use: what the orphan allocated
    const bi::BindResult refused =
        bind_memory(path, process(other), 1, 1, request_of(20 * kGiB, {{80 * kGiB, 10 * kGiB}}));
    CHECK(refused.status.code == flinkgpu::StatusCode::kNotEnough);
    const std::string pid = std::to_string(orphan);
    CHECK(refused.status.message.find("GPU 0 is free, none of its 80 GiB requested, 10 GiB free. pid " + pid +
                                      ", a worker of TaskManager " + std::to_string(taskmanager) +
                                      " which is gone, still runs on GPU 0: end it (kill " + pid +
                                      "). Bindings file: ") != std::string::npos);
    CHECK(refused.status.message.find("Ask for less memory") == std::string::npos);
    CHECK(refused.orphans.size() == 1 && refused.orphans[0].pid == orphan &&
          refused.orphans[0].taskmanager == taskmanager && refused.orphans[0].index == "0");
    // where the memory is free, the GPU is the new holder's, and the orphan's line stays while it runs
    CHECK(bind_memory(path, process(other), 1, 1, request_of(60 * kGiB, {{80 * kGiB, 80 * kGiB}})).status.ok());
    CHECK(read_text(path).find("0 " + pid + "\t") != std::string::npos);
    // once it is gone, the next bind removes it
    kill_and_reap(orphan);
    CHECK_EQ(bound(path, process(third), gpus(2), 1, 1), std::string("1"));
    CHECK(read_text(path).find("0 " + pid + "\t") == std::string::npos);
    for (pid_t p : {other, third}) kill_and_reap(p);
}

int main(int argc, char** argv) {
    const fixtures::ScratchDir scratch("/tmp/flinkgpu-binding-XXXXXX");
    if (scratch.path().empty()) return 2;
    g_dir = scratch.path();
    return check::run(argc, argv);
}
