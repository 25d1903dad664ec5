// Own or foreign by the parent chain in /proc (csrc/host/process_tree.*), on real processes.
#include "host/process_tree.hpp"

#include "base/pid_namespace.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <vector>

#include "tests/check.hpp"

using namespace flinkgpu;

namespace {
// child -> grandchild, both descendants of this process; the grandchild waits until killed.
struct Descendants {
    pid_t child = -1;
    pid_t grandchild = 0;
    Descendants() {
        int ready[2];
        CHECK(pipe(ready) == 0);
        child = fork();
        if (child == 0) {
            const pid_t forked = fork();
            if (forked == 0) {
                pause();
                _exit(0);
            }
            CHECK(write(ready[1], &forked, sizeof forked) == static_cast<ssize_t>(sizeof forked));
            waitpid(forked, nullptr, 0);
            _exit(0);
        }
        CHECK(read(ready[0], &grandchild, sizeof grandchild) == static_cast<ssize_t>(sizeof grandchild));
        close(ready[0]);
        close(ready[1]);
    }
    ~Descendants() {
        if (grandchild > 0) kill(grandchild, SIGKILL);
        if (child > 0) waitpid(child, nullptr, 0);
    }
};
}  // namespace

TEST_CASE(parent_pid_reads_the_parent_from_proc_and_minus_one_for_no_process) {
    CHECK_EQ(parent_pid(getpid()), getppid());
    CHECK_EQ(parent_pid(0), -1);
}

TEST_CASE(descendants_of_the_owner_are_own_and_the_rest_foreign) {
    const pid_t self = getpid();
    Descendants tree;
    ProcessTree mine(self, 0, kInitialPidNamespace);  // as where NVML's pids are ours
    CHECK(mine.classify(self).own);
    CHECK(mine.classify(tree.child).own && mine.classify(tree.child).visible);
    CHECK(mine.classify(tree.grandchild).own);
    const ProcessVerdict parent = mine.classify(getppid());
    CHECK(!parent.own && parent.visible);
    const ProcessVerdict ghost = mine.classify(0x7ffffff0);  // beyond pid_max: never visible
    CHECK(!ghost.own && !ghost.visible);
}

TEST_CASE(the_taskmanager_and_its_descendants_are_own_for_a_worker_it_started) {
    // owner = the child; the TaskManager = this process: the grandchild and we are own
    const pid_t self = getpid();
    Descendants tree;
    ProcessTree as_worker(tree.child, self, kInitialPidNamespace);
    CHECK(as_worker.classify(tree.grandchild).own);
    CHECK(as_worker.classify(self).own);
    ProcessTree without_tm(tree.child, 0, kInitialPidNamespace);
    CHECK(!without_tm.classify(self).own);
}

TEST_CASE(outside_the_initial_pid_namespace_no_pid_is_own_or_visible) {
    // NVML's pids are host pids: in a container the process with such a number here is another one
    const pid_t self = getpid();
    Descendants tree;
    const std::uint64_t container = kInitialPidNamespace + 1;
    for (const std::optional<std::uint64_t>& ns :
         {std::optional<std::uint64_t>(container), std::optional<std::uint64_t>()}) {
        ProcessTree elsewhere(self, getppid(), ns);
        for (const pid_t pid : {self, tree.child, getppid()}) {
            const ProcessVerdict v = elsewhere.classify(pid);
            CHECK(!v.own && !v.visible);
        }
    }
    ProcessTree on_host(self, getppid(), kInitialPidNamespace);
    CHECK(on_host.classify(self).own && on_host.classify(self).visible);
    CHECK(on_host.classify(tree.child).own && on_host.classify(getppid()).own);
}

TEST_CASE(no_taskmanager_is_found_among_ancestors_that_are_no_jvm) {
    // The test runner is no JVM.
    CHECK_EQ(find_taskmanager(getpid()), 0);
}

TEST_CASE(the_ancestry_starts_with_the_process_and_follows_its_parents) {
    const std::vector<ProcessAncestor> chain = process_ancestry(getpid(), 64);
    CHECK(chain.size() >= 2);
    CHECK_EQ(chain[0].pid, getpid());
    CHECK_EQ(chain[1].pid, getppid());
    char comm[64] = {};
    FILE* file = std::fopen("/proc/self/comm", "r");
    CHECK(file != nullptr);
    if (file != nullptr) {
        CHECK(std::fgets(comm, sizeof comm, file) != nullptr);
        std::fclose(file);
    }
    comm[std::strcspn(comm, "\n")] = '\0';
    CHECK(chain[0].command == comm);
    CHECK_EQ(process_ancestry(getpid(), 1).size(), 1u);
    CHECK(process_ancestry(0, 64).empty());
}

int main(int argc, char** argv) { return check::run(argc, argv); }
