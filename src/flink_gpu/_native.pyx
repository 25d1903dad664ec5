# cython: language_level=3, boundscheck=False, wraparound=False
# distutils: language = c++
"""Binding of the C++ core (csrc/). Thin: conversions, exceptions, nothing Flink-specific."""

from libcpp.optional cimport optional
from libcpp.string cimport string
from libcpp.string_view cimport string_view
from libcpp.vector cimport vector

import os

from flink_gpu.errors import NvmlError


cdef extern from "nvml_loader.hpp" namespace "flinkgpu" nogil:
    cdef cppclass NvmlStatus:
        int code
        string function
        string message
        bint ok()

    cdef cppclass NvmlLibrary:
        @staticmethod
        const NvmlLibrary* acquire(const string& requested_path, NvmlStatus* status)
        @staticmethod
        string resolve_path(const string& requested_path) except +


cdef extern from "devices.hpp" namespace "flinkgpu" nogil:
    cdef cppclass DeviceInfo:
        unsigned index
        optional[string] uuid
        optional[string] name
        optional[string] pci_bus_id
        optional[unsigned long long] memory_total
        optional[unsigned] minor_number

    cdef cppclass CSkippedDevice "flinkgpu::SkippedDevice":
        unsigned index
        int code
        string reason

    cdef cppclass Enumeration:
        vector[DeviceInfo] devices
        vector[CSkippedDevice] skipped

    NvmlStatus enumerate_devices(const NvmlLibrary& lib, Enumeration* out)
    NvmlStatus query_driver_version(const NvmlLibrary& lib, optional[string]* out)


cdef extern from "script_output.hpp" namespace "flinkgpu" nogil:
    vector[string] split_output_lines_cpp "flinkgpu::split_output_lines"(const string& text) except +
    vector[string] parse_gpu_indices_cpp "flinkgpu::parse_gpu_indices"(const string& line) except +


cdef extern from *:
    ctypedef unsigned int char32_t  # C++'s own type; Cython only needs to know it is an integer


cdef extern from "java_text.hpp" namespace "flinkgpu" nogil:
    bint is_java_whitespace_cpp "flinkgpu::is_java_whitespace"(char32_t c) noexcept
    bint is_java_trimmed_cpp "flinkgpu::is_java_trimmed"(char32_t c) noexcept


cdef extern from "gpu_index.hpp" namespace "flinkgpu" nogil:
    int compare_indices_cpp "flinkgpu::compare_indices"(string_view a, string_view b) noexcept
    void sort_indices_cpp "flinkgpu::sort_indices"(vector[string]* indices) noexcept


cdef extern from "script_args.hpp" namespace "flinkgpu" nogil:
    const char* kEnableCoordinationFlag "flinkgpu::kEnableCoordinationFlag"
    const char* kCoordinationFileFlag "flinkgpu::kCoordinationFileFlag"

    cdef cppclass UnknownToken "flinkgpu::UnknownToken":
        string token
        string suggestion

    cdef cppclass CScriptArgs "flinkgpu::ScriptArgs":
        bint coordination_mode
        string coordination_file
        bint file_value_missing
        vector[UnknownToken] unknown

    CScriptArgs parse_script_args_cpp "flinkgpu::parse_script_args"(const vector[string]& tokens) except +


# --- text helpers ------------------------------------------------------------------------------

cdef inline string _utf8(str text) except *:
    # surrogatepass: a lone surrogate (from a surrogateescape-decoded stream) survives the round trip
    return text.encode("utf-8", "surrogatepass")


cdef inline str _text(const string& value):
    return value.decode("utf-8", "surrogatepass")


cdef inline object _optional_text(const optional[string]& value):
    return value.value().decode("utf-8", "replace") if value.has_value() else None


def split_output_lines(str text not None):
    """Lines of a discovery script's output as java.io.BufferedReader#lines() gives them."""
    cdef vector[string] lines = split_output_lines_cpp(_utf8(text))
    return [_text(line) for line in lines]


def parse_gpu_indices(str line not None):
    """GPU indices in one output line, by Flink's rules (docs/design.md §3.3 step 6), duplicates dropped."""
    cdef vector[string] indices = parse_gpu_indices_cpp(_utf8(line))
    return [_text(index) for index in indices]


# --- Java's string rules (csrc/java_text.*): code points straight from the str, no encoding ------

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


# --- the GPU index order (csrc/gpu_index.*) ------------------------------------------------------

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


# --- the stock discovery script's arguments (csrc/script_args.*) -------------------------------

SCRIPT_FLAGS = (kEnableCoordinationFlag.decode("ascii"), kCoordinationFileFlag.decode("ascii"))


def parse_script_args(tokens):
    """The stock script's reading of the tokens after the amount:
    (coordination mode, coordination file, file value missing, [(unknown token, suggested flag or None)])."""
    cdef vector[string] encoded
    for token in tokens:
        if not isinstance(token, str):
            raise TypeError(f"a discovery script argument must be a str, got {type(token).__name__}: {token!r}")
        encoded.push_back(_utf8(token))
    cdef CScriptArgs parsed = parse_script_args_cpp(encoded)
    return (parsed.coordination_mode, _text(parsed.coordination_file), parsed.file_value_missing,
            [(_text(u.token), _text(u.suggestion) if not u.suggestion.empty() else None) for u in parsed.unknown])


# --- NVML ----------------------------------------------------------------------------------------

cdef object _nvml_error(const NvmlStatus& status, str library_path):
    # The message holds the library path and dlerror() text: bytes, not necessarily UTF-8.
    return NvmlError(status.message.decode("utf-8", "surrogateescape"), status.code, library_path,
                     status.function.decode("utf-8", "surrogateescape"))


cdef class NvmlDevice:
    """One GPU as NVML reports it; an attribute is None where the driver cannot answer."""

    cdef readonly unsigned index
    cdef readonly object uuid
    cdef readonly object name
    cdef readonly object pci_bus_id
    cdef readonly object memory_total
    cdef readonly object minor_number

    def __repr__(self):
        return (f"NvmlDevice(index={self.index}, uuid={self.uuid!r}, name={self.name!r}, "
                f"pci_bus_id={self.pci_bus_id!r}, memory_total={self.memory_total!r}, "
                f"minor_number={self.minor_number!r})")


cdef class SkippedDevice:
    """A GPU that exists but cannot be used (NO_PERMISSION, GPU_IS_LOST, ...)."""

    cdef readonly unsigned index
    cdef readonly int code
    cdef readonly str reason

    def __repr__(self):
        return f"SkippedDevice(index={self.index}, code={self.code}, reason={self.reason!r})"


cdef NvmlDevice _device(const DeviceInfo& info):
    cdef NvmlDevice d = NvmlDevice.__new__(NvmlDevice)
    d.index = info.index
    d.uuid = _optional_text(info.uuid)
    d.name = _optional_text(info.name)
    d.pci_bus_id = _optional_text(info.pci_bus_id)
    d.memory_total = info.memory_total.value() if info.memory_total.has_value() else None
    d.minor_number = info.minor_number.value() if info.minor_number.has_value() else None
    return d


cdef SkippedDevice _skipped(const CSkippedDevice& info):
    cdef SkippedDevice s = SkippedDevice.__new__(SkippedDevice)
    s.index = info.index
    s.code = info.code
    s.reason = info.reason.decode("utf-8", "replace")
    return s



_instances = {}


cdef class Nvml:
    """A loaded, initialised libnvidia-ml; one per library path and process.

    Obtain it with ``Nvml.open(path)``: loading and initialisation happen once per process (and
    once more in a forked child), never per call.
    """

    cdef readonly str library_path
    cdef string _path
    cdef tuple _skipped

    def __init__(self):
        raise TypeError("use Nvml.open(library_path)")

    @staticmethod
    def open(library_path=None):
        """The library at ``library_path`` (None: $FLINK_GPU_NVML_LIBRARY, else libnvidia-ml.so.1)."""
        # A file name: the bytes os.fsencode gives (a non-UTF-8 name round-trips through
        # surrogateescape); a NUL would silently cut the name dlopen sees, naming another file.
        cdef bytes encoded = os.fsencode(library_path) if library_path else b""
        if b"\0" in encoded:
            raise ValueError(f"The NVML library path contains a NUL byte: {library_path!r}")
        cdef string requested = encoded
        cdef string resolved = NvmlLibrary.resolve_path(requested)
        key = os.fsdecode(<bytes>resolved)
        cdef Nvml nvml = _instances.get(key)
        if nvml is None:
            nvml = Nvml.__new__(Nvml)
            nvml.library_path = key
            nvml._path = resolved
            nvml._skipped = ()
            nvml._library()  # load and initialise now, so that a broken library fails here
            _instances[key] = nvml
        return nvml

    cdef const NvmlLibrary* _library(self) except NULL:
        cdef NvmlStatus status
        cdef const NvmlLibrary* lib
        with nogil:
            lib = NvmlLibrary.acquire(self._path, &status)
        if lib == NULL:
            raise _nvml_error(status, self.library_path)
        return lib

    def devices(self):
        """All usable GPUs, in NVML index order; unusable ones are listed by ``skipped()``."""
        cdef const NvmlLibrary* lib = self._library()
        cdef Enumeration found
        cdef NvmlStatus status
        with nogil:
            status = enumerate_devices(lib[0], &found)
        if not status.ok():
            raise _nvml_error(status, self.library_path)
        self._skipped = tuple([_skipped(s) for s in found.skipped])
        return tuple([_device(d) for d in found.devices])

    @property
    def driver_version(self):
        """The driver's version string, or None when the driver cannot say."""
        cdef const NvmlLibrary* lib = self._library()
        cdef optional[string] version
        cdef NvmlStatus status = query_driver_version(lib[0], &version)
        if not status.ok():
            raise _nvml_error(status, self.library_path)
        return _optional_text(version)

    def skipped(self):
        """Devices the last ``devices()`` call had to leave out, with the reason."""
        return self._skipped

    def __repr__(self):
        return f"Nvml(library_path={self.library_path!r})"


include "_coordination.pxi"
