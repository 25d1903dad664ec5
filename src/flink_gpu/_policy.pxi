# Binding of csrc/policy/ (docs/design.md §4.2, §9.1, §9.3): the one discovery and the one bind, each one
# native call that returns one typed record. Included by _native.pyx after _nvml.pxi, _coordination.pxi and
# _binding.pxi, whose declarations and conversions it uses. flink_gpu.policy is its public face.

cdef tuple _po_strings(const vector[string]& values):
    return tuple([_text(values[i]) for i in range(values.size())])


cdef tuple _po_left_out(const vector[pair[string, string]]& left_out):
    return tuple([_left_out(left_out[i].first, left_out[i].second) for i in range(left_out.size())])


cdef object _po_shortage(const Status& status, path):
    """The shortage's text for a kNotEnough ``status``, None when ok; any other failure raises."""
    if status.ok():
        return None
    if status.code == StatusCode.kNotEnough:
        return _text(status.message)
    raise _error(status, path)


cdef class DiscoveryOutcome:
    """What one discovery decided (csrc/policy/discover.hpp).

    ``states``: every enumerated GPU's state now (DeviceState), in enumeration order; ``order``: the
    usable ones, best first, with their ``ranks``; ``left_out``: a LeftOut for each one never handed
    out; ``chosen``: the GPUs handed out (uncoordinated: the best ``amount``; coordinated: what the owner
    has for this request, in the stock script's order); ``added`` and ``reclaimed``: what the claim wrote
    for the owner, and the part of it taken from dead owners; ``unparsable``: the
    coordination file's lines kept as they are (UnparsableLine); ``lease_problem``: why the owner's lines have no lease
    another pid namespace can rely on, or None; ``notices``: the claim's to log (Notice); ``shortage``: why too few GPUs were usable or free (then
    nothing is chosen), or None; ``too_few_usable``: the shortage is of usable GPUs (Flink's
    FlinkException), not of free ones (a claim's NotEnoughGpusError); ``devices`` and ``skipped``:
    with ``known_devices``, the enumeration of the candidate (and unhealthy) GPUs with a device not in it, as
    ``Nvml.devices()`` gives it; a skipped device of another GPU than a candidate's is not
    in it.
    """

    cdef readonly tuple states
    cdef readonly tuple order
    cdef readonly tuple ranks
    cdef readonly tuple left_out
    cdef readonly tuple chosen
    cdef readonly tuple added
    cdef readonly tuple reclaimed
    cdef readonly tuple unparsable
    cdef readonly object lease_problem
    cdef readonly tuple notices
    cdef readonly object shortage
    cdef readonly bint too_few_usable
    cdef readonly tuple devices
    cdef readonly tuple skipped

    def __init__(self):
        raise TypeError("DiscoveryOutcome objects come from flink_gpu.policy.discover()")

    def __repr__(self):
        return (f"DiscoveryOutcome(chosen={self.chosen!r}, order={self.order!r}, left_out={self.left_out!r}, "
                f"shortage={self.shortage!r})")


def policy_discover(Nvml nvml not None, indices, skipped, str counted not None, owner, taskmanager,
                    str busy_gpus not None, health_checks, timeout, amount, coordination_file,
                    double lock_timeout, known_devices=None, str topology not None="prefer"):
    """The one discovery (csrc/policy/discover.hpp) of ``amount`` of ``indices`` (nvml.devices()'
    indices, in its order; None: no enumeration, the devices are the GPUs read; ``skipped``: (index,
    reason) of those it skipped), judged for ``owner`` and
    ``taskmanager`` (None: none) with ``health_checks`` (names; None: all), ``busy_gpus`` and ``topology``, read within
    ``timeout`` seconds; claimed in ``coordination_file`` (None: not coordinated) within ``lock_timeout``.
    ``known_devices`` (indices whose static properties the caller has; with ``indices`` None): the GPUs of
    the other candidates are enumerated before any claim."""
    cdef DiscoveryRequest request
    request.owner = <int>_pid(owner, "owner_pid")
    request.taskmanager = 0 if taskmanager is None else <int>_pid(taskmanager, "taskmanager_pid")
    request.checks = _check_set(health_checks)
    request.busy = _busy_policy(busy_gpus)
    request.topology = _topology_policy(topology)
    request.nvml_timeout = _timeout(timeout)
    if indices is None:  # no enumeration: the devices are what the read finds, each GPU's handle taken as read
        request.enumerate_by_reading = True
        if known_devices is not None:
            request.enumerate_candidates = True
            request.known_devices = [_utf8(index) for index in known_devices]
    else:
        request.enumerated = [_utf8(index) for index in indices]
    request.skipped = _co_left_out(skipped)
    request.counted = _utf8(counted)
    if isinstance(amount, bool) or not isinstance(amount, int) or amount < 0:
        raise ValueError(f"The amount of GPUs must be a whole number of at least 0, got {amount!r}.")
    if amount > SIZE_MAX:  # more than any host has: the shortage names it as requested
        request.amount = SIZE_MAX
        request.amount_text = str(amount).encode("ascii")
    else:
        request.amount = amount
    if coordination_file is not None:
        request.coordinated = True
        request.coordination = _co_options(coordination_file, lock_timeout)
    cdef double spent = 0
    cdef const NvmlLibrary* lib = nvml._library(request.nvml_timeout, &spent)
    request.spent = spent
    cdef CDiscoveryOutcome r
    with nogil:
        r = discover_cpp(lib[0], request)
    shortage = _po_shortage(r.status, nvml.library_path if r.status.code == StatusCode.kNvml else coordination_file)
    cdef DiscoveryOutcome out = DiscoveryOutcome.__new__(DiscoveryOutcome)
    cdef size_t i
    out.states = tuple([_state(r.choice.states[i]) for i in range(r.choice.states.size())])
    out.order = _po_strings(r.choice.ranking.indices)
    out.ranks = tuple([r.choice.ranking.ranks[i] for i in range(r.choice.ranking.ranks.size())])
    out.left_out = _po_left_out(r.choice.ranking.left_out)
    out.chosen = _po_strings(r.chosen)
    out.added = _po_strings(r.added)
    out.reclaimed = _po_strings(r.reclaimed)
    out.unparsable = _co_bad_lines(r.unparsable)
    out.lease_problem = None if r.lease_problem.ok() else _co_text(r.lease_problem.message)
    out.notices = _notices(r.notices)
    out.shortage = shortage
    out.too_few_usable = r.too_few_usable
    out.devices = tuple([_device(d) for d in r.enumeration.devices])
    out.skipped = tuple([_skipped(d) for d in r.enumeration.skipped])
    return out


cdef class BindOutcome:
    """What one bind decided (csrc/policy/bind.hpp).

    ``indices``: the holder's GPUs for this request, in index order; ``added``: those bound to it by this
    call; ``usable``: the given GPUs it was bound among; ``left_out``: a LeftOut for each given GPU
    never bound (unhealthy, or not read in time); ``unparsable``: the bindings file's lines kept as they are
    (UnparsableLine); ``lease_problem``: why a process holder bound without a lease another
    pid namespace can rely on, or None; ``notices``: what to log of a bind that succeeded (Notice: the GPUs left
    out, the unparsable lines, a lease problem); ``start_time``: the holder's start time its lines record (0:
    unknown); ``file_identity``: the bindings file's "<major>:<minor>:<inode>"; ``shortage``: why too few
    GPUs were usable or free (then nothing is bound), or None; ``memory``: the request the holder's lines
    record (bytes per GPU; 0: none); ``memory_total``: {index: bytes} of the usable GPUs whose total NVML read;
    ``orphans``: an Orphan for each orphaned worker the shortage names (its TaskManager gone,
    it still runs on a GPU short of memory).
    """

    cdef readonly tuple indices
    cdef readonly tuple added
    cdef readonly tuple usable
    cdef readonly tuple left_out
    cdef readonly tuple unparsable
    cdef readonly object lease_problem
    cdef readonly tuple notices
    cdef readonly unsigned long long start_time
    cdef readonly str file_identity
    cdef readonly object shortage
    cdef readonly unsigned long long memory
    cdef readonly dict memory_total
    cdef readonly tuple orphans

    def __init__(self):
        raise TypeError("BindOutcome objects come from flink_gpu.policy.bind()")

    def __repr__(self):
        return (f"BindOutcome(indices={self.indices!r}, added={self.added!r}, left_out={self.left_out!r}, "
                f"shortage={self.shortage!r})")


def policy_bind(Nvml nvml, path, double timeout, pid, slot, taskmanager, gpus, size_t count,
                uint32_t holders_per_gpu, health_checks, nvml_timeout, uint64_t memory=0,
                str topology not None="prefer", bint pack=False):
    """The one bind (csrc/policy/bind.hpp) of ``count`` of ``gpus`` to the holder (process ``pid``, or
    thread ``pid`` of slot ``slot``) in the bindings file ``path`` within ``timeout``, each GPU judged by
    ``nvml`` (None: NVML could not be opened, every GPU is taken as it is) with ``health_checks`` (names;
    None: all) within ``nvml_timeout`` seconds, with ``memory`` bytes requested on each (0: none); of two or
    more the best joined set unless ``topology`` is "ignore"; ``pack``: the most-bound GPU with room first."""
    cdef BindRequest request
    request.bindings = _co_options(path, timeout)
    request.holder = _bi_holder(pid, slot, taskmanager)
    request.owner = coord_own_pid()
    request.gpus = _co_indices(gpus)
    request.count = count
    request.holders_per_gpu = holders_per_gpu
    request.memory = memory
    request.topology = _topology_policy(topology)
    request.pack = pack
    request.checks = _check_set(health_checks)
    request.nvml_timeout = _timeout(nvml_timeout)
    cdef double spent = 0
    if nvml is not None:
        try:
            request.lib = nvml._library(request.nvml_timeout, &spent)
        except NvmlError:
            request.lib = NULL  # not initialised in time in this process: every GPU as it is
    request.spent = spent
    cdef CBindOutcome r
    with nogil:
        r = bind_cpp(request)
    shortage = _po_shortage(r.status, path)
    cdef BindOutcome out = BindOutcome.__new__(BindOutcome)
    out.indices = _po_strings(r.bound.indices)
    out.added = _po_strings(r.bound.added)
    out.usable = _po_strings(r.usable)
    out.left_out = _po_left_out(r.left_out)
    out.unparsable = _co_bad_lines(r.bound.unparsable)
    out.lease_problem = None if r.bound.lease_problem.ok() else _co_text(r.bound.lease_problem.message)
    out.notices = _notices(r.notices)
    out.start_time = r.bound.start_time
    out.file_identity = _co_text(r.bound.file_identity)
    out.shortage = shortage
    out.memory = r.bound.memory
    out.orphans = tuple([_orphan(o) for o in r.bound.orphans])
    out.memory_total = {}
    cdef size_t m
    for m in range(min(r.usable.size(), r.memory.size())):
        if r.memory[m].total.has_value():
            out.memory_total[_text(r.usable[m])] = r.memory[m].total.value()
    return out
