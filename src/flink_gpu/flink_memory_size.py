"""Flink's memory size grammar (``MemorySize.parseBytes``): ``"10 gb"``, ``"512mb"``, ``"1 kibibytes"``; a bare
number is bytes; the units b, k, m, g, t, their ``kb``-style forms and long names (bytes, kibibytes, mebibytes,
gibibytes, tebibytes), all powers of 1024, case ignored; at most 2^63 - 1 bytes, a Java long. Zero is a size:
an option that needs a positive one says so itself.

One implementation, in the C++ core (csrc/flink/memory_size.*), with one short form of a size for messages
(``format_memory_size``: ``"10 GiB"``, ``"10.5 GiB"``).
"""

from flink_gpu._native import format_memory_size, parse_memory_size

__all__ = ["format_memory_size", "parse_memory_size"]
