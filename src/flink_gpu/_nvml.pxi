# An opened NVML library (csrc/nvml/deadline.*: every call within a deadline): Nvml, its enumeration, its
# state reads and its metric readings; included by _native.pyx after the other _nvml*.pxi files.

_instances = {}  # resolved library path -> its Nvml, one per process


cdef class _MetricDevice:
    """The NVML handles one GPU index's readings come from, resolved once per process generation."""
    cdef CMetricDevice c


cdef double _timeout(timeout, str what="NVML timeout") except -1:
    """``timeout`` as seconds: TypeError for anything but a number, the core's rule (ValueError naming ``what``)."""
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise TypeError(f"timeout must be a number of seconds, got {timeout!r}")
    cdef double seconds = timeout
    cdef string name = _utf8(what)
    cdef Status status = check_nvml_timeout(seconds, name.c_str())
    if not status.ok():
        raise _error(status, "")
    return seconds


cdef class NvmlEnumeration(_Record):
    """One enumeration of a library's GPUs: the usable ``devices`` (NvmlDevice, in index order, a GPU in MIG
    mode replaced by its MIG units), the ``skipped`` ones (SkippedDevice, with the reason) and the
    ``notices`` an operator should know (a MIG mode pending a reset)."""

    _FIELDS = ("devices", "skipped", "notices")
    cdef readonly tuple devices
    cdef readonly tuple skipped
    cdef readonly tuple notices

    def __init__(self):
        raise TypeError("NvmlEnumeration objects come from Nvml.devices()")


cdef class Nvml:
    """A loaded, initialised libnvidia-ml; one per library path and process.

    Obtain it with ``Nvml.open(path)``: loading and initialisation happen once per process (and
    once more in a forked child), never per call.
    """

    cdef readonly str library_path
    cdef string _path
    # read_metric: the library and the handles of each GPU index, for the process generation they
    # were obtained in (a forked child initialises NVML again and resolves them again)
    cdef const NvmlLibrary* _metric_library
    cdef unsigned long _metric_generation
    cdef dict _metric_devices
    # the library as initialised in this process generation (a forked child initialises it again,
    # within a deadline): every later call takes it without a worker's hand-off
    cdef const NvmlLibrary* _opened
    cdef unsigned long _opened_generation
    # topology(gpus=None): the whole GPUs of this process generation's first enumeration
    cdef tuple _whole_gpus
    cdef unsigned long _whole_gpus_generation

    def __init__(self):
        raise TypeError("use Nvml.open(library_path)")

    @staticmethod
    def open(library_path=None, timeout=DEFAULT_NVML_TIMEOUT):
        """The library at ``library_path`` (None: $FLINK_GPU_NVML_LIBRARY, else libnvidia-ml.so.1),
        loaded and initialised within ``timeout`` seconds: NvmlError (code NVML_ERROR_TIMEOUT) when
        nvmlInit does not return in time, and at once while it still has not (csrc/nvml/deadline.hpp)."""
        cdef double seconds = _timeout(timeout)
        cdef string resolved = _resolved_library(library_path)
        key = os.fsdecode(<bytes>resolved)
        cdef Nvml nvml = _instances.get(key)
        if nvml is None:
            nvml = Nvml.__new__(Nvml)
            nvml.library_path = key
            nvml._path = resolved
            nvml._library(seconds)  # load and initialise now, so that a broken library fails here
            _instances[key] = nvml
        return nvml

    cdef const NvmlLibrary* _library(self, double seconds=kDefaultNvmlTimeoutSeconds, double* spent=NULL) except NULL:
        """The library, loaded and initialised (again in a forked child) within ``seconds``; ``spent``:
        the seconds that took. NvmlError (code NVML_ERROR_TIMEOUT) when NVML did not answer in time."""
        if spent != NULL:
            spent[0] = 0
        cdef unsigned long generation = NvmlLibrary.process_generation()
        if self._opened != NULL and generation == self._opened_generation:
            return self._opened
        cdef Status status
        cdef Stall stall
        cdef const NvmlLibrary* lib = NULL
        started = time.monotonic()
        with nogil:
            status = open_within(self._path, seconds, &lib, &stall)
        if spent != NULL:
            spent[0] = time.monotonic() - started
        if not status.ok():
            raise _error(status, self.library_path)
        self._opened = lib
        self._opened_generation = NvmlLibrary.process_generation()
        return lib

    def devices(self, timeout=DEFAULT_NVML_TIMEOUT, gpus=None):
        """An NvmlEnumeration: all usable GPUs, in index order, a GPU in MIG mode replaced by its MIG units,
        the unusable ones and the notices. ``gpus``: NVML numbers of the GPUs to enumerate (None: all); no other
        GPU's handle is taken. Enumerated within ``timeout`` seconds: NvmlError (code NVML_ERROR_TIMEOUT)
        when NVML does not answer in time."""
        cdef double seconds = _timeout(timeout)
        cdef optional[vector[unsigned]] only
        cdef vector[unsigned] numbers
        if gpus is not None:
            for gpu in gpus:
                if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu <= 0xFFFFFFFF:
                    raise ValueError(f"A GPU's NVML number is a whole number of at least 0, got {gpu!r}.")
                numbers.push_back(gpu)
            only = numbers
        cdef const NvmlLibrary* lib = self._library(seconds)
        cdef Enumeration found
        cdef Stall stall
        cdef Status status
        with nogil:
            status = enumerate_within(lib[0], seconds, &found, &stall, only)
        if not status.ok():
            raise _error(status, self.library_path)
        cdef NvmlEnumeration out = NvmlEnumeration.__new__(NvmlEnumeration)
        out.devices = tuple([_device(d) for d in found.devices])
        out.skipped = tuple([_skipped(s) for s in found.skipped])
        out.notices = tuple([_text(n) for n in found.notices])
        return out

    @property
    def driver_version(self):
        """The driver's version string, or None when the driver cannot say."""
        cdef const NvmlLibrary* lib = self._library()
        cdef optional[string] version
        cdef Status status = query_driver_version(lib[0], &version)
        if not status.ok():
            raise _error(status, self.library_path)
        return _optional_text(version)

    def topology(self, gpus=None, timeout=DEFAULT_NVML_TIMEOUT):
        """How the GPUs ``gpus`` (NVML numbers; None: every whole GPU this library enumerates, taken once per
        process) are joined: a Topology. Static, so each GPU is read once per process and kept (a GPU found
        lost or needing a reset is read again); what this process lacks is read within ``timeout`` seconds
        for all of it together. Every query is optional: what NVML does not answer, or not in time, is
        unknown, never an error (NvmlError only where the library cannot be initialised, or enumerated
        for ``gpus`` None, in time)."""
        cdef double seconds = _timeout(timeout)
        started = time.monotonic()
        cdef const NvmlLibrary* lib = self._library(seconds)
        cdef unsigned long generation = NvmlLibrary.process_generation()
        if gpus is None:
            if self._whole_gpus is None or self._whole_gpus_generation != generation:
                found = self.devices(seconds)
                self._whole_gpus = tuple(sorted({d.index for d in found.devices}))
                self._whole_gpus_generation = generation
            numbers = self._whole_gpus
        else:
            numbers = tuple(sorted({_gpu_number(gpu) for gpu in gpus}))
        cdef vector[unsigned] wanted
        for gpu in numbers:
            wanted.push_back(gpu)
        cdef double left = max(seconds - (time.monotonic() - started), 0.001)
        cdef CTopology read
        with nogil:
            read_topology(lib[0], wanted, left, &read)
        return _topology(read, numbers, seconds)

    def states(self, owner_pid, taskmanager_pid=None, health_checks=None, timeout=DEFAULT_NVML_TIMEOUT,
               topology=None):
        """The state of every device now, in index order, in one native call: health (judged with
        ``health_checks``, names of HEALTH_CHECKS; None: all), memory, the processes on it judged
        against ``owner_pid`` and ``taskmanager_pid`` (None: none; every process list is read, as a
        diagnosis needs, also on a GPU whose memory shows none in use). A GPU NVML refuses a handle
        for is one unhealthy state. Read within ``timeout`` seconds (csrc/nvml/deadline.hpp): a GPU
        not read in time is unknown; NvmlError (code NVML_ERROR_TIMEOUT) when not even the GPU count
        was read, or NVML was not initialised in time (a forked child's first call). ``topology``: a Topology
        of this library (Nvml.topology()), by which the nvlink check is judged on the GPUs it read; None: that
        check is "not supported" (nothing was read for it)."""
        if topology is not None and not isinstance(topology, Topology):
            raise TypeError(f"topology must be a Topology from Nvml.topology(), got {topology!r}")
        cdef int owner = <int>_pid(owner_pid, "owner_pid")
        cdef int taskmanager = 0 if taskmanager_pid is None else <int>_pid(taskmanager_pid, "taskmanager_pid")
        cdef CheckSet enforced = _check_set(health_checks)
        cdef double seconds = _timeout(timeout)
        cdef double spent = 0
        cdef const NvmlLibrary* lib = self._library(seconds, &spent)
        cdef vector[CDeviceState] found
        cdef vector[Stall] stalls
        cdef ReadPlan plan
        plan.every_process_list = True  # a diagnosis: a list NVML refuses shows on an idle GPU too
        cdef cpp_bool count_known = False
        cdef Status status
        with nogil:
            status = query_states_within(lib[0], owner, taskmanager, enforced, plan, seconds, &found, &stalls,
                                         &count_known, spent)
        if not status.ok():
            raise _error(status, self.library_path)
        cdef Stall stalled
        if not count_known:
            if stalls.size():
                stalled = stalls[0]
            else:
                stalled.function = b"nvmlDeviceGetCount_v2"
            raise _error(stall_failure(stalled, seconds, self._path), self.library_path)
        if topology is not None:
            judge_nvlinks((<Topology>topology)._c, enforced, &found)
        cdef size_t i
        return tuple([_state(found[i]) for i in range(found.size())])

    def read_metric(self, gpu_index, metric):
        """One reading of ``metric`` (one of METRICS) on the GPU ``gpu_index`` (as GPUInfo carries it:
        "<index>" or "<index>:<slot>" for a MIG unit), as an int; -1 where NVML cannot say (the
        driver lacks the query, NOT_SUPPORTED, any NVML error, an index the library does not have).
        Never raises for NVML: cheap enough for a gauge, the device's handles are resolved on its
        first reading in this process, never by enumerating. ValueError for a metric not in METRICS."""
        if not isinstance(gpu_index, str):
            raise TypeError(f"gpu_index must be a GPU index (str), got {gpu_index!r}")
        metric_id = _METRIC_IDS.get(metric) if isinstance(metric, str) else None
        if metric_id is None:
            raise ValueError(f"Unknown GPU metric {metric!r}: use one of {', '.join(METRICS)}.")
        cdef Status status
        cdef Stall stall
        cdef const NvmlLibrary* lib = NULL
        cdef unsigned long generation = NvmlLibrary.process_generation()
        if generation != self._metric_generation:
            with nogil:
                status = open_within(self._path, kDefaultNvmlTimeoutSeconds, &lib, &stall)
            if not status.ok():
                return -1
            self._metric_library = lib
            self._metric_generation = generation
            self._metric_devices = {}
        lib = self._metric_library
        cdef _MetricDevice device = self._metric_devices.get(gpu_index)
        cdef string encoded
        cdef bint found
        if device is None:
            device = _MetricDevice.__new__(_MetricDevice)
            encoded = _utf8(gpu_index)
            with nogil:
                found = find_metric_device(lib[0], string_view(encoded.data(), encoded.size()), &device.c)
            if not found:
                return -1  # not cached: a MIG instance may be created later
            self._metric_devices[gpu_index] = device
        cdef Metric which = <Metric><int>metric_id
        cdef long long value
        with nogil:
            value = read_metric_cpp(lib[0], device.c, which)
        return value

    def __repr__(self):
        return f"Nvml(library_path={self.library_path!r})"
