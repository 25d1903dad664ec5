// The set a claim or bind of two or more takes (csrc/topology/sets.*), on the layouts of real hosts.
#include "topology/sets.hpp"

#include "tests/check.hpp"

#include <string>
#include <vector>

using namespace flinkgpu;
using namespace flinkgpu::topology;

namespace {

using Indices = std::vector<std::string>;

// GPUs 0..n-1 all on one host bridge, NVLink bridges on the given pairs.
Links bridged(unsigned n, const std::vector<std::pair<unsigned, unsigned>>& bridges, unsigned links = 4) {
    Links l;
    for (unsigned a = 0; a < n; ++a)
        for (unsigned b = a + 1; b < n; ++b) l.set(a, b, Link{0, Pcie::kHostBridge});
    for (const auto& [a, b] : bridges) l.set(a, b, Link{links, Pcie::kHostBridge});
    return l;
}

std::vector<Candidate> all(unsigned n, int rank = 0) {
    std::vector<Candidate> c;
    for (unsigned i = 0; i < n; ++i) c.push_back({std::to_string(i), rank});
    return c;
}

Indices taken(const std::vector<Candidate>& ordered, const std::vector<std::size_t>& at) {
    Indices out;
    for (const std::size_t i : at) out.push_back(ordered[i].index);
    return out;
}

Indices choose(const Links& l, const std::vector<Candidate>& c, std::size_t need, const Indices& fixed = {}) {
    return taken(c, choose_set(l, fixed, c, need));
}

}  // namespace

TEST_CASE(a_pair_bridged_across_index_order_is_taken_whole) {
    // RTX 3090 servers: bridges on 0-2 and 1-3; index order would give 0,1 (PCIe only)
    const Links l = bridged(4, {{0, 2}, {1, 3}});
    CHECK(choose(l, all(4), 2) == (Indices{"0", "2"}));
    // the next claimer, 0 and 2 taken, gets the other pair whole
    CHECK(choose(l, {{"1", 0}, {"3", 0}}, 2) == (Indices{"1", "3"}));
}

TEST_CASE(four_claimers_of_two_on_a_bridged_host_each_get_a_whole_pair) {
    const Links l = bridged(8, {{0, 2}, {1, 3}, {4, 6}, {5, 7}});
    std::vector<Candidate> free = all(8);
    for (int claimer = 0; claimer < 4; ++claimer) {
        const Indices got = choose(l, free, 2);
        CHECK_EQ(got.size(), 2u);
        CHECK_EQ(l.between(got[0], got[1]).nvlinks, 4u);
        std::vector<Candidate> rest;
        for (const Candidate& c : free)
            if (c.index != got[0] && c.index != got[1]) rest.push_back(c);
        free = rest;
    }
    CHECK(free.empty());
}

TEST_CASE(the_closer_pcie_relation_decides_between_sets_without_nvlink) {
    // two sockets, two GPUs on each: 0,1 on socket 0 under one switch; 2,3 on socket 1
    Links l;
    l.set(0, 1, Link{0, Pcie::kSwitch});
    l.set(2, 3, Link{0, Pcie::kSwitches});
    for (unsigned a : {0u, 1u})
        for (unsigned b : {2u, 3u}) l.set(a, b, Link{0, Pcie::kSystem});
    CHECK(choose(l, all(4), 2) == (Indices{"0", "1"}));
    CHECK(choose(l, {{"1", 0}, {"2", 0}, {"3", 0}}, 2) == (Indices{"2", "3"}));
}

TEST_CASE(a_worse_class_is_never_taken_for_a_better_link) {
    // 0 and 2 are bridged, but 2 is busy: of the idle 0, 1, 3 the claim takes two, never 2
    const Links l = bridged(4, {{0, 2}, {1, 3}});
    const std::vector<Candidate> c = {{"0", 0}, {"1", 0}, {"3", 0}, {"2", 1}};
    CHECK(choose(l, c, 2) == (Indices{"1", "3"}));
    // a class taken whole comes with its best partner from the next class
    const std::vector<Candidate> d = {{"0", 0}, {"1", 1}, {"2", 1}, {"3", 1}};
    CHECK(choose(l, d, 2) == (Indices{"0", "2"}));
}

TEST_CASE(what_the_owner_holds_is_a_member_of_the_set) {
    const Links l = bridged(4, {{0, 2}, {1, 3}});
    CHECK(choose(l, {{"0", 0}, {"1", 0}, {"2", 0}}, 1, {"3"}) == (Indices{"1"}));
}

TEST_CASE(without_links_the_callers_order_stands) {
    const Links none;
    CHECK(choose(none, {{"3", 0}, {"1", 0}, {"0", 1}}, 2) == (Indices{"3", "1"}));
    // all pairs alike: the first ones
    const Links flat = bridged(6, {});
    CHECK(choose(flat, all(6), 3) == (Indices{"0", "1", "2"}));
    CHECK(choose(flat, all(6), 0).empty());
    CHECK(choose(flat, all(2), 5) == (Indices{"0", "1"}));
}

TEST_CASE(a_choice_that_ties_leaves_an_intact_pair_for_the_next_claimer) {
    // a chain 0-1-2-3 of equal bridges: 0-1, 1-2 and 2-3 tie, but 1-2 would leave two lone GPUs
    const Links l = bridged(4, {{0, 1}, {1, 2}, {2, 3}});
    const std::vector<Candidate> c = {{"1", 0}, {"2", 0}, {"0", 0}, {"3", 0}};  // least-bound would say 1, 2
    CHECK(choose(l, c, 2) == (Indices{"1", "0"}));
}

TEST_CASE(four_of_an_nvswitch_host_with_a_link_down_take_the_fully_linked_ones) {
    // HGX: every pair NV18 through the switches, but GPU 5 has 2 of its 18 links down (NV16 to everyone)
    Links l;
    for (unsigned a = 0; a < 8; ++a)
        for (unsigned b = a + 1; b < 8; ++b)
            l.set(a, b, Link{a == 5 || b == 5 ? 16u : 18u, a / 4 == b / 4 ? Pcie::kNode : Pcie::kSystem});
    const std::vector<Candidate> c = {{"4", 0}, {"5", 0}, {"6", 0}, {"7", 0}, {"0", 0}};
    CHECK(choose(l, c, 4) == (Indices{"4", "6", "7", "0"}));
    // same socket first: 4, 6, 7 are with each other on one, 0 on the other
    CHECK(choose(l, c, 3) == (Indices{"4", "6", "7"}));
}

TEST_CASE(large_hosts_choose_one_by_one_within_bounds) {
    // 64 candidates, 8 needed: C(64,8) is far past the exhaustive bound; pairs 2i-(2i+1) bridged
    std::vector<std::pair<unsigned, unsigned>> pairs;
    for (unsigned i = 0; i < 64; i += 2) pairs.push_back({i, i + 1});
    const Links l = bridged(64, pairs);
    const Indices got = choose(l, all(64), 8);
    CHECK_EQ(got.size(), 8u);
    unsigned nvlinks = 0;
    for (std::size_t i = 0; i < got.size(); ++i)
        for (std::size_t j = i + 1; j < got.size(); ++j) nvlinks += l.between(got[i], got[j]).nvlinks;
    CHECK_EQ(nvlinks, 16u);  // four whole pairs
}

TEST_CASE(mig_units_are_taken_in_order_their_gpus_links_are_not_theirs) {
    const Links l = bridged(4, {{0, 2}, {1, 3}});
    CHECK(choose(l, {{"0:0", 0}, {"1:0", 0}, {"2:0", 0}}, 2) == (Indices{"0:0", "1:0"}));
    CHECK(choose(l, {{"1", 0}, {"2", 0}}, 1, {"0:1"}) == (Indices{"1"}));
}

TEST_CASE(sets_compare_by_the_choices_own_measure) {
    const Links l = bridged(4, {{0, 2}, {1, 3}});
    CHECK(compare_joined(l, {"0", "2"}, {"0", "1"}) < 0);
    CHECK(compare_joined(l, {"0", "1"}, {"0", "2"}) > 0);
    CHECK_EQ(compare_joined(l, {"0", "2"}, {"1", "3"}), 0);
    Links pcie;
    pcie.set(0, 1, Link{0, Pcie::kSwitch});
    pcie.set(0, 2, Link{0, Pcie::kSystem});
    CHECK(compare_joined(pcie, {"0", "1"}, {"0", "2"}) < 0);
}

TEST_CASE(mig_units_of_one_gpu_are_its_own_pcie_point) {
    Links l = bridged(2, {});
    CHECK(l.between("0:1", "0:2") == (Link{0, Pcie::kSameGpu}));
    CHECK(l.between("0:1", "1") == (Link{0, Pcie::kHostBridge}));
    CHECK(l.between("x", "1") == Link());
    CHECK_EQ(Links::cell(Link{12, Pcie::kSystem}), std::string("NV12"));
    CHECK_EQ(Links::cell(Link{0, Pcie::kNode}), std::string("NODE"));
    CHECK_EQ(Links::cell(Link()), std::string("?"));
}

int main(int argc, char** argv) { return check::run(argc, argv); }
