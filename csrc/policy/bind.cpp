#include "policy/bind.hpp"

#include "base/gpu_index.hpp"
#include "flink/memory_size.hpp"
#include "nvml/choice.hpp"
#include "policy/shortage.hpp"

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <new>
#include <unordered_map>
#include <unordered_set>

#include <unistd.h>

namespace flinkgpu {
namespace policy {
namespace {

// The largest given GPU by NVML's total, left-out ones included: what a memory request must not exceed.
struct Largest {
    std::string index;
    std::uint64_t total = 0;
};

// The given GPUs' ranks as busy-gpus avoid ranks them, in `gpus`' order (one NVML does not list: last,
// as it is), and the ones left out. False when NVML gave no states (every GPU is then taken as it is;
// *unread says why).
bool rank_given(const BindRequest& request, const Topology* topology, std::vector<int>* ranks, BindOutcome* out,
                Largest* largest, std::string* unread) {
    std::vector<DeviceState> states;
    bool count_known = false;
    ReadPlan plan = read_plan(BusyPolicy::kAvoid);
    plan.scope.only.emplace();  // the given GPUs only: no other GPU's handle or state is read
    for (const std::string& index : request.gpus) {
        unsigned gpu = 0;
        if (gpu_of(index, &gpu)) plan.scope.only->push_back(gpu);
    }
    const Status read =
        query_states_within(*request.lib, request.owner, request.holder.taskmanager, request.checks, plan,
                            request.nvml_timeout, &states, &out->stalls, &count_known, request.spent);
    if (!read.ok() || !count_known) {
        *unread = !read.ok() ? read.message : "NVML did not count the GPUs in time";
        if (!unread->empty() && unread->back() == '.') unread->pop_back();  // a clause of the shortage's sentence
        return false;
    }
    const std::unordered_set<std::string> given(request.gpus.begin(), request.gpus.end());
    states.erase(
        std::remove_if(states.begin(), states.end(), [&](const DeviceState& s) { return given.count(s.index) == 0; }),
        states.end());
    std::unordered_map<std::string, binding::GpuMemory> memory_of;
    for (const DeviceState& s : states) {
        binding::GpuMemory& m = memory_of[s.index];
        if (s.memory_total) m.total = *s.memory_total;
        if (s.memory_total && s.memory_free) m.free = *s.memory_free;
        // the binding process itself: its CUDA memory is its holders' (a sibling worker of its TaskManager,
        // also `own`, is another holder whose memory this request must not count on)
        for (const GpuProcess& p : s.processes) {
            if (p.own && p.visible && static_cast<pid_t>(p.pid) == request.owner && p.used_memory)
                m.own_used += *p.used_memory;
        }
        if (s.memory_total && *s.memory_total > largest->total) {
            largest->total = *s.memory_total;
            largest->index = s.index;
        }
    }
    if (topology != nullptr) judge_nvlinks(*topology, request.checks, &states);
    Ranking ranking = rank_gpus(states, BusyPolicy::kAvoid);
    std::unordered_map<std::string, int> rank_of;
    int worst = 0;
    for (std::size_t i = 0; i < ranking.indices.size(); ++i) {
        rank_of.emplace(ranking.indices[i], ranking.ranks[i]);
        worst = std::max(worst, ranking.ranks[i]);
    }
    out->left_out = std::move(ranking.left_out);
    std::unordered_set<std::string> left;
    for (const auto& [index, why] : out->left_out) left.insert(index);
    for (const std::string& index : request.gpus) {
        if (left.count(index) != 0) continue;
        out->usable.push_back(index);
        const auto memory = memory_of.find(index);
        out->memory.push_back(memory == memory_of.end() ? binding::GpuMemory() : memory->second);
        const auto found = rank_of.find(index);
        ranks->push_back(found == rank_of.end() ? worst : found->second);
    }
    return true;
}

// The notices of a bind that succeeded (BindOutcome::notices).
void say(const BindRequest& request, BindOutcome* out) {
    if (!out->left_out.empty()) {
        std::string text;
        for (const auto& [index, why] : out->left_out) text += left_out_text(index, why) + "; ";
        text += "binding among GPU(s) ";
        for (std::size_t i = 0; i < out->usable.size(); ++i) text += (i > 0 ? ", " : "") + out->usable[i];
        warn(&out->notices, text + ".");
    }
    const std::string& path = request.bindings.path;
    for (const auto& line : out->bound.unparsable)
        warn(&out->notices, coordination::unparsable_text("bindings file", path, line, "bound"));
    // the lease is the binding process's, a slot's thread's too: its death is what other namespaces cannot see
    if (!out->bound.lease_problem.ok())
        warn(&out->notices,
             coordination::lease_problem_text(out->bound.added, path, out->bound.lease_problem.message, ::getpid()));
}

}  // namespace

BindOutcome bind(const BindRequest& request) noexcept {
    BindOutcome out;
    try {
        std::vector<int> ranks;
        Largest largest;
        std::string unread = "NVML could not be opened";
        // the given GPUs' topology first, within the deadline: the state read judges their NVLinks with it
        Topology topology;
        double spent = request.spent;
        if (request.lib != nullptr && request.topology == TopologyPolicy::kPrefer && request.count >= 2) {
            const auto start = std::chrono::steady_clock::now();
            std::vector<unsigned> gpus;
            for (const std::string& index : request.gpus) {
                unsigned gpu = 0;
                if (gpu_of(index, &gpu) && std::find(gpus.begin(), gpus.end(), gpu) == gpus.end()) gpus.push_back(gpu);
            }
            if (gpus.size() >= 2) read_topology(*request.lib, gpus, (request.nvml_timeout - spent) / 2, &topology);
            spent += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        }
        const Topology* joined = topology.links.empty() ? nullptr : &topology;
        BindRequest timed = request;
        timed.spent = spent;
        const bool read = request.lib != nullptr && rank_given(timed, joined, &ranks, &out, &largest, &unread);
        if (!read) {
            out.usable = request.gpus;
            out.memory.assign(out.usable.size(), binding::GpuMemory());
            ranks.clear();
            out.left_out.clear();
        }
        if (request.memory > 0 && !largest.index.empty() && request.memory > largest.total) {
            out.status = failure(StatusCode::kInvalidArgument,
                                 "Invalid memory request of " + format_memory_size(request.memory) + " (" +
                                     std::to_string(request.memory) +
                                     " bytes): it is larger than any GPU given (the largest, GPU " + largest.index +
                                     ", has " + format_memory_size(largest.total) + "). Ask for at most " +
                                     std::to_string(largest.total) + " bytes.");
            return out;
        }
        if (!out.left_out.empty() && out.usable.size() < request.count) {
            out.status = failure(StatusCode::kNotEnough,
                                 "Could not bind: " +
                                     shortage_sentence(std::to_string(request.count), out.usable.size(),
                                                       request.gpus.size(), "given", out.left_out) +
                                     " Repair the GPU (nvidia-smi -q -i <index> says more) or ask for fewer.");
            return out;
        }
        binding::MemoryRequest memory;
        memory.bytes = request.memory;
        memory.of = out.memory;  // also for a request the holder's binding has already (no `memory` given)
        binding::Placement placement;
        placement.pack = request.pack;
        placement.links = joined != nullptr ? &joined->links : nullptr;
        out.bound = binding::bind(request.bindings, request.holder, out.usable, request.count, request.holders_per_gpu,
                                  ranks, memory, placement);
        out.status = out.bound.status;
        if (out.status.ok()) say(request, &out);
        if (out.status.code == StatusCode::kNotEnough && out.bound.memory > 0) {
            // what the sentence of each GPU cannot say: the GPUs never considered, and why
            if (!read) {
                out.status.message += " " + unread +
                                      ", so no GPU's memory is known: bind without `memory`, or repair "
                                      "NVML (flink-gpu doctor says more).";
            }
            for (const auto& [index, why] : out.left_out) {
                out.status.message += " GPU " + index + " is left out (" + why + ").";
            }
        }
        return out;
    } catch (const std::bad_alloc&) {
        out.status = failure(StatusCode::kOutOfMemory, "Out of memory while binding GPUs.", ENOMEM);
        return out;
    }
}

}  // namespace policy
}  // namespace flinkgpu
