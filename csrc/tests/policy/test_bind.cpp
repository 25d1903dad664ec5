// The one bind (csrc/policy/bind.*) against the simulator: the given GPUs judged by the TaskManager's
// checks, the unhealthy ones left out, the shortage, and the bind itself.
#include "policy/bind.hpp"

#include <unistd.h>

#include <string>
#include <vector>

#include "tests/check.hpp"
#include "tests/fixtures.hpp"
#include "tests/simulated.hpp"

using namespace flinkgpu;

namespace {

std::string g_dir;

const std::string& sim() {
    static const std::string path = simulated::env("FLINK_GPU_TEST_SIMULATOR");
    return path;
}

policy::BindRequest request_for(const NvmlLibrary* lib, std::vector<std::string> gpus, std::size_t count) {
    static int files = 0;
    policy::BindRequest request;
    request.lib = lib;
    request.owner = getpid();
    request.holder.pid = getpid();
    request.bindings.path = g_dir + "/bound-" + std::to_string(++files) + ".bindings";
    request.gpus = std::move(gpus);
    request.count = count;
    return request;
}

using Indices = std::vector<std::string>;
const char* const kCorruptFirst = R"({"devices": [{"health": {"inforom_corrupted": true}}, {}]})";

}  // namespace

TEST_CASE(an_unhealthy_gpu_is_left_out_and_named_while_the_others_are_enough) {
    CHECK_EQ(simulated::with_spec(sim(), kCorruptFirst,
                                  [](const NvmlLibrary& lib) {
        const policy::BindOutcome out = policy::bind(request_for(&lib, {"0", "1"}, 1));
        CHECK(out.status.ok());
        CHECK(out.bound.indices == (Indices{"1"}));
        CHECK(out.usable == (Indices{"1"}));
        CHECK_EQ(out.left_out.size(), static_cast<std::size_t>(1));
        CHECK_EQ(out.left_out[0].first, std::string("0"));
        CHECK_EQ(out.left_out[0].second, std::string("unhealthy: InfoROM corrupted"));
    }),
             0);
}

TEST_CASE(a_check_the_taskmanager_turned_off_binds_the_gpu_its_driver_handed_out) {
    CHECK_EQ(simulated::with_spec(sim(), kCorruptFirst,
                                  [](const NvmlLibrary& lib) {
        policy::BindRequest request = request_for(&lib, {"0"}, 1);
        request.checks.reset(static_cast<std::size_t>(Check::kInforom));
        const policy::BindOutcome out = policy::bind(request);
        CHECK(out.status.ok());
        CHECK(out.bound.indices == (Indices{"0"}));
        CHECK(out.left_out.empty());
    }),
             0);
}

TEST_CASE(too_few_usable_is_the_shortage_sentence_and_binds_nothing) {
    CHECK_EQ(simulated::with_spec(sim(), kCorruptFirst,
                                  [](const NvmlLibrary& lib) {
        const policy::BindRequest request = request_for(&lib, {"0"}, 1);
        const policy::BindOutcome out = policy::bind(request);
        CHECK(out.status.code == StatusCode::kNotEnough);
        CHECK_EQ(out.status.message,
                 std::string("Could not bind: 1 GPU requested, but 0 of the 1 given are usable: GPU 0 is "
                             "left out (unhealthy: InfoROM corrupted). Repair the GPU (nvidia-smi -q -i "
                             "<index> says more) or ask for fewer."));
        CHECK(access(request.bindings.path.c_str(), F_OK) != 0);
    }),
             0);
}

TEST_CASE(a_gpu_nvml_does_not_list_is_taken_as_it_is_after_the_listed_ones) {
    CHECK_EQ(simulated::with_spec(sim(), R"({"devices": [{}]})",
                                  [](const NvmlLibrary& lib) {
        const policy::BindOutcome out = policy::bind(request_for(&lib, {"7", "0"}, 1));
        CHECK(out.status.ok());
        CHECK(out.usable == (Indices{"7", "0"}));
        CHECK(out.bound.indices == (Indices{"0"}));
    }),
             0);
}

TEST_CASE(without_nvml_every_given_gpu_is_taken_as_it_is) {
    const policy::BindOutcome out = policy::bind(request_for(nullptr, {"0", "1"}, 2));
    CHECK(out.status.ok());
    CHECK(out.bound.indices == (Indices{"0", "1"}));
    CHECK(out.left_out.empty());
}

TEST_CASE(a_memory_request_counts_what_the_binding_process_itself_uses_as_free_and_nothing_else) {
    // both GPUs: 60 of 80 GiB used, 20 free; on GPU 0 the binding process (this one: the body runs in a
    // child of it) uses 30 of it (a restarted slot's cached blocks), on GPU 1 a child of it does (another
    // holder's worker): 30 GiB fits GPU 0 only; in a container, where the simulator's pids (host pids) are
    // other processes than ours, neither
    const pid_t child = fixtures::spawn_sleeper();
    const std::string gib30 = std::to_string(30ULL << 30), gib60 = std::to_string(60ULL << 30);
    const std::string spec = R"({"devices": [{"memory_used": )" + gib60 + R"(, "processes": [{"pid": )" +
                             std::to_string(getpid()) + R"(, "used_memory": )" + gib30 + R"(}]}, {"memory_used": )" +
                             gib60 + R"(, "processes": [{"pid": )" + std::to_string(child) + R"(, "used_memory": )" +
                             gib30 + R"(}]}]})";
    CHECK_EQ(simulated::with_spec(sim(), spec.c_str(),
                                  [](const NvmlLibrary& lib) {
        policy::BindRequest own = request_for(&lib, {"0"}, 1);
        own.owner = own.holder.pid = getppid();
        own.memory = 30ULL << 30;
        const policy::BindOutcome got = policy::bind(own);
        CHECK(got.status.ok() == simulated::pids_are_hosts());
        if (got.status.ok()) CHECK_EQ(got.bound.memory, 30ULL << 30);
        policy::BindRequest sibling = request_for(&lib, {"1"}, 1);
        sibling.owner = sibling.holder.pid = getppid();
        sibling.memory = 30ULL << 30;
        const policy::BindOutcome refused = policy::bind(sibling);
        CHECK(refused.status.code == StatusCode::kNotEnough);
        CHECK(refused.status.message.find("GPU 1 is free, none of its 80 GiB requested, 20 GiB free") !=
              std::string::npos);
    }),
             0);
    fixtures::kill_and_reap(child);
}

TEST_CASE(a_memory_request_larger_than_every_given_gpu_is_invalid_and_names_the_largest) {
    CHECK_EQ(simulated::with_spec(sim(), R"({"devices": [{"health": {"inforom_corrupted": true}}, {}]})",
                                  [](const NvmlLibrary& lib) {
        policy::BindRequest request = request_for(&lib, {"0", "1"}, 1);
        request.memory = 100ULL << 30;
        const policy::BindOutcome out = policy::bind(request);
        CHECK(out.status.code == StatusCode::kInvalidArgument);
        CHECK(out.status.message.find("larger than any GPU given (the largest, GPU 0, has 80 GiB)") !=
              std::string::npos);
    }),
             0);
}

int main(int argc, char** argv) {
    const fixtures::ScratchDir scratch("/tmp/flinkgpu-bind-XXXXXX");
    if (scratch.path().empty()) return 2;
    g_dir = scratch.path();
    return check::run(argc, argv);
}
