// Helpers of the coordination file tests (test_claims.cpp, test_file.cpp): fresh files in the binary's
// scratch directory, dead pids, the lines a claim writes, a process that holds a file's lock.
#pragma once

#include "coordination/claims.hpp"
#include "coordination/liveness.hpp"
#include "tests/check.hpp"
#include "tests/fixtures.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace co = flinkgpu::coordination;

// CHECK with what the failing check saw.
#define CHECK_MSG(cond, msg)                                                                       \
    do {                                                                                           \
        if (!(cond)) check::report(__FILE__, __LINE__, "CHECK(" #cond ") -- " + std::string(msg)); \
    } while (0)

// The scratch directory of the test binary (its main sets it).
inline std::string g_dir;

inline std::string fresh_path(const char* name) {
    static int counter = 0;
    return g_dir + "/" + name + "-" + std::to_string(++counter);
}

inline void write_text(const std::string& path, const std::string& text) {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
}

inline bool file_exists(const std::string& path) {
    struct statx st{};
    return statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_INO, &st) == 0;
}

inline unsigned long long inode_of(const std::string& path) {
    struct statx st{};
    if (statx(AT_FDCWD, path.c_str(), AT_SYMLINK_NOFOLLOW, STATX_INO, &st) != 0) return 0;
    return st.stx_ino;
}

// The pid of a process that has exited and been reaped.
inline pid_t dead_pid() {
    pid_t pid = fork();
    if (pid == 0) _exit(0);
    waitpid(pid, nullptr, 0);
    return pid;
}

inline std::uint64_t start_time_of(pid_t pid) {
    std::uint64_t st = 0;
    CHECK(co::process_start_time(pid, &st));
    return st;
}

inline co::Options opts_for(const std::string& path, std::int64_t timeout_ms = 5000) {
    co::Options o;
    o.path = path;
    o.timeout_ms = timeout_ms;
    return o;
}

// The line a claim at `path` writes for `pid` (this process's with its lease on byte 0 of the lease file).
inline std::string line_for(const std::string& index, pid_t pid, const std::string& path) {
    return index + " " + std::to_string(pid) + "\t" + std::to_string(start_time_of(pid)) +
           "\tns=" + std::to_string(co::own_pid_namespace().inode) +
           (pid == getpid() ? "\tlease=0\tlf=" + fixtures::lease_token(path) : "");
}

// A child process that takes flock(LOCK_EX) on `path` and holds it until killed.
inline pid_t spawn_lock_holder(const std::string& path) {
    int ready[2];
    if (pipe(ready) != 0) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        int fd = open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(3);
        if (write(ready[1], "x", 1) != 1) _exit(4);
        for (;;) pause();
    }
    close(ready[1]);
    char c;
    CHECK(read(ready[0], &c, 1) == 1);
    close(ready[0]);
    return pid;
}

// The test binary's main: runs the cases in a scratch directory.
inline int run_in_scratch_dir(int argc, char** argv) {
    const fixtures::ScratchDir scratch("/tmp/flinkgpu-coordination-test-XXXXXX");
    if (scratch.path().empty()) {
        std::perror("mkdtemp");
        return 2;
    }
    g_dir = scratch.path();
    return check::run(argc, argv);
}
