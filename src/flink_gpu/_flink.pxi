# Flink's discovery-script protocol (csrc/flink/) and the GPU index order (csrc/base/gpu_index.*); included
# by _native.pyx.

from libc.stdint cimport uint64_t

def split_output_lines(str text not None):
    """Lines of a discovery script's output as java.io.BufferedReader#lines() gives them."""
    cdef vector[string] lines = split_output_lines_cpp(_utf8(text))
    return [_text(line) for line in lines]


def parse_gpu_indices(str line not None):
    """GPU indices in one output line, by Flink's rules (docs/design.md §3.3 step 6), duplicates dropped."""
    cdef vector[string] indices = parse_gpu_indices_cpp(_utf8(line))
    return [_text(index) for index in indices]


# --- Java's string rules (csrc/flink/java_text.*): code points straight from the str, no encoding ------

def is_java_whitespace(str ch not None):
    """Java's ``Character.isWhitespace`` for the one character ``ch``."""
    if len(ch) != 1:
        raise TypeError(f"is_java_whitespace() expects one character, got {ch!r}")
    return is_java_whitespace_cpp(<Py_UCS4>ch[0])


def java_trim(str text not None):
    """Java's ``String.trim``: every char <= U+0020 stripped at both ends."""
    cdef Py_ssize_t start = 0, end = len(text)
    while start < end and is_java_trimmed_cpp(text[start]):
        start += 1
    while end > start and is_java_trimmed_cpp(text[end - 1]):
        end -= 1
    return text if start == 0 and end == len(text) else text[start:end]


def is_java_blank(str text):
    """Flink's ``StringUtils.isNullOrWhitespaceOnly``: None, empty or Java whitespace only."""
    cdef Py_UCS4 ch
    if text is None:
        return True
    for ch in text:
        if not is_java_whitespace_cpp(ch):
            return False
    return True


# --- the GPU index order (csrc/base/gpu_index.*) ------------------------------------------------------

def compare_indices(str a not None, str b not None):
    """-1, 0 or 1 as GPU index ``a`` sorts before, with or after ``b`` (2 before 10, numbers first)."""
    cdef string ea = _utf8(a), eb = _utf8(b)
    return compare_indices_cpp(string_view(ea.data(), ea.size()), string_view(eb.data(), eb.size()))


def sort_indices(indices):
    """The GPU indices (str) in the index order: numeric ones by value, then the others as text."""
    cdef vector[string] encoded
    for index in indices:
        if not isinstance(index, str):
            raise TypeError(f"a GPU index must be a str, got {type(index).__name__}: {index!r}")
        encoded.push_back(_utf8(index))
    sort_indices_cpp(&encoded)
    return [_text(index) for index in encoded]


# --- the stock discovery script's arguments (csrc/flink/script_args.*) -------------------------------

SCRIPT_FLAGS = (kEnableCoordinationFlag.decode("ascii"), kCoordinationFileFlag.decode("ascii"),
                kBusyGpusFlag.decode("ascii"), kNvmlTimeoutFlag.decode("ascii"))


cdef vector[string] _script_tokens(tokens) except *:
    cdef vector[string] encoded
    for token in tokens:
        if not isinstance(token, str):
            raise TypeError(f"a discovery script argument must be a str, got {type(token).__name__}: {token!r}")
        encoded.push_back(_utf8(token))
    return encoded


cdef class UnknownToken(_Record):
    """A token the stock script skips (``token``), with the flag it probably meant (``suggestion``) or None."""

    _FIELDS = ("token", "suggestion")
    cdef readonly str token
    cdef readonly object suggestion

    def __init__(self):
        raise TypeError("UnknownToken objects come from parse_script_args()")


cdef class ParsedScriptArgs(_Record):
    """The stock script's reading of the tokens after the amount (csrc/flink/script_args.hpp):
    ``coordination_mode``, ``coordination_file``, ``file_value_missing`` (--coordination-file without a
    value), ``unknown`` (UnknownToken for each token it skips), ``busy_gpus``, ``nvml_timeout`` and ``topology`` (our
    flags' values: None when the flag is absent, "" when it has no value)."""

    _FIELDS = ("coordination_mode", "coordination_file", "file_value_missing", "unknown", "busy_gpus",
               "nvml_timeout", "topology")
    cdef readonly bint coordination_mode
    cdef readonly str coordination_file
    cdef readonly bint file_value_missing
    cdef readonly tuple unknown
    cdef readonly object busy_gpus
    cdef readonly object nvml_timeout
    cdef readonly object topology

    def __init__(self):
        raise TypeError("ParsedScriptArgs objects come from parse_script_args()")


def parse_script_args(tokens):
    """The stock script's reading of the tokens after the amount (plus our --busy-gpus, --nvml-timeout and
    --topology):
    a ParsedScriptArgs."""
    cdef CScriptArgs parsed = parse_script_args_cpp(_script_tokens(tokens))
    cdef ParsedScriptArgs out = ParsedScriptArgs.__new__(ParsedScriptArgs)
    cdef UnknownToken unknown
    found = []
    for u in parsed.unknown:
        unknown = UnknownToken.__new__(UnknownToken)
        unknown.token = _text(u.token)
        unknown.suggestion = _text(u.suggestion) if not u.suggestion.empty() else None
        found.append(unknown)
    out.coordination_mode = parsed.coordination_mode
    out.coordination_file = _text(parsed.coordination_file)
    out.file_value_missing = parsed.file_value_missing
    out.unknown = tuple(found)
    out.busy_gpus = _text(parsed.busy_gpus) if parsed.has_busy_gpus else None
    out.nvml_timeout = _text(parsed.nvml_timeout) if parsed.has_nvml_timeout else None
    out.topology = _text(parsed.topology) if parsed.has_topology else None
    return out


def parse_duration(str text not None):
    """Seconds of ``text`` in Flink's duration grammar (csrc/flink/duration.*: "5 s", "500ms", a bare number
    is milliseconds); ValueError with Flink's reason when it is none."""
    cdef string encoded = _utf8(text)
    cdef double seconds = 0
    cdef string error
    if not parse_flink_duration(string_view(encoded.data(), encoded.size()), &seconds, &error):
        raise ValueError(_text(error))
    return seconds


# --- Flink's memory size grammar (csrc/flink/memory_size.*) ------------------------------------------

def parse_memory_size(str text not None):
    """Bytes of ``text`` in Flink's memory size grammar (csrc/flink/memory_size.*: "10 gb", "512mb", a bare
    number is bytes, 0 included); ValueError naming the text and what is accepted when it is none."""
    cdef string encoded = _utf8(text)
    cdef uint64_t size = 0
    cdef string error
    if not parse_flink_memory_size(string_view(encoded.data(), encoded.size()), &size, &error):
        if error.empty():  # the core had no memory left to say why
            raise MemoryError(f"no memory to read the memory size {text!r}")
        raise ValueError(_text(error))
    return size


def format_memory_size(bytes):
    """A short form of ``bytes`` (an int >= 0) for messages: "10 GiB", "512 MiB", "17 bytes" when it is a
    whole number of its largest unit, else one decimal of it ("10.5 GiB")."""
    if isinstance(bytes, bool) or not isinstance(bytes, int):
        raise TypeError(f"a memory size is an int of bytes, got {type(bytes).__name__}: {bytes!r}")
    if not 0 <= bytes <= 0xFFFFFFFFFFFFFFFF:
        raise ValueError(f"a memory size is 0 to 2**64 - 1 bytes, got {bytes}")
    cdef string formatted = format_memory_size_cpp(<uint64_t>bytes)
    if formatted.empty():
        raise MemoryError(f"no memory to format the memory size {bytes}")
    return _text(formatted)


def with_coordination_file(tokens, str path not None):
    """The tokens with every --coordination-file and its value (the next token, whatever it is)
    removed and ``--coordination-file path`` appended; the rest kept in order."""
    cdef vector[string] replaced = with_coordination_file_cpp(_script_tokens(tokens), _utf8(path))
    return [_text(token) for token in replaced]
