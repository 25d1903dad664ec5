// The topology read (csrc/nvml/topology.*) against the NVML simulator: each GPU's links walked once, pairs
// as `nvidia-smi topo -m` shows them, kept for the process, every query optional.
#include "nvml/topology.hpp"

#include <string>
#include <vector>

#include "tests/check.hpp"
#include "tests/simulated.hpp"

using namespace flinkgpu;
using topology::Link;
using topology::Pcie;

namespace {

std::string library() { return simulated::env("FLINK_GPU_TEST_SIMULATOR"); }

// Four GPUs (`extra`: keys of each), bridges on 0-2 and 1-3 (four links each); 0,1 under host bridge A, 2,3 under B,
// one NUMA node.
std::string bridged(const std::string& extra = "", const std::string& link_1_3 = "{\"to\": {\"gpu\": 3}}",
                    const std::string& link_3_1 = "{\"to\": {\"gpu\": 1}}") {
    auto gpu = [&extra](const char* bridge, const std::string& link) {
        return "{" + extra + "\"pcie\": {\"host_bridge\": \"" + std::string(bridge) +
               "\", \"numa_node\": 0}, \"nvlinks\": [" + link + ", " + link + ", " + link + ", " + link + "]}";
    };
    return "{\"devices\": [" + gpu("A", "{\"to\": {\"gpu\": 2}}") + ", " + gpu("A", link_1_3) + ", " +
           gpu("B", "{\"to\": {\"gpu\": 0}}") + ", " + gpu("B", link_3_1) + "]}";
}

std::vector<unsigned> all4 = {0, 1, 2, 3};

}  // namespace

TEST_CASE(bridged_pairs_read_as_topo_m_shows_them) {
    CHECK_EQ(simulated::with_spec(library(), bridged(),
                                  [](const NvmlLibrary& lib) {
        Topology t;
        read_topology(lib, all4, 5, &t);
        CHECK(t.stalls.empty());
        CHECK(t.links.between(0u, 2u) == (Link{4, Pcie::kSystem}) || t.links.between(0u, 2u) == (Link{4, Pcie::kNode}));
        CHECK(t.links.between(1u, 3u).nvlinks == 4);
        CHECK(t.links.between(0u, 1u) == (Link{0, Pcie::kHostBridge}));
        CHECK_EQ(t.nvlink[0].count, 4u);
        CHECK_EQ(t.nvlink[0].inactive, 0u);
        CHECK(!t.nvlink[0].to_switch);
        // 4 GPUs x (handle, bus id, count, 4 x (state, type, far end)) + 6 pairs
        CHECK_EQ(t.calls, 4ul * (3 + 4 * 3) + 6);
        // kept: a second read makes no call
        Topology again;
        read_topology(lib, all4, 5, &again);
        CHECK_EQ(again.calls, 0ul);
        CHECK(again.links.between(0u, 2u) == t.links.between(0u, 2u));
        // a whole copy of it for other processes, adopted as it is; never with a GPU lost since
        const std::string copy = topology_text(lib, "key", 4);
        CHECK(!copy.empty());
        CHECK(!adopt_topology(lib, copy, "another key", 4));
        CHECK(!adopt_topology(lib, copy.substr(0, copy.size() / 2), "key", 4));  // a part
        CHECK(adopt_topology(lib, copy, "key", 4));
        CHECK_EQ(topology_host_count(lib), 4u);
        forget_topology(lib, 2);
        CHECK(!adopt_topology(lib, copy, "key", 4));
        CHECK(!topology_known(lib, {2}));
        // a GPU forgotten (lost, reset) is read again, with its pairs
        read_topology(lib, all4, 5, &again);
        CHECK_EQ(again.calls, 1ul * (3 + 4 * 3) + 3);
        CHECK(again.links.between(0u, 2u) == t.links.between(0u, 2u));
    }),
             0);
}

TEST_CASE(inactive_links_are_counted_and_join_nothing) {
    const std::string down = "{\"active\": false, \"to\": {\"gpu\": 3}}";
    CHECK_EQ(simulated::with_spec(library(), bridged("", down, "{\"active\": false, \"to\": {\"gpu\": 1}}"),
                                  [](const NvmlLibrary& lib) {
        Topology t;
        read_topology(lib, all4, 5, &t);
        CHECK_EQ(t.links.between(1u, 3u).nvlinks, 0u);
        CHECK_EQ(t.nvlink[1].count, 4u);
        CHECK_EQ(t.nvlink[1].inactive, 4u);
        CHECK_EQ(t.links.between(0u, 2u).nvlinks, 4u);
        // link states change at run time: no copy while one is inactive
        CHECK(topology_text(lib, "key", 4).empty());
    }),
             0);
}

TEST_CASE(an_nvswitch_fabric_joins_every_gpu_that_reaches_it) {
    // three GPUs, each with 2 links to switch S1 and 1 to S2; GPU 2's S2 link is down
    const std::string spec =
        "{\"devices\": ["
        "{\"nvlinks\": [{\"to\": {\"switch\": \"0000:05:00.0\"}}, {\"to\": {\"switch\": \"0000:05:00.0\"}},"
        " {\"to\": {\"switch\": \"0000:06:00.0\"}}]},"
        "{\"nvlinks\": [{\"to\": {\"switch\": \"0000:05:00.0\"}}, {\"to\": {\"switch\": \"0000:05:00.0\"}},"
        " {\"to\": {\"switch\": \"0000:06:00.0\"}}]},"
        "{\"nvlinks\": [{\"to\": {\"switch\": \"0000:05:00.0\"}}, {\"to\": {\"switch\": \"0000:05:00.0\"}},"
        " {\"active\": false, \"to\": {\"switch\": \"0000:06:00.0\"}}]}]}";
    CHECK_EQ(simulated::with_spec(library(), spec,
                                  [](const NvmlLibrary& lib) {
        Topology t;
        read_topology(lib, {0, 1, 2}, 5, &t);
        CHECK_EQ(t.links.between(0u, 1u).nvlinks, 3u);
        CHECK_EQ(t.links.between(0u, 2u).nvlinks, 2u);
        CHECK(t.nvlink[2].to_switch);
        CHECK_EQ(t.nvlink[2].inactive, 1u);
    }),
             0);
}

TEST_CASE(queries_not_supported_leave_that_part_unknown) {
    // no link walk at all: the pair's P2P status says NVLink joins 1-3; no common ancestor: PCIe unknown
    const std::string extra = "\"not_supported\": [\"nvlink\", \"topology\"], ";
    CHECK_EQ(simulated::with_spec(library(), bridged(extra),
                                  [](const NvmlLibrary& lib) {
        Topology t;
        read_topology(lib, all4, 5, &t);
        CHECK(t.stalls.empty());
        CHECK(!t.nvlink[0].known);
        CHECK(t.links.between(1u, 3u) == (Link{1, Pcie::kUnknown}));
        CHECK(t.links.between(0u, 1u) == (Link{0, Pcie::kUnknown}));
    }),
             0);
    // without P2P either: nothing known, no error
    const std::string none = "\"not_supported\": [\"nvlink\", \"topology\", \"p2p_status\"], ";
    CHECK_EQ(simulated::with_spec(library(), bridged(none),
                                  [](const NvmlLibrary& lib) {
        Topology t;
        read_topology(lib, all4, 5, &t);
        CHECK(t.links.between(1u, 3u) == Link());
    }),
             0);
}

TEST_CASE(bus_ids_compare_in_one_spelling) {
    CHECK_EQ(canonical_bus_id("0000:1A:00.0"), std::string("00000000:1a:00.0"));
    CHECK_EQ(canonical_bus_id("00000000:1a:00.0"), std::string("00000000:1a:00.0"));
    CHECK_EQ(canonical_bus_id("not a bus"), std::string("not a bus"));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
