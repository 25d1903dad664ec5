"""Helpers shared by the tests, the benchmarks and benchmarks/bench_figures.py, without pytest.

``tests`` is on pytest's ``pythonpath`` (pyproject.toml), so both suites import ``support.…``;
benchmarks/bench_figures.py and benchmarks/state_cost.py put ``tests`` on ``PYTHONPATH`` for their child
processes, tools/real_gpu_check.sh for tools/nvml_query_times.py.

* :mod:`support.interop` — what runs beside flink-gpu: our native executable, Flink's stock
  discovery script, a fake ``nvidia-smi`` for it;
* :mod:`support.simulated` — a process pointed at the NVML simulator, pynvml included.
"""
