"""THE order of GPU indices: numeric indices by value (2 before 10), then the others as text.

One implementation, in the C++ core (csrc/base/gpu_index.*), which the coordination file and
flink-gpu-discovery use too. Its own module, importing nothing else, because
``cuda_visible_devices`` (an operator's hot path) orders by it.
"""

from flink_gpu._native import compare_indices, sort_indices, unit_parent

TYPE_CHECKING = False  # not typing's: cuda_visible_devices, an operator's hot path, imports this module
if TYPE_CHECKING:
    from typing import Callable, Iterable, TypeVar

    Item = TypeVar("Item")

__all__ = ["compare_indices", "index_sort_order", "sort_indices", "unit_parent"]


def index_sort_order(items: "Iterable[Item]", index_of: "Callable[[Item], str]") -> "list[Item]":
    """``items`` sorted by GPU index (``index_of(item)``), equal indices in their given order."""
    by_index: "dict[str, list[Item]]" = {}
    for item in items:
        by_index.setdefault(index_of(item), []).append(item)
    return [item for index in sort_indices(by_index) for item in by_index[index]]
