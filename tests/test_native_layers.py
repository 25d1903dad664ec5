"""The layers of csrc/nvml/: each file includes only headers of its own layer or the ones beneath it, so
that the NVML half reads bottom-up (the health verdict beneath the state read, the read beneath the
deadline, the choice above both). Pure text: reads the #include lines, imports nothing of flink_gpu."""

import re
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent

# csrc/nvml/<layer>.{hpp,cpp}, bottom first.
NVML_LAYERS = [
    "loader",
    "devices",
    "state",
    "health",
    "read",
    "metrics",
    "workers",
    "deadline",
    "topology",
    "choice",
    "sampler",
    "settings",
]


def upward_includes(nvml: Path) -> "list[str]":
    """The includes of csrc/nvml/ that reach a layer above the including file's, or a file of no layer."""
    rank = {layer: i for i, layer in enumerate(NVML_LAYERS)}
    upward = []
    for source in sorted(nvml.glob("*.[ch]pp")):
        own = rank.get(source.stem)
        if own is None:
            upward.append(f"csrc/nvml/{source.name} is in no layer: add it to NVML_LAYERS")
            continue
        for included in re.findall(r'^\s*#\s*include\s+"nvml/([a-z_]+)\.hpp"', source.read_text(), re.MULTILINE):
            if rank.get(included, len(NVML_LAYERS)) > own:
                upward.append(f"csrc/nvml/{source.name} includes nvml/{included}.hpp, a layer above it")
    return upward


def test_the_nvml_layers_include_only_downward():
    assert not upward_includes(REPO / "csrc" / "nvml")


def test_the_layer_check_finds_an_upward_include(tmp_path):
    (tmp_path / "state.cpp").write_text('#include "nvml/state.hpp"\n#include "nvml/choice.hpp"\n')
    (tmp_path / "health.hpp").write_text('#include "nvml/state.hpp"\n#include "base/status.hpp"\n')
    (tmp_path / "stray.hpp").write_text("")
    assert upward_includes(tmp_path) == [
        "csrc/nvml/state.cpp includes nvml/choice.hpp, a layer above it",
        "csrc/nvml/stray.hpp is in no layer: add it to NVML_LAYERS",
    ]
