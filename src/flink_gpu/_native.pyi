"""Type stubs of the Cython binding over the C++ core (csrc/)."""

from os import PathLike
from typing import Dict, Iterable, List, Optional, Tuple, TypeAlias, TypedDict, Union

from typing_extensions import disjoint_base

_Path: TypeAlias = Union[str, PathLike[str]]

def split_output_lines(text: str) -> List[str]: ...
def parse_gpu_indices(line: str) -> List[str]: ...

# --- Java's string rules (csrc/flink/java_text.*) ------------------------------------------------------
def is_java_whitespace(ch: str) -> bool: ...
def java_trim(text: str) -> str: ...
def is_java_blank(text: Optional[str]) -> bool: ...

# --- the GPU index order (csrc/base/gpu_index.*) ------------------------------------------------------
def compare_indices(a: str, b: str) -> int: ...
def sort_indices(indices: Iterable[str]) -> List[str]: ...
def unit_parent(index: str) -> Optional[str]: ...

# --- the stock discovery script's arguments (csrc/flink/script_args.*) -------------------------------
SCRIPT_FLAGS: Tuple[str, str, str, str]

def parse_script_args(
    tokens: Iterable[str],
) -> Tuple[bool, str, bool, List[Tuple[str, Optional[str]]], Optional[str], Optional[str]]:
    """(coordination mode, coordination file, file value missing, [(unknown token, suggested flag)],
    --busy-gpus value or None, --nvml-timeout value or None)."""

# --- Flink's duration grammar (csrc/flink/duration.*) -------------------------------------------
def parse_duration(text: str) -> float:
    """Seconds; ValueError with Flink's reason."""

# --- Flink's memory size grammar (csrc/flink/memory_size.*) ---------------------------------
def parse_memory_size(text: str) -> int:
    """Bytes (0 included); ValueError naming the text, Flink's reason and what is accepted."""

def format_memory_size(bytes: int) -> str:
    """A short form for messages: "10 GiB", "512 MiB", "17 bytes"; else one decimal ("10.5 GiB")."""

def with_coordination_file(tokens: Iterable[str], path: str) -> List[str]:
    """The tokens with their --coordination-file and its value replaced by ``--coordination-file path``."""

@disjoint_base  # a cdef class: its own instance layout
class NvmlDevice:
    @property
    def index(self) -> int: ...
    @property
    def gpu_index(self) -> str: ...
    @property
    def parent_index(self) -> Optional[int]: ...
    @property
    def parent_uuid(self) -> Optional[str]: ...
    @property
    def mig_slot(self) -> Optional[int]: ...
    @property
    def mig_gi(self) -> Optional[int]: ...
    @property
    def mig_ci(self) -> Optional[int]: ...
    @property
    def uuid(self) -> Optional[str]: ...
    @property
    def name(self) -> Optional[str]: ...
    @property
    def pci_bus_id(self) -> Optional[str]: ...
    @property
    def memory_total(self) -> Optional[int]: ...
    @property
    def minor_number(self) -> Optional[int]: ...
    @property
    def cpu_affinity(self) -> Optional[str]: ...
    @property
    def numa_node(self) -> Optional[int]: ...
    @property
    def persistence_mode(self) -> Optional[bool]: ...

@disjoint_base  # a cdef class: its own instance layout
class SkippedDevice:
    @property
    def index(self) -> int: ...
    @property
    def mig_slot(self) -> Optional[int]: ...
    @property
    def gpu_index(self) -> str: ...
    @property
    def code(self) -> int: ...
    @property
    def reason(self) -> str: ...

@disjoint_base  # a cdef class: its own instance layout
class Nvml:
    @staticmethod
    def open(library_path: Optional[_Path] = None, timeout: float = ...) -> Nvml: ...
    @property
    def library_path(self) -> str: ...
    @property
    def driver_version(self) -> Optional[str]: ...
    def devices(self, timeout: float = ..., gpus: Optional[Iterable[int]] = ...) -> Tuple[NvmlDevice, ...]: ...
    def skipped(self) -> Tuple[SkippedDevice, ...]: ...
    def notices(self) -> Tuple[str, ...]: ...
    def states(
        self,
        owner_pid: int,
        taskmanager_pid: Optional[int] = None,
        health_checks: Optional[Iterable[str]] = None,
        timeout: float = ...,
    ) -> Tuple[DeviceState, ...]: ...
    def read_metric(self, gpu_index: str, metric: str) -> int:
        """One reading of ``metric`` (one of METRICS) on ``gpu_index``; -1 where NVML cannot say."""

# --- live readings (csrc/nvml/metrics.*) ------------------------------------------------------
METRICS: Tuple[str, str, str, str]

# --- the process's metrics sampler (csrc/nvml/sampler.*) -------------------------------------
GAUGE_HEALTH: Tuple[str, str, str, str]
MIN_METRICS_INTERVAL: float
DEFAULT_METRICS_INTERVAL: float
SAMPLE_MARGIN: float
HEALTH_READ_INTERVAL: float

def checked_metrics_interval(interval: object) -> float: ...
def watch_metrics(gpu_index: str, library_path: Optional[str] = None, interval: float = ...) -> bool: ...
def sampled_metrics(
    gpu_index: str, library_path: Optional[str] = None, at: Optional[int] = None
) -> Tuple[int, int, int, int, int]: ...
def sample_metrics_now(timeout: float = 10.0) -> bool: ...
def metrics_samples() -> int: ...

# --- GPU state at assignment time (csrc/nvml/state.*, csrc/nvml/choice.*) ---------------------
@disjoint_base  # a cdef class: its own instance layout
class DeviceState:
    @property
    def index(self) -> int: ...
    @property
    def mig_slot(self) -> Optional[int]: ...
    @property
    def gpu_index(self) -> str: ...
    @property
    def health(self) -> str: ...
    @property
    def verdict(self) -> Verdict: ...
    @property
    def findings(self) -> Tuple[str, ...]: ...
    @property
    def warnings(self) -> Tuple[str, ...]: ...
    @property
    def checks(self) -> Tuple[Tuple[str, str, Verdict, Optional[str], bool], ...]:
        """Per check of HEALTH_CHECKS: (name, outcome, the finding's verdict, finding or None, enforced)."""
    @property
    def busy_reason(self) -> str: ...
    @property
    def memory_used(self) -> Optional[int]: ...
    @property
    def memory_free(self) -> Optional[int]: ...
    @property
    def memory_total(self) -> Optional[int]: ...
    @property
    def processes(self) -> Tuple[Tuple[int, Optional[int], str, bool, bool], ...]:
        """(pid, used memory or None, kind "compute" | "graphics" | "mps", own, visible)."""
    @property
    def processes_known(self) -> bool: ...
    @property
    def processes_read(self) -> bool: ...
    @property
    def busy(self) -> bool: ...
    @property
    def compute_mode(self) -> Optional[str]: ...

BUSY_GPUS_VALUES: Tuple[str, str, str]
HEALTH_CHECKS: Tuple[str, ...]

class Verdict:
    name: str
    value: int
    def __init__(self, name: str, value: int) -> None: ...
    OK: Verdict
    DEGRADED: Verdict
    UNHEALTHY: Verdict
    UNKNOWN: Verdict

DEFAULT_NVML_TIMEOUT: float

def health_checks_of(text: str) -> Tuple[str, ...]: ...

@disjoint_base  # a cdef class: its own instance layout
class NvmlSettings:
    @property
    def busy_gpus(self) -> str: ...
    @property
    def nvml_timeout(self) -> float: ...
    @property
    def health_checks(self) -> Tuple[str, ...]: ...
    @property
    def metrics_interval(self) -> float: ...
    @property
    def parameter_errors(self) -> Tuple[str, ...]: ...
    @property
    def flag_error(self) -> Optional[str]: ...
    @property
    def warnings(self) -> Tuple[str, ...]: ...

def read_settings(
    key_prefix: str,
    busy_gpus: Optional[str],
    nvml_timeout: Optional[str],
    health_checks: Optional[str],
    metrics_interval: Optional[str],
    busy_gpus_flag: Optional[str],
    nvml_timeout_flag: Optional[str],
) -> NvmlSettings: ...
def find_taskmanager(pid: int) -> Optional[int]: ...
def process_ancestry(pid: int, limit: int = ...) -> List[Tuple[int, str]]: ...
def nvml_symbols() -> Tuple[Tuple[str, str], ...]:
    """((name, "required" | "fallback" | "optional"), ...)."""

def probe_nvml_library(library_path: _Path) -> Tuple[Tuple[str, ...], Tuple[str, ...], str]:
    """(exported names of nvml_symbols(), resolved ones, process API)."""

# --- coordination file (csrc/coordination/claims.*) ---------------------------------------------------
COORDINATION_DEFAULT_PATH: str

def coordination_claim(
    path: _Path,
    timeout: float,
    owner: int,
    indices: Iterable[Union[str, int]],
    amount: int,
    ranks: Optional[Iterable[int]] = None,
    left_out: Iterable[Tuple[Union[str, int], str]] = (),
) -> Tuple[List[str], List[str], List[str], List[Tuple[int, str]], Optional[str]]:
    """(what the owner now has, newly added, reclaimed from dead owners, unparsable lines, why the calling
    process claimed for itself without a lease or None)."""

def coordination_release(
    path: _Path, timeout: float, owner: int, indices: Optional[Iterable[Union[str, int]]] = None
) -> List[str]: ...

class _EntryRecord(TypedDict):
    """A line and its holder's identity (csrc/coordination/identity.hpp): CoordinationEntry's fields."""

    line_number: int
    index: str
    gpu: str
    pid: int
    start_time: Optional[int]
    alive: bool
    state: str
    liveness: str
    namespace: Optional[int]
    lease: Optional[int]
    lease_file: Optional[str]
    taskmanager: Optional[int]
    holders_per_gpu: Optional[int]
    memory: Optional[int]
    slot: Optional[str]
    ours: bool
    holder_key: str
    taskmanager_key: Optional[str]

def coordination_companion_problems(path: _Path) -> List[str]: ...
def coordination_snapshot(path: _Path, timeout: float) -> Tuple[bool, List[_EntryRecord], List[Tuple[int, str]]]:
    """(exists, entry records, unparsable lines) of a coordination or bindings file."""

def coordination_clean_stale(
    path: _Path, timeout: float, other_namespaces: bool = False
) -> Tuple[List[_EntryRecord], List[Tuple[int, str]]]: ...
def coordination_process_start_time(pid: int) -> Optional[int]: ...
def coordination_own_pid() -> int: ...

# --- bindings file (csrc/coordination/bindings.*) ------------------------------------------------------------
def binding_orphan_text(pid: int, taskmanager: int, gpus: str) -> str: ...
def binding_unbind(
    path: _Path, timeout: float, pid: int, slot: Optional[str], taskmanager: Optional[int], start_time: int = 0
) -> List[str]: ...

# --- the one discovery and the one bind (csrc/policy/*) ---------------------------------------------------
@disjoint_base  # a cdef class: its own instance layout
class DiscoveryOutcome:
    @property
    def states(self) -> Tuple[DeviceState, ...]: ...
    @property
    def order(self) -> Tuple[str, ...]: ...
    @property
    def ranks(self) -> Tuple[int, ...]: ...
    @property
    def left_out(self) -> Tuple[Tuple[str, str], ...]: ...
    @property
    def chosen(self) -> Tuple[str, ...]: ...
    @property
    def added(self) -> Tuple[str, ...]: ...
    @property
    def reclaimed(self) -> Tuple[str, ...]: ...
    @property
    def unparsable(self) -> Tuple[Tuple[int, str], ...]: ...
    @property
    def lease_problem(self) -> Optional[str]: ...
    @property
    def shortage(self) -> Optional[str]: ...
    @property
    def too_few_usable(self) -> bool: ...
    @property
    def devices(self) -> Tuple[NvmlDevice, ...]: ...
    @property
    def skipped(self) -> Tuple[SkippedDevice, ...]: ...

@disjoint_base  # a cdef class: its own instance layout
class BindOutcome:
    @property
    def indices(self) -> Tuple[str, ...]: ...
    @property
    def added(self) -> Tuple[str, ...]: ...
    @property
    def usable(self) -> Tuple[str, ...]: ...
    @property
    def left_out(self) -> Tuple[Tuple[str, str], ...]: ...
    @property
    def unparsable(self) -> Tuple[Tuple[int, str], ...]: ...
    @property
    def lease_problem(self) -> Optional[str]: ...
    @property
    def start_time(self) -> int: ...
    @property
    def file_identity(self) -> str: ...
    @property
    def shortage(self) -> Optional[str]: ...
    @property
    def memory(self) -> int: ...
    @property
    def memory_total(self) -> Dict[str, int]: ...
    @property
    def orphans(self) -> Tuple[Tuple[int, int, str], ...]: ...

def policy_discover(
    nvml: Nvml,
    indices: Optional[Iterable[str]],
    skipped: Iterable[Tuple[str, str]],
    counted: str,
    owner: int,
    taskmanager: Optional[int],
    busy_gpus: str,
    health_checks: Optional[Iterable[str]],
    timeout: float,
    amount: int,
    coordination_file: Optional[str],
    lock_timeout: float,
    known_devices: Optional[Iterable[str]] = ...,
) -> DiscoveryOutcome: ...
def policy_bind(
    nvml: Optional[Nvml],
    path: _Path,
    timeout: float,
    pid: int,
    slot: Optional[str],
    taskmanager: Optional[int],
    gpus: Iterable[Union[str, int]],
    count: int,
    holders_per_gpu: int,
    health_checks: Optional[Iterable[str]],
    nvml_timeout: float,
    memory: int = ...,
) -> BindOutcome: ...
