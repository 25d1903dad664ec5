// The coordination file as a file (docs/design.md §5.2, coordination/file.*): rewritten in place and
// read anew when replaced, whole lines or nothing under a file-size limit, no fragment when killed
// mid-write, bounded lock waits, and no path that is not a regular file.
#include "coordination/claims.hpp"
#include "coordination/file.hpp"
#include "coordination/lease.hpp"
#include "coordination/proc_locks.hpp"
#include "tests/coordination/files.hpp"

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

// When set (in a forked child), the core's ftruncate() ends the process instead: the moment between
// rewriting the file and truncating it, where Flink's timeout may SIGKILL a discovery process.
bool g_die_in_ftruncate = false;

extern "C" int ftruncate(int fd, off_t length) {
    if (g_die_in_ftruncate) _exit(42);
    using Fn = int (*)(int, off_t);
    static const Fn real = reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "ftruncate"));
    return real(fd, length);
}

// B2: the file is rewritten in place, never replaced.
TEST_CASE(a_claim_rewrites_the_file_in_place_keeping_its_inode) {
    const std::string path = fresh_path("inode");
    const co::Options o = opts_for(path);
    const pid_t dead = dead_pid();
    write_text(path, "0 " + std::to_string(dead) + "\n1 " + std::to_string(dead) + "\n");
    const unsigned long long ino = inode_of(path);
    CHECK(co::claim(o, getpid(), gpus(2), 1).status.ok());  // reclaims 0: a rewrite, not an append
    CHECK(inode_of(path) == ino);
    CHECK(co::clean_stale(o).removed.size() == 1);
    CHECK(inode_of(path) == ino);
    CHECK(joined(co::release(o, getpid()).released) == "0");
    CHECK(inode_of(path) == ino);
    CHECK(read_text(path).empty());
}

// B2, the other side: a stock script replaced the file (sed -i) while we waited for the old inode's lock.
TEST_CASE(a_file_replaced_while_the_claim_waits_for_its_lock_is_read_anew) {
    const std::string path = fresh_path("replaced");
    const pid_t holder_of_0 = spawn_sleeper();
    write_text(path, "");
    const unsigned long long old_ino = inode_of(path);
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    pid_t locker = fork();
    if (locker == 0) {
        int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
        if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(3);
        if (write(ready[1], "x", 1) != 1) _exit(4);
        char c;
        if (read(go[0], &c, 1) != 1) _exit(5);
        // What `sed -i` does: write a new file and rename it over the path, still holding the old lock.
        const std::string tmp = path + ".sed";
        std::ofstream(tmp) << "0 " << holder_of_0 << "\n";
        if (rename(tmp.c_str(), path.c_str()) != 0) _exit(6);
        _exit(0);  // closing the fd releases the lock on the old inode
    }
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    co::ClaimResult r;
    std::thread t([&] { r = co::claim(opts_for(path), getpid(), gpus(2), 1); });
    // Wait until the claim has opened the old inode (it then polls its lock).
    bool opened = false;
    for (int i = 0; i < 500 && !opened; ++i) {
        DIR* d = opendir("/proc/self/fd");
        while (dirent* e = d ? readdir(d) : nullptr) {
            struct statx st{};
            if (statx(dirfd(d), e->d_name, 0, STATX_INO, &st) == 0 && st.stx_ino == old_ino &&
                std::atoi(e->d_name) > 2) {
                opened = true;
            }
        }
        if (d) closedir(d);
        if (!opened) usleep(2000);
    }
    CHECK(opened);
    CHECK(write(go[1], "x", 1) == 1);
    t.join();
    waitpid(locker, nullptr, 0);
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK(joined(r.indices) == "1");  // the replacement says 0 is held: we read the new file
    CHECK(read_text(path) == "0 " + std::to_string(holder_of_0) + "\n" + line_for("1", getpid(), path) + "\n");
    for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
    kill_and_reap(holder_of_0);
}

// B2, the stock script's transaction, done natively: a "subshell" opens the file as descriptor 200,
// forks a "flock" that locks it and exits, replaces the file (sed -i) and appends its line only when
// told. /proc/locks names the exited flock; the subshell that holds the lock is far below it (40 other
// processes came between, as on a busy host). A claim meanwhile waits for the line instead of taking
// GPU 0, free in the replaced file.
TEST_CASE(a_claim_waits_for_a_stock_transaction_whose_shell_is_far_below_its_exited_flock) {
    const std::string path = fresh_path("stock-far");
    const pid_t dead = spawn_sleeper();
    kill_and_reap(dead);
    const pid_t taskmanager = spawn_sleeper();
    write_text(path, "0 " + std::to_string(dead) + "\n1 " + std::to_string(dead) + "\n");
    int ready[2], go[2];
    CHECK(pipe(ready) == 0 && pipe(go) == 0);
    const pid_t shell = fork();
    if (shell == 0) {
        const int fd = open(path.c_str(), O_RDWR);
        if (fd < 0 || dup2(fd, 200) != 200) _exit(3);
        close(fd);
        for (int i = 0; i < 40; ++i) {
            const pid_t other = fork();
            if (other == 0) _exit(0);
            if (other < 0 || waitpid(other, nullptr, 0) != other) _exit(4);
        }
        const pid_t locker = fork();
        if (locker == 0) _exit(flock(200, LOCK_EX) == 0 ? 0 : 1);
        int status = 0;
        if (locker < 0 || waitpid(locker, &status, 0) != locker || status != 0) _exit(5);
        // sed -i "/0 /d": the rest of the file in a new inode, renamed over the path; the old one stays locked
        const std::string tmp = path + ".sed";
        const std::string rest = "1 " + std::to_string(dead) + "\n";
        const int out = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (out < 0 || write(out, rest.data(), rest.size()) != static_cast<ssize_t>(rest.size()) || close(out) != 0 ||
            rename(tmp.c_str(), path.c_str()) != 0)
            _exit(6);
        const long pids[2] = {getpid(), locker};
        if (write(ready[1], pids, sizeof pids) != sizeof pids) _exit(7);
        char c;
        if (read(go[0], &c, 1) != 1) _exit(8);
        // echo "$i $PPID" >> $coordination_file
        const std::string line = "0 " + std::to_string(taskmanager) + "\n";
        const int append = open(path.c_str(), O_WRONLY | O_APPEND);
        if (append < 0 || write(append, line.data(), line.size()) != static_cast<ssize_t>(line.size())) _exit(9);
        _exit(0);
    }
    long pids[2] = {0, 0};
    CHECK(read(ready[0], pids, sizeof pids) == sizeof pids);
    // far below its flock, or above it where the pids wrapped around meanwhile
    CHECK_MSG(!(0 < pids[1] - pids[0] && pids[1] - pids[0] <= 40),
              std::to_string(pids[0]) + " " + std::to_string(pids[1]));
    const std::uint64_t reads = co::proc_locks_reads();
    std::atomic<bool> done{false};
    co::ClaimResult r;
    std::thread t([&] {
        r = co::claim(opts_for(path, 20000), getpid(), gpus(2), 1);
        done = true;
    });
    // The claim saw the transaction once it looks again; a claim that did not see it has returned.
    while (!done && co::proc_locks_reads() < reads + 2) usleep(1000);
    CHECK(write(go[1], "x", 1) == 1);
    t.join();
    int status = 0;
    CHECK(waitpid(shell, &status, 0) == shell && WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK(joined(r.indices) == "1");  // not 0, which the transaction was recording for its TaskManager
    CHECK(read_text(path) == "0 " + std::to_string(taskmanager) + "\n" + line_for("1", getpid(), path) + "\n");
    for (int fd : {ready[0], ready[1], go[0], go[1]}) close(fd);
    kill_and_reap(taskmanager);
}

// The /proc/locks read of B2 (a stock script still writing the copy it replaced) is rare: a look at a
// file born at least a second before it, finding no such writer, settles the file for good, in this
// process and, recorded on the file, in every fresh process (a flink-gpu-discovery run each time). A
// copy put in its place (as `sed -i` makes one) is looked at, even when the copy carries the record.
// Each child is a fresh process; its exit status is how many times it read /proc/locks.
TEST_CASE(a_settled_coordination_file_is_not_looked_at_again_but_a_copy_in_its_place_is) {
    const std::string path = fresh_path("settled");
    write_text(path, "");
    // the condition the rule is about: the file has been at its path for kFlockGapMs (5 s)
    struct statx born{};
    CHECK(statx(AT_FDCWD, path.c_str(), 0, STATX_BTIME, &born) == 0);
    if ((born.stx_mask & STATX_BTIME) == 0) {
        std::fprintf(stderr, "note: this filesystem keeps no birth times: every file is looked at\n");
        return;
    }
    for (int i = 0; i < 3000; ++i) {  // at most 30 s
        timespec wall{};
        clock_gettime(CLOCK_REALTIME, &wall);
        if ((wall.tv_sec - born.stx_btime.tv_sec) * 1000 + (wall.tv_nsec - born.stx_btime.tv_nsec) / 1000000 > 5000)
            break;
        usleep(10000);
    }
    const auto reads_in_child = [&](bool release) {
        const pid_t child = fork();
        if (child == 0) {
            const std::uint64_t before = co::proc_locks_reads();
            const bool ok = co::claim(opts_for(path), getpid(), gpus(2), 1).status.ok() &&
                            (!release || co::release(opts_for(path), getpid()).status.ok());
            _exit(ok ? static_cast<int>(std::min<std::uint64_t>(co::proc_locks_reads() - before, 99)) : 100);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    };
    // a filesystem without user extended attributes keeps no record: each process looks once
    const bool records = setxattr(path.c_str(), "user.flink-gpu.test", "1", 1, 0) == 0;
    CHECK(reads_in_child(true) == 1);  // the claim looks and settles the file; the release does not look
    CHECK(reads_in_child(true) == (records ? 0 : 1));
    // a copy with the record copied too (cp -a), renamed over the path: another file, looked at
    const std::string copy = path + ".copy";
    write_text(copy, read_text(path));
    char value[64];
    const ssize_t n = getxattr(path.c_str(), "user.flink-gpu.settled", value, sizeof value);
    CHECK(n > 0 || !records);
    if (n > 0) CHECK(setxattr(copy.c_str(), "user.flink-gpu.settled", value, static_cast<std::size_t>(n), 0) == 0);
    CHECK(rename(copy.c_str(), path.c_str()) == 0);
    CHECK(reads_in_child(false) == 1);
}

// A claim for itself whose write fails (here beyond RLIMIT_FSIZE, SIGXFSZ ignored: EFBIG) leaves the file as
// it was; the process keeps one lease for the file for its life, whatever fails or is released.
TEST_CASE(a_failed_write_leaves_the_file_and_the_process_keeps_its_one_lease) {
    const std::string path = fresh_path("efbig");
    const int failed_before = check::failures();
    const pid_t child = fork();  // the file size limit and the lease are the child's
    if (child == 0) {
        signal(SIGXFSZ, SIG_IGN);
        std::uint32_t lease = 0;
        write_text(path, "\n");
        CHECK(limit_growth_to(path));
        CHECK(!co::claim(opts_for(path), getpid(), {"0", "1"}, 1).status.ok());
        CHECK(read_text(path) == "\n");

        CHECK(lift_growth_limit());
        CHECK(joined(co::claim(opts_for(path), getpid(), {"0", "1"}, 1).indices) == "0");
        const std::string one = read_text(path);
        CHECK(limit_growth_to(path));
        CHECK(!co::claim(opts_for(path), getpid(), {"0", "1"}, 2).status.ok());
        CHECK(read_text(path) == one);
        CHECK(co::Leases(path).held(&lease) && lease == 0);
        CHECK(lift_growth_limit());
        CHECK(joined(co::release(opts_for(path), getpid()).released) == "0");
        CHECK(co::Leases(path).held(&lease) && lease == 0);  // kept for the next claim, which reuses it
        CHECK(joined(co::claim(opts_for(path), getpid(), {"0", "1"}, 2).indices) == "0,1");
        CHECK(read_text(path).find("lease=1") == std::string::npos);
        std::fflush(stderr);
        _exit(check::failures() == failed_before ? 0 : 1);
    }
    int status = 0;
    CHECK(waitpid(child, &status, 0) == child);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

// Whole lines or nothing under RLIMIT_FSIZE with SIGXFSZ at its default action (a JVM's child, a C
// program): the write that crosses the limit is short and the next one raises SIGXFSZ. The process is
// not killed with half a line in the file: the claim fails with EFBIG and the file is back to its old
// bytes, for an append and for a rewrite that reclaims (old bytes overwritten) alike.
TEST_CASE(a_short_write_under_a_file_size_limit_restores_the_old_bytes) {
    const pid_t live = spawn_sleeper();
    for (const bool reclaim : {false, true}) {
        const std::string path = fresh_path("short-write");
        // a dead owner's line first when reclaiming: the rewrite starts at byte 0
        std::string old_text = reclaim ? "0 " + std::to_string(dead_pid()) + "\n" : std::string();
        old_text += line_for("1", live, path) + "\n";
        old_text.resize(1015, '\n');  // 9 bytes below 1 KiB: the first new line crosses it
        write_text(path, old_text);
        const pid_t child = fork();
        if (child == 0) {
            signal(SIGXFSZ, SIG_DFL);
            struct rlimit limit{};
            getrlimit(RLIMIT_FSIZE, &limit);
            limit.rlim_cur = 1024;
            setrlimit(RLIMIT_FSIZE, &limit);
            const co::ClaimResult r = co::claim(opts_for(path), live, {"0", "1", "2", "3"}, reclaim ? 4 : 3);
            const bool efbig =
                r.status.sys_errno == EFBIG && r.status.message.find("old content was restored") != std::string::npos;
            sigset_t pending;
            sigpending(&pending);
            _exit(efbig && !sigismember(&pending, SIGXFSZ) ? 0 : 3);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                      : "exit " + std::to_string(WEXITSTATUS(status)));
        CHECK(read_text(path) == old_text);
    }
    kill_and_reap(live);
}

// A file already beyond RLIMIT_FSIZE (the limit set below its size): a reclaim's rewrite from byte 0 is cut
// at the limit, and putting back the bytes it overwrote (all below the limit) restores the file; an
// append, which starts beyond the limit, writes nothing. Each message says what is true of the file,
// which stays byte-identical: with SIGXFSZ at its default action (an embedding host may leave it so) and
// ignored alike for the rewrite; an append with it at its default is killed before writing (SECURITY.md).
TEST_CASE(a_write_refused_by_a_file_size_limit_below_the_file_says_what_the_file_holds) {
    const pid_t live = spawn_sleeper();
    struct Case {
        bool reclaim;
        bool default_action;
        const char* says;
    };
    for (const Case c :
         {Case{true, true, "; its old content was restored."}, Case{true, false, "; its old content was restored."},
          Case{false, false, "; nothing was written, the file is unchanged."}}) {
        const std::string path = fresh_path("beyond-limit");
        // reclaiming: GPU 0's dead line first, so that the rewrite starts at byte 0; appending: GPU 1 free
        std::string old_text = c.reclaim ? "0 " + std::to_string(dead_pid()) + "\n" : std::string();
        old_text += line_for(c.reclaim ? "1" : "0", live, path) + "\n";
        old_text.resize(2000, '\n');
        write_text(path, old_text);
        const pid_t child = fork();
        if (child == 0) {
            signal(SIGXFSZ, c.default_action ? SIG_DFL : SIG_IGN);
            struct rlimit limit{};
            getrlimit(RLIMIT_FSIZE, &limit);
            limit.rlim_cur = 1024;
            setrlimit(RLIMIT_FSIZE, &limit);
            const co::ClaimResult r = co::claim(opts_for(path), getpid(), {"0", "1"}, 1);
            const std::string& m = r.status.message;
            const bool told = r.status.sys_errno == EFBIG && m.size() > std::strlen(c.says) &&
                              m.compare(m.size() - std::strlen(c.says), std::string::npos, c.says) == 0;
            if (!told) std::fprintf(stderr, "unexpected: %s\n", m.c_str());
            _exit(told ? 0 : 3);
        }
        int status = 0;
        CHECK(waitpid(child, &status, 0) == child);
        CHECK_MSG(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  std::string(c.reclaim ? "rewrite" : "append") + (c.default_action ? ", SIGXFSZ default: " : ": ") +
                      (WIFSIGNALED(status) ? "killed by signal " + std::to_string(WTERMSIG(status))
                                           : "exit " + std::to_string(WEXITSTATUS(status))));
        CHECK(read_text(path) == old_text);
    }
    kill_and_reap(live);
}

TEST_CASE(killed_before_truncate_leaves_no_fragment) {
    const std::string path = fresh_path("shrink");
    const co::Options o = opts_for(path);
    const pid_t a = spawn_sleeper(), b = spawn_sleeper();
    CHECK(co::claim(o, a, gpus(4), 2).status.ok());
    CHECK(co::claim(o, b, gpus(4), 2).status.ok());
    std::fflush(nullptr);
    const pid_t child = fork();
    if (child == 0) {
        g_die_in_ftruncate = true;
        co::release(o, a);  // rewrites a shorter file, then dies where it would truncate
        _exit(0);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 42);
    // b's lines and blank lines only: no tail of a's old lines that could parse as an entry
    const co::Snapshot s = co::snapshot(o);
    CHECK(s.status.ok());
    CHECK_MSG(s.unparsable.empty(), read_text(path));
    CHECK(s.entries.size() == 2);
    for (const co::Entry& e : s.entries) CHECK(e.pid == b);
    CHECK(joined(co::claim(o, a, gpus(4), 2).indices) == "0,1");  // and the file works on
    kill_and_reap(a);
    kill_and_reap(b);
}

// B10: lock waits are bounded.
TEST_CASE(a_held_lock_times_out_naming_the_file_and_its_holder) {
    const std::string path = fresh_path("timeout");
    const pid_t holder = spawn_lock_holder(path);
    const auto t0 = std::chrono::steady_clock::now();
    co::ClaimResult r = co::claim(opts_for(path, 300), getpid(), gpus(2), 1);
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    CHECK(r.status.code == flinkgpu::StatusCode::kTimeout);
    CHECK_MSG(r.status.message.find(path) != std::string::npos, r.status.message);
    CHECK_MSG(r.status.message.find("held by pid " + std::to_string(holder)) != std::string::npos, r.status.message);
    // waited its timeout, and not for ever (the holder never lets go); the upper bound is loose: a
    // sanitized build on 2 loaded cores took 2.4 s
    CHECK_MSG(secs >= 0.29 && secs < 30.0, std::to_string(secs));
    CHECK(co::snapshot(opts_for(path, 0)).status.code == flinkgpu::StatusCode::kTimeout);
    kill_and_reap(holder);
    CHECK(co::claim(opts_for(path, 0), getpid(), gpus(2), 1).status.ok());
}

// A timeout too large to add to the clock (INT64_MAX ms: "wait for ever") waits; it is not an
// overflowed, already-passed deadline.
TEST_CASE(a_huge_timeout_waits_until_the_lock_is_free) {
    const std::string path = fresh_path("huge-timeout");
    const pid_t holder = spawn_lock_holder(path);
    std::thread release([holder] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        kill_and_reap(holder);
    });
    co::ClaimResult r = co::claim(opts_for(path, INT64_MAX), getpid(), gpus(2), 1);
    release.join();
    CHECK_MSG(r.status.ok(), r.status.message);
    CHECK(joined(r.indices) == "0");
}

TEST_CASE(symlink_refused_target_untouched) {
    const std::string target = fresh_path("target");
    const std::string link = fresh_path("link");
    write_text(target, "precious\n");
    CHECK(symlink(target.c_str(), link.c_str()) == 0);
    for (int op = 0; op < 4; ++op) {
        flinkgpu::Status s = op == 0   ? co::claim(opts_for(link), getpid(), gpus(1), 1).status
                             : op == 1 ? co::release(opts_for(link), getpid()).status
                             : op == 2 ? co::snapshot(opts_for(link)).status
                                       : co::clean_stale(opts_for(link)).status;
        CHECK(s.code == flinkgpu::StatusCode::kOsError && s.sys_errno == ELOOP);
        CHECK_MSG(s.message.find(link) != std::string::npos && s.message.find("symbolic link") != std::string::npos,
                  s.message);
    }
    CHECK(read_text(target) == "precious\n");
    // A dangling link is not followed to create its target either.
    const std::string dangling = fresh_path("dangling");
    const std::string nowhere = fresh_path("nowhere");
    CHECK(symlink(nowhere.c_str(), dangling.c_str()) == 0);
    CHECK(co::claim(opts_for(dangling), getpid(), gpus(1), 1).status.sys_errno == ELOOP);
    CHECK(!file_exists(nowhere));
}

TEST_CASE(non_regular_files_refused) {
    const std::string dir = fresh_path("dir");
    CHECK(mkdir(dir.c_str(), 0755) == 0);
    co::ClaimResult d = co::claim(opts_for(dir), getpid(), gpus(1), 1);
    CHECK(d.status.code == flinkgpu::StatusCode::kOsError && d.status.sys_errno == EISDIR);
    CHECK_MSG(d.status.message.find("a directory") != std::string::npos, d.status.message);
    // A FIFO must not block (nobody writes to it) and is refused.
    const std::string fifo = fresh_path("fifo");
    CHECK(mkfifo(fifo.c_str(), 0644) == 0);
    for (int op = 0; op < 2; ++op) {
        flinkgpu::Status s =
            op == 0 ? co::claim(opts_for(fifo), getpid(), gpus(1), 1).status : co::snapshot(opts_for(fifo)).status;
        CHECK(s.code == flinkgpu::StatusCode::kOsError && s.sys_errno == EINVAL);
        CHECK_MSG(s.message.find("a FIFO") != std::string::npos && s.message.find(fifo) != std::string::npos,
                  s.message);
    }
    // A device is refused before it is opened.
    flinkgpu::Status dev = co::claim(opts_for("/dev/null"), getpid(), gpus(1), 1).status;
    CHECK_MSG(dev.code == flinkgpu::StatusCode::kOsError && dev.message.find("character device") != std::string::npos,
              dev.message);
}

TEST_CASE(hard_link_refused) {
    const std::string other = fresh_path("other");
    const std::string path = fresh_path("hardlink");
    write_text(other, "someone else's data\n");
    CHECK(link(other.c_str(), path.c_str()) == 0);
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(1), 1);
    CHECK(r.status.code == flinkgpu::StatusCode::kOsError && r.status.sys_errno == EMLINK);
    CHECK_MSG(r.status.message.find("hard links") != std::string::npos, r.status.message);
    CHECK(read_text(other) == "someone else's data\n");
}

TEST_CASE(unusable_path_names_path_and_errno) {
    const std::string path = g_dir + "/no-such-dir/coordination";
    co::ClaimResult r = co::claim(opts_for(path), getpid(), gpus(1), 1);
    CHECK(r.status.code == flinkgpu::StatusCode::kOsError && r.status.sys_errno == ENOENT);
    CHECK_MSG(r.status.message.find(path) != std::string::npos, r.status.message);
    CHECK_MSG(r.status.message.find(std::strerror(ENOENT)) != std::string::npos, r.status.message);
    if (geteuid() != 0) {  // root reads anything: permission checks only mean something for other users
        const std::string ro = fresh_path("readonly");
        write_text(ro, "");
        chmod(ro.c_str(), 0444);
        co::ClaimResult p = co::claim(opts_for(ro), getpid(), gpus(1), 1);
        CHECK(p.status.sys_errno == EACCES);
        CHECK_MSG(p.status.message.find("mode 0444") != std::string::npos, p.status.message);
    }
}

int main(int argc, char** argv) { return run_in_scratch_dir(argc, argv); }
