// Own or foreign by the parent chain in /proc (csrc/process_tree.*), on real processes.
#include "process_tree.hpp"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.hpp"

using namespace flinkgpu;

int main() {
    const pid_t self = getpid();
    CHECK_EQ(parent_pid(self), getppid());
    CHECK_EQ(parent_pid(0), -1);

    int ready[2];
    CHECK(pipe(ready) == 0);
    // child -> grandchild: both descendants of this process
    const pid_t child = fork();
    if (child == 0) {
        const pid_t grandchild = fork();
        if (grandchild == 0) {
            pause();
            _exit(0);
        }
        CHECK(write(ready[1], &grandchild, sizeof grandchild) == static_cast<ssize_t>(sizeof grandchild));
        waitpid(grandchild, nullptr, 0);
        _exit(0);
    }
    pid_t grandchild = 0;
    CHECK(read(ready[0], &grandchild, sizeof grandchild) == static_cast<ssize_t>(sizeof grandchild));

    ProcessTree mine(self, 0);
    CHECK(mine.classify(self).own);
    CHECK(mine.classify(child).own && mine.classify(child).visible);
    CHECK(mine.classify(grandchild).own);
    const ProcessVerdict parent = mine.classify(getppid());
    CHECK(!parent.own && parent.visible);
    const ProcessVerdict ghost = mine.classify(0x7ffffff0);  // beyond pid_max: never visible
    CHECK(!ghost.own && !ghost.visible);

    // owner = the child; the TaskManager = this process: the grandchild and we are own
    ProcessTree as_worker(child, self);
    CHECK(as_worker.classify(grandchild).own);
    CHECK(as_worker.classify(self).own);
    ProcessTree without_tm(child, 0);
    CHECK(!without_tm.classify(self).own);

    // No TaskManager among our ancestors (the test runner is no JVM).
    CHECK_EQ(find_taskmanager(self), 0);

    kill(grandchild, SIGKILL);
    waitpid(child, nullptr, 0);
    return check::finish("test_process_tree");
}
