"""Shows a binding's memory limit enforced on a real GPU (tools/real_gpu_check.sh runs it).

Discovers one GPU as a TaskManager's driver would, binds it with ``--memory`` (a Flink memory size),
starts CUDA on it through PyTorch, applies the limit (``GPUBinding.apply_memory_limit``), and then
allocates once within the limit and once beyond it: the first must succeed and the second fail with
PyTorch's out-of-memory error. Prints one JSON object; exits 0 only when both did as they should.

With ``--simulate N`` it binds on the bundled simulator and stops before CUDA (the simulator has no CUDA):
the binding, its limit and its environment are still shown.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile


def main(argv: "list[str] | None" = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--memory", default="1 gb", help="the request, a Flink memory size (default: 1 gb)")
    parser.add_argument("--simulate", type=int, metavar="N", help="bind on the simulator with N GPUs instead")
    args = parser.parse_args(argv)
    if args.simulate:
        from flink_gpu import simulator

        os.environ.update(simulator.environment(devices=args.simulate))  # before NVML first loads

    from flink_gpu import GPUDriver
    from flink_gpu.binding import bind

    out: "dict[str, object]" = {}
    with tempfile.TemporaryDirectory() as scratch, GPUDriver({"discovery-mode": "nvml"}) as driver:
        infos = driver.retrieve_resource_info(1)
        with bind(infos, 1, path=os.path.join(scratch, "check.bindings"), memory=args.memory) as binding:
            limit = binding.memory_limit
            assert limit is not None
            out.update(gpu=binding.indices[0], memory_limit=limit, environment=binding.memory_environment())
            if args.simulate:
                out["cuda"] = "not started: the simulator has no CUDA"
                print(json.dumps(out, indent=2))
                return 0
            os.environ["CUDA_VISIBLE_DEVICES"] = binding.cuda_visible_devices  # before CUDA starts
            import torch

            out["applied"] = binding.apply_memory_limit()
            out["within"] = _allocate(torch, limit // 2)
            out["beyond"] = _allocate(torch, limit + limit // 2)
    print(json.dumps(out, indent=2))
    return 0 if out["within"] == "allocated" and str(out["beyond"]).startswith("OutOfMemoryError") else 1


def _allocate(torch: object, size: int) -> str:
    """ "allocated", or the error PyTorch raised for ``size`` bytes on cuda:0."""
    try:
        block = torch.empty(size, dtype=torch.uint8, device="cuda:0")  # type: ignore[attr-defined]
    except Exception as error:  # torch.cuda.OutOfMemoryError is what the limit gives
        return f"{type(error).__name__}: {str(error).splitlines()[0]}"
    del block
    torch.cuda.empty_cache()  # type: ignore[attr-defined]
    return "allocated"


if __name__ == "__main__":
    sys.exit(main())
