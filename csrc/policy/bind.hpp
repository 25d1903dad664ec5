// The one bind policy (docs/design.md §9.3), for binding.bind and bind_gpus: the state of each given GPU
// now, judged as the TaskManager's driver judges it (its health checks, within its NVML deadline) and
// ranked as busy-gpus avoid ranks it, and then the bind of `count` of the usable ones in the bindings file
// (coordination/bindings.hpp). No NVML call is outstanding of this call while the bindings file is locked.
#pragma once

#include "base/status.hpp"
#include "coordination/bindings.hpp"
#include "coordination/claims.hpp"
#include "nvml/choice.hpp"
#include "nvml/deadline.hpp"
#include "nvml/loader.hpp"
#include "nvml/state.hpp"

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace flinkgpu {
namespace policy {

struct BindRequest {
    // The library to read the GPUs' state with; nullptr where NVML could not be opened: every given
    // GPU is then taken as it is, unranked.
    const NvmlLibrary* lib = nullptr;
    CheckSet checks = all_checks();
    double nvml_timeout = kDefaultNvmlTimeoutSeconds;  // seconds, for the whole state read
    double spent = 0;                                  // seconds of it already spent (opening NVML)
    pid_t owner = 0;                                   // the binding process: its own processes do not make a GPU busy
    coordination::Options bindings;                    // the bindings file and its lock timeout
    binding::Holder holder;
    std::vector<std::string> gpus;  // the given GPUs' indices (the TaskManager's), in the caller's order
    std::size_t count = 1;
    std::uint32_t holders_per_gpu = 1;
    std::uint64_t memory = 0;  // bytes requested on each GPU bound (binding::MemoryRequest); 0: none
    // prefer: a bind of two or more reads the given GPUs' topology (nvml/topology.hpp; the nvlink check is
    // judged with it) and binds the best joined set of the last class it needs; ignore: no topology is read.
    TopologyPolicy topology = TopologyPolicy::kPrefer;
    bool pack = false;  // binding::Placement: fill a GPU up to holders_per_gpu before the next one
};

struct BindOutcome {
    // kNotEnough: too few usable GPUs ("Could not bind: " and the shortage sentence) or too few free
    // (bindings.hpp's message, naming who binds each); any other failure: the bindings file
    Status status;
    binding::BindResult bound;               // when status is ok
    coordination::LeftOut left_out;          // the given GPUs never bound: (index, why), unhealthy or unknown
    std::vector<std::string> usable;         // the given GPUs bound among, in the caller's order
    std::vector<binding::GpuMemory> memory;  // parallel to `usable`: each one's memory as read now
    std::vector<Stall> stalls;               // the NVML calls that did not return in time
    // when status is ok, what to log: the GPUs left out, the bindings file's unparsable lines, a lease problem
    Notices notices;
};

// Decides everything a bind decides, in one call. A given GPU NVML does not list is taken as it is, ranked
// last (and takes no memory request: its memory is not known). Never throws.
BindOutcome bind(const BindRequest& request) noexcept;

}  // namespace policy
}  // namespace flinkgpu
