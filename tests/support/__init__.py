"""Helpers shared by the tests, the benchmarks and tools/bench_figures.py, without pytest.

``tests`` is on pytest's ``pythonpath`` (pyproject.toml), so both suites import ``support.…``;
tools/bench_figures.py puts ``tests`` on ``PYTHONPATH`` for its child processes.

* :mod:`support.interop` — what runs beside flink-gpu: our native executable, Flink's stock
  discovery script, a fake ``nvidia-smi`` for it;
* :mod:`support.simulated` — a process pointed at the NVML simulator, pynvml included.
"""
