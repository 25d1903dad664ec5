"""Module boundaries of src/flink_gpu: no module uses another module's private (underscore) names,
and only the faces of the native core import ``flink_gpu._native``.

A private name is private to where it is defined: ``_claim`` in ``flink_gpu.coordination`` to that
module; a private module such as ``flink_gpu.cli._output`` (or ``flink_gpu._lazy``) to its package,
whose own modules may use it. ``flink_gpu._native`` is the exception: only FACES import it. And
README.md's architecture table names every module of csrc/ and src/flink_gpu/.
"""

import ast
import re
from pathlib import Path

import pytest

import flink_gpu

PACKAGE_DIR = Path(flink_gpu.__file__).resolve().parent
SRC = PACKAGE_DIR.parent

#: The one door to each native concept: the only modules that may import flink_gpu._native.
FACES = {
    "flink_gpu.nvml",
    "flink_gpu.coordination",
    "flink_gpu.script_protocol",
    "flink_gpu.java_text",
    "flink_gpu.flink_duration",
    "flink_gpu.flink_memory_size",
    "flink_gpu.gpu_index",
    "flink_gpu.bindings_file",
    "flink_gpu.policy",
}
NATIVE = "flink_gpu._native"


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _package_of(dotted: str) -> str:
    """The package that holds ``dotted`` (a module or a package)."""
    return dotted.rpartition(".")[0]


def _inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def _is_package(module: str, modules: "dict[str, bool]") -> bool:
    return modules.get(module, False)


def violations(module: str, source: str, modules: "dict[str, bool]") -> "list[str]":
    """What ``module`` (dotted name; its source ``source``) does against the boundaries.

    ``modules`` maps every module of the package to whether it is a package (an ``__init__``).
    """
    found = []
    here = module if _is_package(module, modules) else _package_of(module)

    def check_module_path(dotted: str, line: int) -> None:
        """``dotted`` is imported (as a module or as the source of names)."""
        parts = dotted.split(".")
        for depth, part in enumerate(parts):
            if _private(part):
                private = ".".join(parts[: depth + 1])
                if private == NATIVE:
                    if module not in FACES:
                        found.append(f"{module}:{line} imports {NATIVE}; use a face ({', '.join(sorted(FACES))})")
                elif not _inside(module, _package_of(private)):
                    found.append(f"{module}:{line} imports {private}, private to {_package_of(private)}")
                return

    def check_name(source_module: str, name: str, line: int) -> None:
        """``name`` is taken from ``source_module`` (``from source_module import name``, ``source_module.name``)."""
        if not _private(name):
            return
        if _is_package(source_module, modules):  # a private submodule or attribute of a package
            check_module_path(f"{source_module}.{name}", line)
        else:
            found.append(f"{module}:{line} uses {name}, private to {source_module}")

    tree = ast.parse(source)
    bound: "dict[str, str]" = {}  # local name -> flink_gpu module it is bound to
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name == "flink_gpu" or alias.name.startswith("flink_gpu."):
                    check_module_path(alias.name, node.lineno)
                    if alias.asname:
                        bound[alias.asname] = alias.name
                    else:
                        bound["flink_gpu"] = "flink_gpu"
        elif isinstance(node, ast.ImportFrom):
            source_module = node.module or ""
            if node.level:
                base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                source_module = ".".join(base + ([node.module] if node.module else []))
            if not (source_module == "flink_gpu" or source_module.startswith("flink_gpu.")):
                continue
            check_module_path(source_module, node.lineno)
            for alias in node.names:
                check_name(source_module, alias.name, node.lineno)
                target = f"{source_module}.{alias.name}"
                if target in modules:
                    bound[alias.asname or alias.name] = target
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, value = [node.attr], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                # flink_gpu.gpu.nvml._x: walk down to the module the private name is taken from
                owner = bound[value.id]
                for part in reversed(chain[1:]):
                    if f"{owner}.{part}" not in modules:
                        break
                    owner = f"{owner}.{part}"
                else:
                    check_name(owner, node.attr, node.lineno)
    return found


def package_modules() -> "dict[str, tuple[Path, bool]]":
    out = {}
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(SRC).with_suffix("")
        parts = list(relative.parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        out[".".join(parts)] = (path, is_package)
    for path in PACKAGE_DIR.rglob("*.pyx"):  # compiled modules count as modules that exist
        out.setdefault(".".join(path.relative_to(SRC).with_suffix("").parts), (path, False))
    return out


def test_no_module_crosses_a_boundary():
    modules = package_modules()
    kinds = {name: is_package for name, (_, is_package) in modules.items()}
    found = []
    for name, (path, _) in modules.items():
        if path.suffix == ".py":
            found += violations(name, path.read_text(encoding="utf-8"), kinds)
    assert found == []


KINDS = {
    "flink_gpu": True,
    "flink_gpu.coordination": False,
    "flink_gpu.gpu": True,
    "flink_gpu.gpu.nvml": False,
    "flink_gpu.cli": True,
    "flink_gpu.cli._output": False,
    "flink_gpu.cli.coordination": False,
    "flink_gpu._native": False,
    "flink_gpu._lazy": False,
    "flink_gpu.nvml": False,
    "flink_gpu.pyflink": False,
    "flink_gpu.framework": False,
}


@pytest.mark.parametrize(
    "module, source",
    [
        ("flink_gpu.gpu.nvml", "from flink_gpu.coordination import _claim"),
        ("flink_gpu.gpu.nvml", "from flink_gpu import coordination\ncoordination._claim(1)"),
        ("flink_gpu.gpu.nvml", "import flink_gpu.coordination\nflink_gpu.coordination._claim(1)"),
        ("flink_gpu.gpu.nvml", "import flink_gpu.coordination as c\nc._claim(1)"),
        ("flink_gpu.pyflink", "def f():\n    from flink_gpu.gpu.nvml import _gpu_info"),
        ("flink_gpu.pyflink", "import flink_gpu._native"),
        ("flink_gpu.pyflink", "from flink_gpu import _native"),
        ("flink_gpu.pyflink", "from flink_gpu._native import Nvml"),
        ("flink_gpu.cli.coordination", "from .. import _native"),
        ("flink_gpu.pyflink", "from flink_gpu.cli._output import table"),  # private to flink_gpu.cli
        ("flink_gpu.pyflink", "from flink_gpu.cli import _output"),
    ],
)
def test_the_check_finds_each_kind_of_crossing(module, source):
    assert len(violations(module, source, KINDS)) == 1


@pytest.mark.parametrize(
    "module, source",
    [
        ("flink_gpu.nvml", "from flink_gpu._native import Nvml"),  # a face
        ("flink_gpu.coordination", "from flink_gpu import _native\n_native.coordination_claim"),
        ("flink_gpu.cli.coordination", "from flink_gpu.cli._output import table"),  # its own package's
        ("flink_gpu.gpu", "from flink_gpu import _lazy"),  # flink_gpu.gpu is inside flink_gpu
        ("flink_gpu.pyflink", "from flink_gpu.coordination import claim\nx = y._private"),  # not a module
        ("flink_gpu.coordination", "def _own(): pass\n_own()"),
    ],
)
def test_the_check_allows_what_is_within_a_boundary(module, source):
    assert violations(module, source, KINDS) == []


# ---- README's architecture table names every module --------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def architecture_table(readme: str) -> str:
    start = readme.index("## Architecture")
    return readme[start : readme.index("\n## ", start + 1)]


def unlisted_modules(table: str, repo: Path) -> "list[str]":
    """The modules of csrc/ and src/flink_gpu/ the table does not name: a C++ module of a concept folder as
    `folder/name.*`, `folder/name.cpp` or `folder/name.hpp`, a loose one as `name.*` (csrc/simulator/ and
    the fuzz and test folders as folders), a Python module
    by its file name, with its subpackage where it has one (`gpu/driver.py`; `doctor/` for cli/doctor/)."""
    names = {word for cell in re.findall(r"`([^`]+)`", table) for word in cell.split()}
    missing = []
    csrc = repo / "csrc"
    for source in sorted(csrc.glob("*.[ch]pp")) + sorted(csrc.glob("*/*.[ch]pp")):
        relative = source.relative_to(csrc)
        if relative.parts[0] in ("simulator", "fuzz", "tests"):
            continue
        stem = str(relative.with_suffix(""))
        if not {f"{stem}.*", str(relative)} & names:
            missing.append(f"csrc/{relative}")
    package = repo / "src" / "flink_gpu"
    for module in sorted(package.rglob("*.py")):
        relative = module.relative_to(package)
        if module.name in ("__init__.py", "__main__.py"):
            continue
        parts = relative.parts
        spelled = "/".join(parts[-2:]) if len(parts) > 1 else module.name
        if spelled not in names:
            missing.append(f"src/flink_gpu/{relative}")
    return missing


def test_the_architecture_table_names_every_module():
    missing = unlisted_modules(architecture_table((REPO / "README.md").read_text()), REPO)
    assert not missing, f"README.md's architecture table does not name {', '.join(missing)}: add a row"


def test_the_architecture_check_finds_a_missing_module(tmp_path):
    (tmp_path / "csrc").mkdir()
    (tmp_path / "csrc" / "listed.cpp").write_text("")
    (tmp_path / "csrc" / "forgotten.hpp").write_text("")
    (tmp_path / "csrc" / "nvml").mkdir()
    (tmp_path / "csrc" / "nvml" / "listed.cpp").write_text("")
    (tmp_path / "csrc" / "nvml" / "unlisted.hpp").write_text("")
    (tmp_path / "src" / "flink_gpu" / "gpu").mkdir(parents=True)
    (tmp_path / "src" / "flink_gpu" / "gpu" / "driver.py").write_text("")
    (tmp_path / "src" / "flink_gpu" / "gpu" / "lost.py").write_text("")
    table = "## Architecture\n| `listed.*` | `nvml/listed.cpp` `gpu/driver.py` |\n## Next\n"
    assert unlisted_modules(architecture_table(table), tmp_path) == [
        "csrc/forgotten.hpp",
        "csrc/nvml/unlisted.hpp",
        "src/flink_gpu/gpu/lost.py",
    ]


# csrc/'s concept folders and which others each may include: the NVML half and the coordination half
# meet only in base/ (status, GPU indices) and in the executable (discovery/).
CSRC_FOLDERS = {
    "base": set(),
    "flink": {"base"},
    "host": {"base"},
    "nvml": {"base", "host", "flink"},
    "coordination": {"base", "flink"},
    "policy": {"base", "flink", "host", "nvml", "coordination"},
    "discovery": {"base", "flink", "host", "nvml", "coordination", "policy"},
}


def crossing_includes(csrc: Path) -> "list[str]":
    """The includes of csrc/'s concept folders that reach a folder they may not use."""
    crossings = []
    for folder, allowed in CSRC_FOLDERS.items():
        for source in sorted((csrc / folder).glob("*.[ch]pp")):
            for included in re.findall(r'^#include "([a-z_]+)/', source.read_text(), re.MULTILINE):
                if included != folder and included not in allowed:
                    crossings.append(f"csrc/{folder}/{source.name} includes {included}/")
    return crossings


def test_the_native_core_keeps_its_cut():
    csrc = REPO / "csrc"
    assert not crossing_includes(csrc)
    loose = sorted(p.name for p in csrc.glob("*.[ch]pp"))
    assert len(loose) <= 2, f"csrc/ has loose sources {loose}: put each in the folder of its concept"
    unknown = {p.name for p in csrc.iterdir() if p.is_dir()} - set(CSRC_FOLDERS) - {"simulator", "fuzz", "tests"}
    assert not unknown, f"csrc/ folders {sorted(unknown)} are not in CSRC_FOLDERS: say what each may include"


def test_the_cut_check_finds_an_include_across_it(tmp_path):
    (tmp_path / "nvml").mkdir()
    (tmp_path / "nvml" / "choice.cpp").write_text('#include "nvml/state.hpp"\n#include "coordination/claims.hpp"\n')
    assert crossing_includes(tmp_path) == ["csrc/nvml/choice.cpp includes coordination/"]
