// The configuration: FLINK_GPU_SIM_DEVICES, FLINK_GPU_SIM_SPEC (a JSON file; its keys are documented in
// flink_gpu.simulator's docstring and checked here only: flinkgpuSimCheckSpec checks a spec for Python),
// FLINK_GPU_SIM_PROFILE (a spec file of profiles/ beside this library) and FLINK_GPU_SIM_INIT_ERROR, read into the
// simulated host.
#pragma once

#include <string>
#include <vector>

#include "device_model.hpp"
#include "json.hpp"

namespace flinkgpu_sim {

// Loads the configuration into `s` and the driver model; returns the NVML error code nvmlInit answers
// (a configuration error is said on stderr, naming the key, and answers NVML_ERROR_UNKNOWN).
nvmlReturn_t configure(SimState& s);

// devices[i].pcie and .nvlinks into `d` (spec_topology.cpp); `where` is "devices[i]."
bool read_topology(const simjson::Value& item, const char* spec_path, const std::string& where, SimDevice* d);
// The checks across GPUs: one PCIe tree, NVLinks to GPUs of the spec with a link back for each.
bool check_topology(const std::vector<SimDevice>& gpus, const char* spec_path);

}  // namespace flinkgpu_sim
