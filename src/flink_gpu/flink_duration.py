"""Flink's duration grammar (``TimeUtils.parseDuration``): ``"5 s"``, ``"500ms"``, ``"2 min"``; a bare
number is milliseconds; the units d, h, min/m, s, ms, µs, ns and their long names, case ignored.

One implementation, in the C++ core (csrc/flink/duration.*), shared with ``flink-gpu-discovery``'s
``--nvml-timeout``; the ``Duration`` options of :mod:`flink_gpu.config` read through it.
"""

from flink_gpu._native import parse_duration

__all__ = ["parse_duration"]
