"""Flink's contract, mirrored in Python: ``Configuration`` and its options, the list syntax and the
configuration files, the external resource framework and ``ExternalResourceInfo``, the discovery script's
protocol, and Flink's and Java's grammars (one face of the C++ core's csrc/flink/)."""
