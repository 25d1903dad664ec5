"""Flink's and Java's grammars, one face of the C++ core's csrc/flink/ (shared with flink-gpu-discovery):

* Java's string rules that Flink's behaviour depends on: ``Character.isWhitespace``, ``String.trim`` and
  ``StringUtils.isNullOrWhitespaceOnly``. ``GPUInfo``, on every operator's hot path, uses them: this module
  imports nothing but the core, and the binding walks the str's code points, so a call costs no encoding.
* Flink's duration grammar (``TimeUtils.parseDuration``): ``"5 s"``, ``"500ms"``, ``"2 min"``; a bare number is
  milliseconds; the units d, h, min/m, s, ms, µs, ns and their long names, case ignored. ``flink-gpu-discovery``'s
  ``--nvml-timeout`` and the ``Duration`` options of :mod:`flink_gpu.flink.configuration` read through it.
* Flink's memory size grammar (``MemorySize.parseBytes``): ``"10 gb"``, ``"512mb"``, ``"1 kibibytes"``; a bare
  number is bytes; the units b, k, m, g, t, their ``kb``-style forms and long names (bytes, kibibytes, mebibytes,
  gibibytes, tebibytes), all powers of 1024, case ignored; at most 2^63 - 1 bytes, a Java long. Zero is a size:
  an option that needs a positive one says so itself. ``format_memory_size`` is the one short form of a size
  for messages (``"10 GiB"``, ``"10.5 GiB"``).
"""

from flink_gpu._native import (
    format_memory_size,
    is_java_blank,
    is_java_whitespace,
    java_trim,
    parse_duration,
    parse_memory_size,
)

__all__ = [
    "format_memory_size",
    "is_java_blank",
    "is_java_whitespace",
    "java_trim",
    "parse_duration",
    "parse_memory_size",
]
