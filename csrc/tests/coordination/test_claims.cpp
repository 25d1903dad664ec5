// Claims and releases on the coordination file (docs/design.md §5.2), with real files, real processes and
// real locks: who gets which GPU, what is reclaimed, what a shortage says; the file as a file is test_file.cpp.
#include "coordination/claims.hpp"
#include "coordination/file.hpp"
#include "coordination/lease.hpp"
#include "coordination/liveness.hpp"
#include "coordination/proc_locks.hpp"
#include "tests/check.hpp"
#include "tests/coordination/files.hpp"
#include "tests/fixtures.hpp"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

using fixtures::gpus;
using fixtures::joined;
using fixtures::kill_and_reap;
using fixtures::lift_growth_limit;
using fixtures::limit_growth_to;
using fixtures::read_text;
using fixtures::spawn_sleeper;

// ---- tests -----------------------------------------------------------------------------------------

TEST_CASE(a_lease_file_is_told_from_a_coordination_file_by_its_token_line_and_header) {
    using co::LeaseFileText;
    const std::string token = "0123456789abcdef";
    CHECK(co::lease_file_text("") == LeaseFileText::kEmpty);
    CHECK(co::lease_file_text(token + " 42\nflink-gpu lease file\n") == LeaseFileText::kLeaseFile);
    CHECK(co::lease_file_text(token + " 7\nflink-gpu lease file\n") == LeaseFileText::kLeaseFile);  // a copy
    // the version before the header: its token line alone, for any inode (a copy's too)
    CHECK(co::lease_file_text(token + " 42\n") == LeaseFileText::kOldLeaseFile);
    for (const std::string& other :
         {std::string("0 1\t50\tns=9\tlease=0\tlf=") + token + "\n", std::string("\n"), token + " 42",
          token + " 42\nflink-gpu lease file\n0 1\n", "flink-gpu lease file\n" + token + " 42\n", token + " 42\n0 1\n",
          std::string("0123456789ABCDEF 42\nflink-gpu lease file\n"),
          std::string("4294967295 4242\n")}) {  // the stock script's line: an NVML index has at most 10 digits
        CHECK(co::lease_file_text(other) == LeaseFileText::kOther);
    }
    // a coordination file that is a lease file is refused, naming the coordination file whose it is
    const auto refused = co::refuse_lease_file("/t/X.lease", token + " 42\nflink-gpu lease file\n");
    CHECK(!refused.ok() && refused.sys_errno == EINVAL);
    CHECK(refused.message.find("/t/X.lease as a coordination file") != std::string::npos);
    CHECK(refused.message.find("lease file of the coordination file /t/X ") != std::string::npos);
    CHECK(co::refuse_lease_file("/t/X.lease", "0 1\n").ok() && co::refuse_lease_file("/t/X.lease", "").ok());
}

TEST_CASE(claim_creates_file_in_flink_format) {
    const std::string path = fresh_path("basic");
    const pid_t me = getpid();
    co::ClaimResult r = co::claim(opts_for(path), me, gpus(4), 2);
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK(joined(r.indices) == "0,1");
    CHECK(joined(r.added) == "0,1");
    CHECK(r.reclaimed.empty());
    CHECK(read_text(path) == line_for("0", me, path) + "\n" + line_for("1", me, path) + "\n");
    struct statx st{};
    CHECK(statx(AT_FDCWD, path.c_str(), 0, STATX_MODE, &st) == 0);
    const mode_t mask = umask(0);
    umask(mask);
    CHECK((st.stx_mode & 0777) == (0644 & ~mask));
}

TEST_CASE(amount_zero_touches_nothing) {
    const std::string path = fresh_path("zero");
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(2), 0);
    CHECK(r.status.ok());
    CHECK(r.indices.empty());
    CHECK(!file_exists(path));
}

TEST_CASE(an_owner_asking_again_gets_what_it_holds) {
    const std::string path = fresh_path("again");
    const pid_t me = getpid();
    const co::Options o = opts_for(path);
    CHECK(joined(co::claim(o, me, gpus(4), 2).indices) == "0,1");
    const std::string after_first = read_text(path);
    co::ClaimResult same = co::claim(o, me, gpus(4), 2);
    CHECK(joined(same.indices) == "0,1");
    CHECK(same.added.empty());
    CHECK(read_text(path) == after_first);
    co::ClaimResult more = co::claim(o, me, gpus(4), 3);
    CHECK(joined(more.indices) == "0,1,2");
    CHECK(joined(more.added) == "2");
    // Fewer than held: the lowest ones, and it keeps holding all of them.
    co::ClaimResult fewer = co::claim(o, me, gpus(4), 1);
    CHECK(joined(fewer.indices) == "0");
    co::Snapshot s = co::snapshot(o);
    CHECK(s.entries.size() == 3);
}

TEST_CASE(free_first_then_dead_lowest_first) {
    const std::string path = fresh_path("order");
    const pid_t dead = dead_pid();
    // GPU 0 and 2 belong to a dead owner, 1 and 3 are free: free ones first, then the lowest dead one.
    write_text(path, "2 " + std::to_string(dead) + "\n0 " + std::to_string(dead) + "\n");
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(4), 3);
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK(joined(r.indices) == "0,1,3");
    CHECK(joined(r.reclaimed) == "0");
    CHECK(read_text(path) == "2 " + std::to_string(dead) + "\n" + line_for("1", getpid(), path) + "\n" +
                                 line_for("3", getpid(), path) + "\n" + line_for("0", getpid(), path) + "\n");
}

// With links, the best joined set of the last rank: a dead owner's GPU is as good as a free one, the owner's own
// GPU a member, and a worse rank never taken for a link.
TEST_CASE(a_claim_with_links_takes_the_best_joined_set_of_its_last_rank) {
    const std::string path = fresh_path("joined");
    const pid_t dead = dead_pid();
    flinkgpu::topology::Links links;  // bridges on 0-2 and 1-3, the rest through a host bridge
    for (unsigned x = 0; x < 4; ++x)
        for (unsigned y = x + 1; y < 4; ++y)
            links.set(x, y,
                      {(x == 0 && y == 2) || (x == 1 && y == 3) ? 4u : 0u, flinkgpu::topology::Pcie::kHostBridge});
    write_text(path, "2 " + std::to_string(dead) + "\n");
    const co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(4), 2, {}, {}, {}, &links);
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK_EQ(joined(r.indices), std::string("0,2"));
    CHECK_EQ(joined(r.reclaimed), std::string("2"));
    // the owner holds 0,2 and asks for 3: the one more is any, 1 (lowest)
    CHECK_EQ(joined(co::claim(opts_for(path), getpid(), gpus(4), 3, {}, {}, {}, &links).indices), std::string("0,1,2"));
    // ranks first: 2 is busy (rank 1), so of the idle 0, 1, 3 the bridged 1-3 pair
    const std::string other = fresh_path("joined");
    const co::ClaimResult ranked = co::claim(opts_for(other), getpid(), gpus(4), 2, {0, 0, 1, 0}, {}, {}, &links);
    CHECK_EQ(joined(ranked.indices), std::string("1,3"));
}

// A GPU the caller did not read because another live holder had it: counted and named, never taken; once
// that holder is gone it comes back as untaken (the caller reads it and asks again), still not taken.
TEST_CASE(a_not_takeable_gpu_is_never_taken_and_is_untaken_once_its_holder_is_gone) {
    const std::string path = fresh_path("not_takeable");
    const pid_t sleeper = spawn_sleeper();
    write_text(path, "0 " + std::to_string(sleeper) + "\n");
    const co::Options o = opts_for(path);
    co::ClaimResult held = co::claim(o, getpid(), gpus(2), 2, {0, 0}, {}, {"0"});
    CHECK(held.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK_MSG(held.status.message.find("pid " + std::to_string(sleeper) + " holds 0") != std::string::npos,
              held.status.message);
    CHECK(held.untaken.empty());
    kill_and_reap(sleeper);
    co::ClaimResult freed = co::claim(o, getpid(), gpus(2), 2, {0, 0}, {}, {"0"});
    CHECK(freed.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK(joined(freed.untaken) == "0");
    CHECK(read_text(path) == "0 " + std::to_string(sleeper) + "\n");  // nothing taken, nothing written
    co::ClaimResult one = co::claim(o, getpid(), gpus(2), 1, {0, 0}, {}, {"0"});
    CHECK_MSG(one.status.ok(), one.status.message);
    CHECK(joined(one.indices) == "1");
}

TEST_CASE(natural_index_order) {
    const std::string path = fresh_path("natural");
    std::vector<std::string> idx = {"10", "2", "1", "11", "0", "2"};
    co::ClaimResult r = co::claim(opts_for(path), getpid(), idx, 4);
    CHECK(joined(r.indices) == "0,1,2,10");
}

// B1: the stock script's `sed -i "/1 /d"` also deletes the line of GPU 11.
TEST_CASE(a_dead_line_of_index_1_never_frees_index_11) {
    const std::string path = fresh_path("b1");
    const pid_t dead = dead_pid();
    const pid_t owner11 = spawn_sleeper();
    const std::string line11 = line_for("11", owner11, path);
    write_text(path, "1 " + std::to_string(dead) + "\n" + line11 + "\n");
    std::vector<std::string> idx = {"1", "11"};
    co::ClaimResult r = co::claim(opts_for(path), getpid(), idx, 1);
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK(joined(r.indices) == "1");
    CHECK(read_text(path) == line11 + "\n" + line_for("1", getpid(), path) + "\n");
    // And 11 stays held: nobody else gets it.
    const pid_t other = spawn_sleeper();
    co::ClaimResult r2 = co::claim(opts_for(path), other, idx, 1);
    CHECK(r2.status.code == flinkgpu::StatusCode::kNotEnough);
    kill_and_reap(other);
    kill_and_reap(owner11);
}

// B4: a live pid with another start time is a reused pid: its entry is stale.
TEST_CASE(a_reused_pid_with_another_start_time_holds_nothing) {
    const std::string path = fresh_path("reuse");
    const pid_t live = spawn_sleeper();
    const std::uint64_t st = start_time_of(live);
    write_text(path, "0 " + std::to_string(live) + " " + std::to_string(st + 12345) + "\n");
    co::Snapshot s = co::snapshot(opts_for(path));
    CHECK(s.entries.size() == 1 && !s.entries[0].alive);
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(1), 1);
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK(joined(r.reclaimed) == "0");
    // With the right start time (or none, as the stock script writes) the same pid holds its GPU.
    const std::string p2 = fresh_path("reuse2");
    write_text(p2, "0 " + std::to_string(live) + " " + std::to_string(st) + "\n1 " + std::to_string(live) + "\n");
    CHECK(co::claim(opts_for(p2), getpid(), gpus(2), 1).status.code == flinkgpu::StatusCode::kNotEnough);
    kill_and_reap(live);
}

// B5: a line we cannot parse is kept, never reclaimed, and reported.
TEST_CASE(an_unparsable_line_is_kept_and_blocks_its_index) {
    const std::string path = fresh_path("bad");
    const std::string text = "2 not-a-pid\n\n0 12x\ngarbage\n";
    write_text(path, text);
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(3), 2);
    CHECK(r.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK_MSG(r.status.message.find("blocked by lines that cannot be parsed") != std::string::npos, r.status.message);
    CHECK(read_text(path) == text);
    CHECK(r.unparsable.size() == 3);
    co::ClaimResult ok = co::claim(opts_for(path), getpid(), gpus(3), 1);
    CHECK(joined(ok.indices) == "1");
    CHECK(read_text(path) == text + line_for("1", getpid(), path) + "\n");
    co::Snapshot s = co::snapshot(opts_for(path));
    CHECK(s.unparsable.size() == 3);
    CHECK(s.unparsable[0].line_number == 1 && s.unparsable[0].text == "2 not-a-pid");
    CHECK(s.unparsable[1].line_number == 3 && s.unparsable[1].text == "0 12x");
    CHECK(s.unparsable[2].line_number == 4 && s.unparsable[2].text == "garbage");
    CHECK(s.entries.size() == 1 && s.entries[0].line_number == 5);
    CHECK(co::clean_stale(opts_for(path)).unparsable.size() == 3);
    CHECK(read_text(path) == text + line_for("1", getpid(), path) + "\n");
}

TEST_CASE(lines_are_read_as_the_stock_script_reads_them) {
    const std::string path = fresh_path("grammar");
    const pid_t me = getpid();
    const std::string m = std::to_string(me);
    // Accepted as the stock script reads them; rejected: tab after the index, 4 fields, pid 0, overflow.
    write_text(path, "0 " + m + "\n1  " + m + "  \n2\t" + m + "\n3 " + m + " 1 2\n4 0\n5 99999999999\n6 " + m +
                         " 18446744073709551616\n7 " + m + "\r\n");
    co::Snapshot s = co::snapshot(opts_for(path));
    CHECK(s.status.ok());
    CHECK(s.entries.size() == 2);
    CHECK(s.entries.size() == 2 && s.entries[0].index == "0" && s.entries[1].index == "1");
    CHECK(s.entries.size() == 2 && !s.entries[0].has_start_time && s.entries[0].alive);
    CHECK(s.unparsable.size() == 6);
}

TEST_CASE(no_trailing_newline_is_repaired) {
    const std::string path = fresh_path("nonl");
    const pid_t dead = dead_pid();
    write_text(path, "0 " + std::to_string(dead));
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(2), 1);
    CHECK(joined(r.indices) == "1");
    CHECK(read_text(path) == "0 " + std::to_string(dead) + "\n" + line_for("1", getpid(), path) + "\n");
}

TEST_CASE(not_enough_names_the_request_the_gpus_their_holders_and_the_file) {
    const std::string path = fresh_path("short");
    const pid_t a = spawn_sleeper(), b = spawn_sleeper();
    CHECK(co::claim(opts_for(path), a, gpus(3), 2).status.ok());
    const std::string before = read_text(path);
    co::ClaimResult r = co::claim(opts_for(path), b, gpus(3), 2);
    CHECK(r.status.code == flinkgpu::StatusCode::kNotEnough);
    const std::string& m = r.status.message;
    CHECK_MSG(m.rfind("Could not get enough GPU resources.", 0) == 0, m);
    CHECK_MSG(m.find("Requested 2") != std::string::npos, m);
    CHECK_MSG(m.find("has 3 GPUs") != std::string::npos, m);
    CHECK_MSG(m.find("pid " + std::to_string(a) + " holds 0, 1") != std::string::npos, m);
    CHECK_MSG(m.find(path) != std::string::npos, m);
    CHECK(read_text(path) == before);  // all or nothing
    kill_and_reap(a);
    kill_and_reap(b);
}

TEST_CASE(not_enough_counts_the_hosts_gpus_and_names_each_left_out_one_with_why) {
    const std::string path = fresh_path("short_left_out");
    const pid_t a = spawn_sleeper(), b = spawn_sleeper();
    // GPUs 1 and 2 of the host's four are no candidates (a choice left them out): never claimed
    const co::LeftOut left_out = {{"1", "unknown: nvmlDeviceGetFieldValues did not return within 1 s"},
                                  {"2", "unhealthy: row remapping failed"}};
    co::ClaimResult first = co::claim(opts_for(path), a, {"0", "3"}, 1, {}, left_out);
    CHECK_MSG(first.status.ok(), first.status.message);
    CHECK(joined(first.indices) == "0");
    const std::string before = read_text(path);
    co::ClaimResult r = co::claim(opts_for(path), b, {"0", "3"}, 2, {}, left_out);
    CHECK(r.status.code == flinkgpu::StatusCode::kNotEnough);
    CHECK_MSG(r.status.message ==
                  "Could not get enough GPU resources. Requested 2, the host has 4 GPUs (0, 1, 2, 3), "
                  "of which GPU 1 is unknown (nvmlDeviceGetFieldValues did not return within 1 s), "
                  "GPU 2 is left out (unhealthy: row remapping failed); pid " +
                      std::to_string(a) + " holds 0. Coordination file: " + path + ".",
              r.status.message);
    CHECK(read_text(path) == before);
    kill_and_reap(a);
    kill_and_reap(b);
}

TEST_CASE(an_amount_beyond_a_claims_count_is_the_same_not_enough_message_without_reading_the_file) {
    const std::string path = fresh_path("short_beyond");
    const flinkgpu::Status s = co::not_enough(opts_for(path), "99999999999999999999", {"0", "2"},
                                              {{"1", "busy: foreign process 7 (compute)"}});
    CHECK(s.code == flinkgpu::StatusCode::kNotEnough);
    CHECK_MSG(s.message ==
                  "Could not get enough GPU resources. Requested 99999999999999999999, the host has 3 GPUs "
                  "(0, 1, 2), of which GPU 1 is left out (busy: foreign process 7 (compute)). Coordination "
                  "file: " +
                      path + ".",
              s.message);
    CHECK(access(path.c_str(), F_OK) != 0);  // nothing created
    CHECK(co::not_enough(opts_for(path), "5", {"0"}, {{"0 1", "unknown: x"}}).code ==
          flinkgpu::StatusCode::kInvalidArgument);
}

TEST_CASE(zombie_holds_nothing) {
    const std::string path = fresh_path("zombie");
    pid_t z = fork();
    if (z == 0) {
        for (;;) pause();
    }
    const std::string line = line_for("0", z, path);
    kill(z, SIGKILL);
    // Not reaped yet: a zombie. Wait until /proc shows it as one.
    for (int i = 0; i < 500; ++i) {
        std::uint64_t st;
        if (!co::process_start_time(z, &st)) break;
        usleep(1000);
    }
    write_text(path, line + "\n");
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(1), 1);
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK(joined(r.reclaimed) == "0");
    waitpid(z, nullptr, 0);
}

TEST_CASE(duplicate_lines_live_one_wins) {
    const std::string path = fresh_path("dup");
    const pid_t live = spawn_sleeper();
    write_text(path, "0 " + std::to_string(dead_pid()) + "\n" + line_for("0", live, path) + "\n");
    CHECK(co::claim(opts_for(path), getpid(), gpus(1), 1).status.code == flinkgpu::StatusCode::kNotEnough);
    kill_and_reap(live);
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(1), 1);
    CHECK(joined(r.reclaimed) == "0");
    CHECK(read_text(path) == line_for("0", getpid(), path) + "\n");  // both dead lines of 0 are gone
}

TEST_CASE(release_frees_only_the_callers_indices_and_clean_the_dead) {
    const std::string path = fresh_path("release");
    const co::Options o = opts_for(path);
    const pid_t a = spawn_sleeper(), b = spawn_sleeper();
    CHECK(co::claim(o, a, gpus(6), 3).status.ok());
    CHECK(co::claim(o, b, gpus(6), 2).status.ok());
    co::ReleaseResult part = co::release_indices(o, a, {"1", "4"});
    CHECK(part.status.ok() && joined(part.released) == "1");
    co::ReleaseResult all = co::release(o, a);
    CHECK(all.status.ok() && joined(all.released) == "0,2");
    CHECK(co::release(o, a).released.empty());
    co::Snapshot s = co::snapshot(o);
    CHECK(s.entries.size() == 2);
    kill_and_reap(b);
    s = co::snapshot(o);
    CHECK(s.entries.size() == 2 && !s.entries[0].alive && !s.entries[1].alive);
    co::CleanResult c = co::clean_stale(o);
    CHECK(c.status.ok() && c.removed.size() == 2);
    CHECK(read_text(path).empty());
    kill_and_reap(a);
}

TEST_CASE(missing_file_not_created) {
    const std::string path = fresh_path("missing");
    co::Snapshot s = co::snapshot(opts_for(path));
    CHECK(s.status.ok() && !s.exists);
    CHECK(co::release(opts_for(path), getpid()).status.ok());
    CHECK(co::clean_stale(opts_for(path)).status.ok());
    CHECK(!file_exists(path));
}

TEST_CASE(invalid_owners_and_indices_are_refused_naming_the_value) {
    const std::string path = fresh_path("invalid");
    CHECK(co::claim(opts_for(path), 0, gpus(2), 1).status.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK(co::claim(opts_for(path), -1, gpus(2), 1).status.code == flinkgpu::StatusCode::kInvalidArgument);
    co::ClaimResult bad = co::claim(opts_for(path), getpid(), {"0", "1 2"}, 1);
    CHECK(bad.status.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK_MSG(bad.status.message.find("'1 2'") != std::string::npos, bad.status.message);
    CHECK(co::claim(opts_for(path), getpid(), {"0", ""}, 1).status.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK(co::claim(opts_for(path), getpid(), {"0\n1"}, 1).status.code == flinkgpu::StatusCode::kInvalidArgument);
    co::ClaimResult dead = co::claim(opts_for(path), dead_pid(), gpus(2), 1);
    CHECK(dead.status.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK(co::claim(opts_for(path, -1), getpid(), gpus(2), 1).status.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK(co::claim(opts_for(""), getpid(), gpus(2), 1).status.code == flinkgpu::StatusCode::kInvalidArgument);
    CHECK(!file_exists(path));
}

// Threads of one process exclude each other: each call has its own open file description.
TEST_CASE(concurrent_threads_never_hold_one_gpu_twice) {
    const std::string path = fresh_path("threads");
    constexpr int kThreads = 8, kGpus = 3, kRounds = 40;
    std::vector<pid_t> owners;
    for (int i = 0; i < kThreads; ++i) owners.push_back(spawn_sleeper());
    std::atomic<int> holder[kGpus];
    for (auto& h : holder) h = -1;
    std::atomic<int> doubles{0}, claims{0}, errors{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
        threads.emplace_back([&, t] {
            for (int round = 0; round < kRounds; ++round) {
                co::ClaimResult r = co::claim(opts_for(path, 20000), owners[t], gpus(kGpus), 1);
                if (r.status.code == flinkgpu::StatusCode::kNotEnough) {
                    std::this_thread::yield();
                    continue;
                }
                if (!r.status.ok() || r.indices.size() != 1) {
                    ++errors;
                    continue;
                }
                const int g = std::atoi(r.indices[0].c_str());
                int expected = -1;
                if (!holder[g].compare_exchange_strong(expected, t)) ++doubles;
                ++claims;
                std::this_thread::yield();
                expected = t;
                holder[g].compare_exchange_strong(expected, -1);
                if (!co::release(opts_for(path, 20000), owners[t]).status.ok()) ++errors;
            }
        });
    }
    for (auto& th : threads) th.join();
    CHECK(doubles == 0);
    CHECK(errors == 0);
    CHECK_MSG(claims >= kGpus * 3, std::to_string(claims.load()));
    CHECK(read_text(path).empty());
    for (pid_t p : owners) kill_and_reap(p);
}

// Real processes claim and release while some are SIGKILLed; a per-GPU flock held while a worker
// believes it owns the GPU detects any double assignment (the kernel drops it when the worker dies).
TEST_CASE(concurrent_processes_killed_at_random_never_hold_one_gpu_twice) {
    const std::string path = fresh_path("procs");
    const std::string marks = fresh_path("marks");
    CHECK(mkdir(marks.c_str(), 0755) == 0);
    constexpr int kWorkers = 16, kGpus = 4;
    int report[2];
    CHECK(pipe(report) == 0);
    std::vector<pid_t> workers;
    for (int w = 0; w < kWorkers; ++w) {
        pid_t pid = fork();
        if (pid == 0) {
            close(report[0]);
            std::mt19937 rng(static_cast<unsigned>(getpid()));
            int doubles = 0, claims = 0;
            const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(1500);
            while (std::chrono::steady_clock::now() < end) {
                const std::size_t amount = 1 + rng() % 2;
                co::ClaimResult r = co::claim(opts_for(path, 20000), getpid(), gpus(kGpus), amount);
                if (r.status.code == flinkgpu::StatusCode::kNotEnough) {
                    usleep(500);
                    continue;
                }
                if (!r.status.ok()) _exit(2);
                std::vector<int> fds;
                for (const std::string& g : r.indices) {
                    int fd = open((marks + "/" + g).c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
                    if (fd < 0) _exit(3);
                    if (flock(fd, LOCK_EX | LOCK_NB) != 0) ++doubles;
                    fds.push_back(fd);
                }
                ++claims;
                usleep(200 + rng() % 800);
                for (int fd : fds) close(fd);
                if (!co::release(opts_for(path, 20000), getpid()).status.ok()) _exit(4);
            }
            const int msg[2] = {doubles, claims};
            if (write(report[1], msg, sizeof msg) != sizeof msg) _exit(5);
            _exit(0);
        }
        workers.push_back(pid);
    }
    close(report[1]);
    // Kill a quarter of them while they work (they may be holding GPUs, or even the lock).
    usleep(300000);
    for (int w = 0; w < kWorkers; w += 4) {
        kill(workers[w], SIGKILL);
        usleep(100000);
    }
    int total_doubles = 0, total_claims = 0, reports = 0;
    int msg[2];
    while (read(report[0], msg, sizeof msg) == static_cast<ssize_t>(sizeof msg)) {
        total_doubles += msg[0];
        total_claims += msg[1];
        ++reports;
    }
    close(report[0]);
    int clean_exits = 0;
    for (pid_t p : workers) {
        int status = 0;
        waitpid(p, &status, 0);
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) ++clean_exits;
    }
    CHECK(total_doubles == 0);
    CHECK_MSG(clean_exits == kWorkers - kWorkers / 4, std::to_string(clean_exits));
    CHECK(reports == clean_exits);
    CHECK_MSG(total_claims > 50, std::to_string(total_claims));
    // Every GPU is claimable again: the killed workers' entries are reclaimed.
    co::ClaimResult all = co::claim(opts_for(path), getpid(), gpus(kGpus), kGpus);
    CHECK_MSG(all.status.ok(), all.status.message);
    CHECK(joined(all.indices) == "0,1,2,3");
}

int main(int argc, char** argv) { return run_in_scratch_dir(argc, argv); }
