// The judge of a coordination line's owner (docs/design.md §9.4) on given evidence, and the real probes
// it uses: our pid namespace and /proc.
#include "coordination/liveness.hpp"

#include <sys/stat.h>
#include <unistd.h>

#include <map>
#include <string>

#include "tests/check.hpp"

namespace co = flinkgpu::coordination;

namespace {

// Evidence given by the test; records what the judge asked for.
class Given final : public co::Evidence {
public:
    std::map<std::uint32_t, co::LeaseState> leases;
    std::map<pid_t, co::ProcInfo> processes;
    std::string lease_file = "00000000000000aa";  // the token of the lease file the path names
    int lease_asks = 0, process_asks = 0;

    co::LeaseState lease(std::uint32_t slot, const std::string& token) override {
        ++lease_asks;
        // another lease file's; without a token (none recorded, or `none`) the byte on the named one
        if (co::valid_lease_file_token(token) && token != lease_file) return co::LeaseState::kUnknown;
        auto it = leases.find(slot);
        return it == leases.end() ? co::LeaseState::kUnknown : it->second;
    }
    const co::ProcInfo& process(pid_t pid) override {
        ++process_asks;
        return processes[pid];  // absent: a ProcInfo that does not exist
    }
};

co::ProcInfo running(std::uint64_t start) {
    co::ProcInfo p;
    p.exists = true;
    p.has_start_time = true;
    p.start_time = start;
    return p;
}

co::Entry entry(const std::string& line) { return co::parse_file(line)[0].entry; }

const co::PidNamespace kOurs{true, 100};

co::Verdict judged(const std::string& line, Given& given, const co::PidNamespace& ours = kOurs) {
    return co::judge(entry(line), ours, given);
}

// pid 1 runs with start time 50; lease slot 0 is held, slot 1 free, the others untestable.
Given pid_1_and_two_leases() {
    Given g;
    g.processes[1] = running(50);
    g.leases[0] = co::LeaseState::kHeld;
    g.leases[1] = co::LeaseState::kFree;
    return g;
}

}  // namespace

TEST_CASE(a_line_of_our_namespace_is_judged_by_pid_and_start_time) {
    Given g = pid_1_and_two_leases();
    // Our namespace, or none recorded: pid and start time, as before.
    CHECK(judged("0 1\t50\tns=100", g) == co::Verdict::kAlive);
    CHECK(judged("0 1\t51\tns=100", g) == co::Verdict::kPidReused);
    CHECK(judged("0 2\t50\tns=100", g) == co::Verdict::kGone);
    CHECK(judged("0 1", g) == co::Verdict::kAlive);  // the stock script's line: ps -p 1 in our namespace
    CHECK(judged("0 1\t51", g) == co::Verdict::kPidReused);
    CHECK(judged("0 2", g) == co::Verdict::kGone);
}

TEST_CASE(a_line_of_another_namespace_without_a_lease_is_never_judged_by_pid) {
    Given g = pid_1_and_two_leases();
    // Another namespace without a lease: never judged by pid or start time, whatever they say here.
    g.process_asks = 0;
    CHECK(judged("0 1\t51\tns=200", g) == co::Verdict::kOtherNamespace);
    CHECK(judged("0 2\t50\tns=200", g) == co::Verdict::kOtherNamespace);
    CHECK(judged("0 1\t50\tns=200", g) == co::Verdict::kOtherNamespace);
    CHECK_EQ(g.process_asks, 0);
    // Our namespace unknown (no /proc): every ns field is another namespace's.
    CHECK(judged("0 1\t50\tns=100", g, co::PidNamespace{}) == co::Verdict::kOtherNamespace);
}

TEST_CASE(a_lease_on_the_named_lease_file_decides_only_in_another_namespace) {
    Given g = pid_1_and_two_leases();
    // In another namespace only the lease speaks: held = taken (liveness unknown: a process holds the byte),
    // free = dead; the pid there is never asked.
    g.process_asks = 0;
    CHECK(judged("0 2\t50\tns=200\tlease=0", g) == co::Verdict::kLeaseHeld);
    CHECK(judged("0 2\t50\tns=200\tlease=0\tlf=none", g) == co::Verdict::kLeaseHeld);
    CHECK(judged("0 1\t50\tns=200\tlease=1\tlf=00000000000000aa", g) == co::Verdict::kLeaseReleased);
    CHECK_EQ(g.process_asks, 0);
}

TEST_CASE(in_the_holders_own_namespace_its_pid_decides_whatever_its_lease_byte_says) {
    Given g = pid_1_and_two_leases();
    // A free byte (a lease file forged with the old token for a new inode) never outweighs a live pid with
    // the right start time; a held byte (read-locked by anyone who can open the lease file as the holder
    // died) never keeps a missing pid, or a pid with another start time, alive. The lease is not even asked.
    g.lease_asks = 0;
    CHECK(judged("0 1\t50\tns=100\tlease=1\tlf=00000000000000aa", g) == co::Verdict::kAlive);
    CHECK(judged("0 1\t50\tlease=1\tlf=00000000000000aa", g) == co::Verdict::kAlive);
    CHECK(judged("0 2\t50\tns=100\tlease=0\tlf=00000000000000aa", g) == co::Verdict::kGone);
    CHECK(judged("0 2\t50\tns=100\tlease=0", g) == co::Verdict::kGone);
    CHECK(judged("0 1\t51\tns=100\tlease=0\tlf=00000000000000aa", g) == co::Verdict::kPidReused);
    CHECK_EQ(g.lease_asks, 0);
}

TEST_CASE(a_binding_whose_taskmanager_is_gone_is_stale_where_its_pid_can_be_probed) {
    Given g = pid_1_and_two_leases();
    g.processes[3] = running(70);  // a live TaskManager; pid 9 is none
    // A worker orphaned by its TaskManager (reparented to init, alive) holds nothing in our namespace.
    CHECK(judged("0 1\t50\tns=100\tlease=0\tlf=00000000000000aa\ttm=9\tshare=1", g) == co::Verdict::kTaskManagerGone);
    CHECK(judged("0 1\t50\tns=100\tlease=0\tlf=00000000000000aa\ttm=3\tshare=1", g) == co::Verdict::kAlive);
    // in another namespace neither pid can be probed: its lease speaks, as for any line there
    CHECK(judged("0 1\t50\tns=200\tlease=0\tlf=00000000000000aa\ttm=9\tshare=1", g) == co::Verdict::kLeaseHeld);
    CHECK(!co::verdict_alive(co::Verdict::kTaskManagerGone));
}

TEST_CASE(a_free_lease_without_a_token_proves_nothing) {
    Given g = pid_1_and_two_leases();
    // No token says which lease file the lease was taken on (an older version's line, or `lf=none`: its lease
    // file had none): a free byte may be on a lease file created since, so the line is judged as if it had no
    // lease. Another namespace's stays taken, of unknown liveness (never dead: another pid 1's GPU).
    for (const char* lf : {"", "\tlf=none"}) {
        const std::string free_lease = std::string("\tlease=1") + lf;
        CHECK(judged("0 1\t50\tns=200" + free_lease, g) == co::Verdict::kOtherNamespace);
        CHECK(judged("0 2\t50\tns=200" + free_lease, g) == co::Verdict::kOtherNamespace);
        CHECK(judged("0 1\t50\tns=100" + free_lease, g) == co::Verdict::kAlive);
        CHECK(judged("0 1\t50" + free_lease, g) == co::Verdict::kAlive);
        CHECK(judged("0 1\t51\tns=100" + free_lease, g) == co::Verdict::kPidReused);
        CHECK(judged("0 2\t50\tns=100" + free_lease, g) == co::Verdict::kGone);
        CHECK(judged("0 1\t50\tns=200" + free_lease + "\ttm=9\tshare=1\tslot=s", g) == co::Verdict::kOtherNamespace);
    }
}

TEST_CASE(a_lease_on_another_lease_file_or_untestable_proves_nothing) {
    Given g = pid_1_and_two_leases();
    // A lease taken on another lease file (deleted and created again, or replaced) proves nothing: judged by
    // pid and start time in our namespace, of unknown liveness in another; never dead for a free byte.
    CHECK(judged("0 1\t50\tns=100\tlease=1\tlf=00000000000000bb", g) == co::Verdict::kAlive);
    CHECK(judged("0 1\t51\tns=100\tlease=0\tlf=00000000000000bb", g) == co::Verdict::kPidReused);
    CHECK(judged("0 2\t50\tns=100\tlease=1\tlf=00000000000000bb", g) == co::Verdict::kGone);
    CHECK(judged("0 2\t50\tns=200\tlease=1\tlf=00000000000000bb", g) == co::Verdict::kOtherNamespace);
    CHECK(judged("0 1\t50\tns=200\tlease=0\tlf=00000000000000bb", g) == co::Verdict::kOtherNamespace);
    // A lease that cannot be tested (no lease file): as if the line had none.
    CHECK(judged("0 1\t50\tns=200\tlease=5", g) == co::Verdict::kOtherNamespace);
    CHECK(judged("0 2\t50\tns=100\tlease=5", g) == co::Verdict::kGone);
    CHECK(judged("0 1\t50\tns=100\tlease=5", g) == co::Verdict::kAlive);
}

TEST_CASE(a_slot_threads_line_is_judged_by_its_thread_here_and_dead_elsewhere_when_its_lease_is_free) {
    Given g = pid_1_and_two_leases();
    // A slot thread's line (coordination/bindings.hpp): its lease is its process's (pid 1's, here its
    // TaskManager). In our namespace the thread is judged by its id and start time (it may have ended while its
    // process lives); in another a free lease proves it dead, a held one nothing of the thread (liveness
    // unknown: what `clean --foreign-namespaces` removes).
    CHECK(judged("0 2\t50\tns=100\tlease=0\ttm=1\tshare=1\tslot=s", g) == co::Verdict::kGone);
    CHECK(judged("0 1\t51\tns=100\tlease=0\ttm=1\tshare=1\tslot=s", g) == co::Verdict::kPidReused);
    CHECK(judged("0 1\t50\tns=100\tlease=0\ttm=1\tshare=1\tslot=s", g) == co::Verdict::kAlive);
    CHECK(judged("0 2\t50\tns=200\tlease=0\ttm=9\tshare=1\tslot=s", g) == co::Verdict::kOtherNamespace);
    CHECK(judged("0 1\t50\tns=100\tlease=1\tlf=00000000000000aa\ttm=1\tshare=1\tslot=s", g) == co::Verdict::kAlive);
    CHECK(judged("0 1\t50\tns=200\tlease=1\tlf=00000000000000aa\ttm=9\tshare=1\tslot=s", g) ==
          co::Verdict::kLeaseReleased);
    CHECK(judged("0 1\t50\tns=200\ttm=9\tshare=1\tslot=s", g) == co::Verdict::kOtherNamespace);
}

TEST_CASE(alive_held_and_other_namespace_verdicts_keep_a_line) {
    CHECK(co::verdict_alive(co::Verdict::kAlive) && co::verdict_alive(co::Verdict::kLeaseHeld) &&
          co::verdict_alive(co::Verdict::kOtherNamespace));
    CHECK(!co::verdict_alive(co::Verdict::kGone) && !co::verdict_alive(co::Verdict::kPidReused) &&
          !co::verdict_alive(co::Verdict::kLeaseReleased));
}

TEST_CASE(a_line_records_a_pid_only_of_our_namespace) {
    // records(): same pid of our namespace (or none recorded); another namespace's pid 7 is not our pid 7.
    CHECK(entry("0 7\t5\tns=100").records(7, true, kOurs));
    CHECK(!entry("0 7\t5\tns=200").records(7, true, kOurs));
    CHECK(!entry("0 7\t5\tns=100").records(8, true, kOurs));
    CHECK(!entry("0 7\t5\tns=100").records(7, true, co::PidNamespace{}));
    CHECK(entry("0 7\t5").records(7, true, kOurs));  // older versions of ours
    // A bare stock line never records the calling process itself; for another owner (the executable's
    // parent TaskManager, as the stock script records it) it does.
    CHECK(!entry("0 7").records(7, true, kOurs));
    CHECK(entry("0 7").records(7, false, kOurs));
}

TEST_CASE(equal_pids_of_two_namespaces_are_two_holders_and_a_slots_threads_one) {
    // pid_is_in(): whether the pid is a number of our namespace; a line that records none is ours.
    CHECK(entry("0 1\t5\tns=100").pid_is_in(kOurs) && entry("0 1").pid_is_in(kOurs));
    CHECK(!entry("0 1\t5\tns=200").pid_is_in(kOurs) && !entry("0 1\t5\tns=100").pid_is_in(co::PidNamespace{}));

    // key(): equal pids (and equal slots of equal TaskManager pids) of two namespaces are two holders; the
    // threads of one slot are one holder; a line without a namespace is ours.
    const co::Entry a = entry("0 1\t5\tns=100"), b = entry("1 1\t5\tns=200");
    CHECK(a.key(kOurs) != b.key(kOurs) && !a.same_holder(b, kOurs));
    CHECK(a.same_holder(entry("3 1\t9\tns=100"), kOurs) && a.same_holder(entry("3 1"), kOurs));
    const co::Entry t1 = entry("0 11\t5\tns=100\ttm=1\tshare=2\tslot=s"),
                    t2 = entry("1 12\t6\tns=100\ttm=1\tshare=2\tslot=s"),
                    other = entry("0 11\t5\tns=200\ttm=1\tshare=2\tslot=s");
    CHECK(t1.same_holder(t2, kOurs) && !t1.same_holder(other, kOurs) && !t1.same_holder(a, kOurs));
    CHECK(t1.taskmanager_key(kOurs) == a.key(kOurs) && other.taskmanager_key(kOurs) != a.key(kOurs));
    CHECK(a.taskmanager_key(kOurs).empty());
}

TEST_CASE(verdicts_map_to_alive_dead_or_unknown_liveness) {
    // liveness_of(): alive, dead, or unknown (taken all the same).
    CHECK(co::liveness_of(co::Verdict::kAlive) == co::Liveness::kAlive);
    // a held lease byte proves that some process holds it, not that the line's holder lives
    CHECK(co::liveness_of(co::Verdict::kLeaseHeld) == co::Liveness::kUnknown &&
          co::liveness_of(co::Verdict::kOtherNamespace) == co::Liveness::kUnknown);
    CHECK(co::liveness_of(co::Verdict::kGone) == co::Liveness::kDead &&
          co::liveness_of(co::Verdict::kPidReused) == co::Liveness::kDead &&
          co::liveness_of(co::Verdict::kTaskManagerGone) == co::Liveness::kDead &&
          co::liveness_of(co::Verdict::kLeaseReleased) == co::Liveness::kDead);
}

TEST_CASE(our_pid_namespace_is_read_from_proc_and_cached) {
    const co::PidNamespace ns = co::own_pid_namespace();
    struct stat st{};
    CHECK(stat("/proc/self/ns/pid", &st) == 0);
    CHECK(ns.known && ns.inode == static_cast<std::uint64_t>(st.st_ino));
    CHECK(co::own_pid_namespace().inode == ns.inode);  // cached, the same
}

TEST_CASE(without_a_lease_file_a_real_process_is_judged_by_pid_and_namespace) {
    const co::PidNamespace ns = co::own_pid_namespace();
    // Liveness without leases: a lease field cannot be tested, so the line is judged by its pid.
    co::LineJudge live(nullptr);
    const co::ProcInfo me = live.process(getpid());
    CHECK(me.exists && me.has_start_time);
    co::HolderIdentity f;
    f.pid = getpid();
    f.has_start_time = true;
    f.start_time = me.start_time;
    f.has_ns = true;
    f.ns = ns.inode;
    f.has_lease = true;
    f.lease = 3;
    co::Entry mine = co::new_line("0", f).entry;
    live.judge(&mine);
    CHECK(mine.verdict == co::Verdict::kAlive && mine.alive);
    CHECK(live.owns(mine, getpid(), me));
    co::Entry foreign = mine;
    foreign.ns = ns.inode + 1;
    live.judge(&foreign);
    CHECK(foreign.verdict == co::Verdict::kOtherNamespace && foreign.alive);
    CHECK(!live.owns(foreign, getpid(), me));
    co::Entry bare = co::parse_file("0 " + std::to_string(getpid()))[0].entry;
    live.judge(&bare);
    CHECK(bare.alive && !live.owns(bare, getpid(), me));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
