// The one discovery (csrc/policy/discover.*) against the simulator: the choice, the shortage, the claim.
#include "policy/discover.hpp"

#include "coordination/claims.hpp"
#include "nvml/devices.hpp"

#include <unistd.h>

#include <string>
#include <vector>

#include "tests/check.hpp"
#include "tests/fixtures.hpp"
#include "tests/simulated.hpp"

using namespace flinkgpu;
namespace co = flinkgpu::coordination;

namespace {

std::string g_dir;

const std::string& sim() {
    static const std::string path = simulated::env("FLINK_GPU_TEST_SIMULATOR");
    return path;
}

// A request for `amount` of every device `lib` enumerates, judged for this process.
policy::DiscoveryRequest request_for(const NvmlLibrary& lib, std::size_t amount) {
    Enumeration found;
    CHECK(enumerate_devices(lib, &found).ok());
    policy::DiscoveryRequest request;
    for (const auto& d : found.devices) request.enumerated.push_back(d.index);
    for (const auto& s : found.skipped) request.skipped.emplace_back(s.index, s.reason);
    request.owner = getpid();
    request.amount = amount;
    return request;
}

using Indices = std::vector<std::string>;

}  // namespace

TEST_CASE(the_best_amount_are_chosen_and_an_unhealthy_gpu_never) {
    CHECK_EQ(simulated::with_spec(sim(), R"({"devices": [{"health": {"inforom_corrupted": true}}, {}, {}]})",
                                  [](const NvmlLibrary& lib) {
        const policy::DiscoveryOutcome out = policy::discover(lib, request_for(lib, 2));
        CHECK(out.status.ok());
        CHECK(out.chosen == (Indices{"1", "2"}));
        CHECK_EQ(out.choice.states.size(), static_cast<std::size_t>(3));
        CHECK(out.added.empty());
    }),
             0);
}

TEST_CASE(too_few_usable_is_one_sentence_naming_each_gpu_left_out_and_why) {
    CHECK_EQ(simulated::with_spec(sim(), R"({"devices": [{"health": {"inforom_corrupted": true}}, {}]})",
                                  [](const NvmlLibrary& lib) {
        const policy::DiscoveryOutcome out = policy::discover(lib, request_for(lib, 2));
        CHECK(out.status.code == StatusCode::kNotEnough);
        CHECK_EQ(out.status.message, std::string("Could not get enough GPU resources: 2 GPUs requested, "
                                                 "but 1 of the 2 devices NVML lists is usable: GPU 0 is "
                                                 "left out (unhealthy: InfoROM corrupted)."));
        CHECK(out.chosen.empty());
    }),
             0);
}

TEST_CASE(a_health_check_turned_off_keeps_its_finding_from_leaving_a_gpu_out) {
    CHECK_EQ(simulated::with_spec(sim(), R"({"devices": [{"health": {"inforom_corrupted": true}}]})",
                                  [](const NvmlLibrary& lib) {
        policy::DiscoveryRequest request = request_for(lib, 1);
        request.checks.reset(static_cast<std::size_t>(Check::kInforom));
        const policy::DiscoveryOutcome out = policy::discover(lib, request);
        CHECK(out.status.ok());
        CHECK(out.chosen == (Indices{"0"}));
    }),
             0);
}

TEST_CASE(a_coordinated_discovery_claims_for_the_owner_and_asking_again_gets_the_same) {
    CHECK_EQ(simulated::with_spec(sim(), R"({"devices": [{}, {}, {}]})",
                                  [](const NvmlLibrary& lib) {
        policy::DiscoveryRequest request = request_for(lib, 2);
        request.coordinated = true;
        request.coordination.path = g_dir + "/claimed";
        const policy::DiscoveryOutcome first = policy::discover(lib, request);
        CHECK(first.status.ok());
        CHECK(first.chosen == (Indices{"0", "1"}));
        CHECK(first.added == (Indices{"0", "1"}));
        const policy::DiscoveryOutcome again = policy::discover(lib, request);
        CHECK(again.chosen == (Indices{"0", "1"}));
        CHECK(again.added.empty());
        const co::Snapshot seen = co::snapshot(request.coordination);
        CHECK_EQ(seen.entries.size(), static_cast<std::size_t>(2));
        for (const co::Entry& e : seen.entries) CHECK_EQ(e.pid, getpid());
    }),
             0);
}

TEST_CASE(an_owner_gone_while_nvml_was_read_gets_no_claim) {
    CHECK_EQ(simulated::with_spec(sim(), R"({"devices": [{}]})",
                                  [](const NvmlLibrary& lib) {
        policy::DiscoveryRequest request = request_for(lib, 1);
        request.coordinated = true;
        request.coordination.path = g_dir + "/gone";
        request.before_claim = [](const Choice&) { return false; };
        const policy::DiscoveryOutcome out = policy::discover(lib, request);
        CHECK(out.status.ok() && out.owner_gone && out.chosen.empty());
        CHECK(access(request.coordination.path.c_str(), F_OK) != 0);
    }),
             0);
}

int main(int argc, char** argv) {
    const fixtures::ScratchDir scratch("/tmp/flinkgpu-discover-XXXXXX");
    if (scratch.path().empty()) return 2;
    g_dir = scratch.path();
    return check::run(argc, argv);
}
