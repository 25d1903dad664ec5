#!/usr/bin/env bash
# The one-shot check on a machine with a real NVIDIA GPU (docs/design.md §4.2): builds, runs the tests that
# need a real driver, times each NVML query flink-gpu makes (idle, then while a CUDA process holds a
# context, if one can be started), runs `flink-gpu list --json`, prints the topology and times its read
# (tools/topology_times.py), a binding's memory limit applied through
# PyTorch (tools/memory_limit_check.py, where PyTorch is installed), `flink-gpu demo --real` and the
# benchmarks, and writes one report. Read-only for the GPU: no MIG, persistence, clock or reset change.
# Meant to take under 5 minutes on one GPU.
#
#   tools/real_gpu_check.sh [REPORT_DIR]            # on the GPU machine ($OUT, else build/real-gpu-check)
#   tools/real_gpu_check.sh --simulate [REPORT_DIR]  # the same steps on the bundled simulator (CI runs it)
set -uo pipefail
cd "$(dirname "$0")/.."
simulate=0
if [ "${1:-}" = "--simulate" ]; then
  simulate=1
  shift
fi
report=${1:-${OUT:-build/real-gpu-check}}
mkdir -p "$report"
report=$(cd "$report" && pwd)
python=${PYTHON:-python3}
summary=$report/summary.md
failed=0

step() {  # step NAME COMMAND...: runs it, its output in NAME.log, its status in the summary
  local name=$1
  shift
  local start=$SECONDS
  if "$@" >"$report/$name.log" 2>&1; then
    echo "- $name: ok ($((SECONDS - start)) s)" >>"$summary"
  else
    echo "- $name: FAILED with $? ($((SECONDS - start)) s), see $name.log" >>"$summary"
    failed=1
  fi
}

{
  echo "# flink-gpu real-GPU check"
  echo
  echo "- date: $(date -u +%FT%TZ), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
  if [ $simulate = 1 ]; then
    echo "- driver: the bundled NVML simulator (--simulate)"
  elif command -v nvidia-smi >/dev/null; then
    echo "- GPUs: $(nvidia-smi --query-gpu=index,name,driver_version,persistence_mode,mig.mode.current \
      --format=csv,noheader 2>&1 | tr '\n' ';')"
  else
    echo "- nvidia-smi: not found"
  fi
  echo
} >"$summary"

step build tools/dev_build.sh
# src (the build) and tests (tests/support, which tools/nvml_query_times.py --simulate uses), as pytest's
# pythonpath has them
export PYTHONPATH=$PWD/src:$PWD/tests${PYTHONPATH:+:$PYTHONPATH}
calls=1000
sim_args=()
cli_sim=()
demo=(demo --real --json)
if [ $simulate = 1 ]; then
  calls=20
  sim_args=(--simulate 2)
  cli_sim=(--simulate 2)
  demo=(--simulate 4 demo --json)
fi

if [ $simulate = 0 ]; then
  step real-driver-tests "$python" -m pytest -q -p no:cacheprovider -m real_gpu tests
fi
step queries-idle "$python" tools/nvml_query_times.py "${sim_args[@]}" --calls $calls --label idle \
  --out "$report/queries-idle.json"

# A CUDA context on GPU 0, held while the queries run again (the driver's state with a client attached).
cuda_holder=
if [ $simulate = 0 ]; then
  "$python" - >"$report/cuda-context.log" 2>&1 <<'EOF' &
import ctypes, sys, time
cuda = ctypes.CDLL("libcuda.so.1")
device, context = ctypes.c_int(), ctypes.c_void_p()
assert cuda.cuInit(0) == 0 and cuda.cuDeviceGet(ctypes.byref(device), 0) == 0
assert cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device) == 0
print("context held", flush=True)
time.sleep(600)
EOF
  cuda_holder=$!
  for _ in $(seq 50); do grep -q "context held" "$report/cuda-context.log" && break; sleep 0.1; done
  if grep -q "context held" "$report/cuda-context.log"; then
    step queries-with-a-cuda-context "$python" tools/nvml_query_times.py --calls $calls --label "cuda context" \
      --out "$report/queries-cuda-context.json"
  else
    echo "- queries-with-a-cuda-context: no CUDA context could be created (cuda-context.log)" >>"$summary"
  fi
  kill "$cuda_holder" 2>/dev/null
  wait "$cuda_holder" 2>/dev/null
fi

step list-json "$python" -m flink_gpu.cli "${cli_sim[@]}" list --json
# The topology the host reports (nvidia-smi topo -m) and what its read costs a claim of two (prefer - ignore);
# a host without NVLink or with one GPU says so and passes.
if [ $simulate = 1 ]; then
  step topology "$python" tools/topology_times.py --runs 3 --simulate rtx3090-bridged-4
else
  step topology "$python" tools/topology_times.py --runs 5
fi
# A binding's memory limit, applied through PyTorch: an allocation within it succeeds, one beyond it fails.
if [ $simulate = 1 ]; then
  step memory-limit "$python" tools/memory_limit_check.py --simulate 2 --memory "1 gb"
elif "$python" -c "import torch" 2>/dev/null; then
  step memory-limit "$python" tools/memory_limit_check.py --memory "1 gb"
else
  echo "- memory-limit: not run: PyTorch is not installed (pip install torch, then run this again)" >>"$summary"
fi
step demo "$python" -m flink_gpu.cli "${demo[@]}"
if [ $simulate = 1 ]; then
  step benchmarks "$python" -m pytest -q -p no:cacheprovider benchmarks --benchmark-disable -k "claim_release"
else
  step benchmarks "$python" -m pytest -q -p no:cacheprovider benchmarks --benchmark-max-time=0.5 \
    --benchmark-columns=min,median -k "not contention"
fi

# The query table: min / median per query and GPU, each run side by side.
"$python" - "$report" >>"$summary" <<'EOF'
import json, pathlib, sys
report = pathlib.Path(sys.argv[1])
runs = [json.loads(p.read_text()) for p in sorted(report.glob("queries-*.json"))]
if runs:
    print("\n## NVML queries, min / median µs\n")
    print("| query | GPU | " + " | ".join(r["label"] for r in runs) + " |")
    print("|---|---|" + "---|" * len(runs))
    first = runs[0]
    for device in first["devices"]:
        for name in device["queries"]:
            cells = []
            for run in runs:
                got = next((d["queries"].get(name) for d in run["devices"] if d["index"] == device["index"]), None)
                cells.append("—" if got is None else got.get("error") or f"{got['min_us']} / {got['median_us']}")
            print(f"| {name} | {device['index']} | " + " | ".join(cells) + " |")
    for run in runs:
        handles = ", ".join(f"GPU {d['index']} {d['first_handle_us']} µs" for d in run["devices"])
        print(f"\n{run['label']}: nvmlInit {run['nvmlInit_us']} µs; first handle: {handles}; "
              + "; ".join(f"{k} {v.get('min_us')} / {v.get('median_us')} µs" for k, v in run["flink_gpu"].items()))
EOF
echo >>"$summary"
[ $failed = 0 ] && echo "All steps passed." >>"$summary" || echo "Some steps FAILED." >>"$summary"
cat "$summary"
exit $failed
