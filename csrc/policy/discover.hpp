// The one discovery policy (docs/design.md §4.2, §5.2, §9.1), for the in-process driver, flink-gpu-discovery
// and `flink-gpu claim`: the state of each enumerated GPU now, judged and ranked (nvml/choice.hpp), and then
// the best `amount` of them, or, coordinated, a claim of them in the host's coordination file
// (coordination/claims.hpp). No NVML call is outstanding of this call while the coordination file is locked:
// a GPU whose state was not read in time is unknown and left out before the claim.
#pragma once

#include "base/status.hpp"
#include "coordination/claims.hpp"
#include "nvml/choice.hpp"
#include "nvml/deadline.hpp"
#include "nvml/devices.hpp"
#include "nvml/loader.hpp"
#include "nvml/state.hpp"

#include <sys/types.h>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace flinkgpu {
namespace policy {

struct DiscoveryRequest {
    std::vector<std::string> enumerated;  // enumerate_devices' indices, in its order
    // No enumeration was made (flink-gpu-discovery: a GPU's first handle can cost seconds): the devices
    // are what the state read finds, and only the GPUs read get a handle. `enumerated` is not looked at.
    bool enumerate_by_reading = false;
    // With enumerate_by_reading: the GPUs that could be handed out, and the unhealthy ones read, are
    // enumerated too (their static properties, in DiscoveryOutcome::enumeration), before anything is
    // claimed, unless every such device of theirs is in `known_devices` (the caller has its properties).
    // A candidate the enumeration skips is left out, with why.
    bool enumerate_candidates = false;
    std::vector<std::string> known_devices;      // indices
    coordination::LeftOut skipped;               // (index, reason) of the devices it skipped: counted in a shortage
    std::string counted = "devices NVML lists";  // what a shortage calls the host's devices
    pid_t owner = 0;                             // the states are judged for it; a claim is for it
    pid_t taskmanager = 0;                       // its processes do not make a GPU busy either (0: none)
    BusyPolicy busy = BusyPolicy::kAvoid;
    // prefer: a discovery of two or more reads the topology of the GPUs it could take (nvml/topology.hpp) first,
    // reads the states of the best joined set of them before any other, and takes the best joined set of the
    // last class it needs (topology/sets.hpp); ignore, or one GPU: no topology is read.
    TopologyPolicy topology = TopologyPolicy::kPrefer;
    CheckSet checks = all_checks();
    double nvml_timeout = kDefaultNvmlTimeoutSeconds;  // seconds, for the whole state read
    double spent = 0;                                  // seconds of it already spent (opening NVML)
    std::size_t amount = 0;
    std::string amount_text;  // the amount as requested, when beyond a size_t (`amount` is then SIZE_MAX)
    bool coordinated = false;
    coordination::Options coordination;  // the coordination file and its lock timeout, when coordinated
    // Called with the choice once NVML was read (which may take long), before anything is handed out or
    // claimed: the caller reports it, and says whether the owner still asks (false hands out and claims
    // nothing, and sets DiscoveryOutcome::owner_gone). Empty: not called.
    std::function<bool(const Choice&)> before_claim;
};

struct DiscoveryOutcome {
    // kNotEnough: too few usable GPUs (the message is "Could not get enough GPU resources: " and the
    // shortage sentence) or, coordinated, too few free (the claim's message, naming the holders); any
    // other failure: NVML or the coordination file
    Status status;
    Choice choice;            // the states, their ranking, the stalls
    Enumeration enumeration;  // enumerate_candidates: of the GPUs with a device not in known_devices
    // uncoordinated: the best `amount`, best first; coordinated: what the owner has for this request,
    // in the stock script's order (held before, then free, then reclaimed from dead owners)
    std::vector<std::string> chosen;
    std::vector<std::string> added;      // coordinated: newly written for the owner
    std::vector<std::string> reclaimed;  // coordinated: the part of `added` taken from dead owners
    std::vector<coordination::BadLine> unparsable;
    Status lease_problem;         // coordinated: as coordination::ClaimResult's
    Notices notices;              // coordinated: the claim's (coordination::ClaimResult's)
    bool too_few_usable = false;  // status is kNotEnough because too few GPUs are usable, not too few free
    bool owner_gone = false;      // before_claim said no: nothing was claimed
};

// The first sentence of every discovery's shortage: what Flink's stock script prints.
inline constexpr const char* kNotEnoughResources = "Could not get enough GPU resources";

// Decides everything a discovery decides, in one call. Never throws.
DiscoveryOutcome discover(const NvmlLibrary& lib, const DiscoveryRequest& request) noexcept;

}  // namespace policy
}  // namespace flinkgpu
