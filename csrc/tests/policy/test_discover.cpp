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

// Four GPUs bridged 0-2 and 1-3 (two NVLinks each), 0,1 and 2,3 under two host bridges; `gpu2`: more keys of
// GPU 2 (its own "nvlinks" replace its bridge).
std::string bridged(const std::string& gpu2 = "") {
    auto gpu = [](const char* bridge, unsigned peer, const std::string& extra) {
        const std::string link = R"({"to": {"gpu": )" + std::to_string(peer) + "}}";
        const std::string links =
            extra.find("nvlinks") == std::string::npos ? R"(, "nvlinks": [)" + link + ", " + link + "]" : std::string();
        return "{" + extra + R"("pcie": {"host_bridge": ")" + bridge + R"("})" + links + "}";
    };
    return R"({"devices": [)" + gpu("A", 2, "") + ", " + gpu("A", 3, "") + ", " + gpu("B", 0, gpu2) + ", " +
           gpu("B", 1, "") + "]}";
}

TEST_CASE(a_discovery_of_two_claims_the_bridged_pair_reading_only_its_states) {
    CHECK_EQ(simulated::with_spec(sim(), bridged(),
                                  [](const NvmlLibrary& lib) {
        policy::DiscoveryRequest request = request_for(lib, 2);
        request.coordinated = true;
        request.coordination.path = g_dir + "/bridged";
        const policy::DiscoveryOutcome out = policy::discover(lib, request);
        CHECK_EQ(out.status.message, std::string());
        CHECK(out.chosen == (Indices{"0", "2"}));
        CHECK_EQ(out.choice.states.size(), static_cast<std::size_t>(2));  // 1 and 3 not read
        // another owner gets the other pair
        request.owner = getppid();
        CHECK(policy::discover(lib, request).chosen == (Indices{"1", "3"}));
        // topology: ignore is Flink's order
        policy::DiscoveryRequest plain = request_for(lib, 2);
        plain.topology = TopologyPolicy::kIgnore;
        CHECK(policy::discover(lib, plain).chosen == (Indices{"0", "1"}));
    }),
             0);
}

TEST_CASE(a_gpu_of_the_best_set_that_is_not_of_the_best_class_makes_the_next_best_set_read) {
    CHECK_EQ(simulated::with_spec(sim(), bridged(R"("health": {"row_remap_pending": true}, )"),
                                  [](const NvmlLibrary& lib) {
        const policy::DiscoveryOutcome out = policy::discover(lib, request_for(lib, 2));
        CHECK_EQ(out.status.message, std::string());
        CHECK(out.chosen == (Indices{"1", "3"}));  // never the degraded 2 for its bridge to 0
        CHECK_EQ(out.choice.states.size(), static_cast<std::size_t>(4));
    }),
             0);
}

TEST_CASE(some_nvlinks_inactive_make_a_gpu_degraded_in_a_choice_of_two) {
    // 0-2 bridged with four links, one of them down at GPU 2 (three usable: more than 1-3's two)
    const std::string spec = R"({"devices": [
        {"nvlinks": [{"to": {"gpu": 2}}, {"to": {"gpu": 2}}, {"to": {"gpu": 2}}, {"to": {"gpu": 2}}]},
        {"nvlinks": [{"to": {"gpu": 3}}, {"to": {"gpu": 3}}]},
        {"nvlinks": [{"to": {"gpu": 0}}, {"to": {"gpu": 0}}, {"to": {"gpu": 0}}, {"active": false, "to": {"gpu": 0}}]},
        {"nvlinks": [{"to": {"gpu": 1}}, {"to": {"gpu": 1}}]}]})";
    CHECK_EQ(simulated::with_spec(sim(), spec,
                                  [](const NvmlLibrary& lib) {
        const policy::DiscoveryOutcome out = policy::discover(lib, request_for(lib, 2));
        CHECK_EQ(out.status.message, std::string());
        CHECK(out.chosen == (Indices{"1", "3"}));  // the healthy pair, never the degraded 2 for its links
        bool found = false;
        for (const DeviceState& s : out.choice.states)
            if (s.index == "2") found = s.health_text == "degraded: 1 of 4 NVLinks inactive";
        CHECK(found);
        // left out of the checks, the link does not count against it
        policy::DiscoveryRequest unchecked = request_for(lib, 2);
        unchecked.checks.reset(static_cast<std::size_t>(Check::kNvlink));
        CHECK(policy::discover(lib, unchecked).chosen == (Indices{"0", "2"}));
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
