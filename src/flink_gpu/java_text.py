"""Java's string rules that Flink's behaviour depends on: ``Character.isWhitespace``,
``String.trim`` and ``StringUtils.isNullOrWhitespaceOnly``.

One implementation, in the C++ core (csrc/flink/java_text.*), shared with flink-gpu-discovery; the
binding walks the str's code points, so a call costs no encoding. ``GPUInfo``, on every operator's
hot path, uses it: this module imports nothing else.
"""

from flink_gpu._native import is_java_blank, is_java_whitespace, java_trim

__all__ = ["is_java_blank", "is_java_whitespace", "java_trim"]
