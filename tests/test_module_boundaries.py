"""Module boundaries of src/flink_gpu: no module uses another module's private (underscore) names,
and only the faces of the native core import ``flink_gpu._native``.

A private name is private to where it is defined: ``_claim`` in ``flink_gpu.coordination`` to that
module; a private module such as ``flink_gpu.cli._output`` (or ``flink_gpu.base.lazy``) to its package,
whose own modules may use it. ``flink_gpu._native`` is the exception: only FACES import it. And
README.md's architecture table names every module of csrc/ and src/flink_gpu/.
"""

import ast
import importlib
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
    "flink_gpu.flink.script_protocol",
    "flink_gpu.flink.grammars",
    "flink_gpu.base.gpu_index",
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
                # flink_gpu.gpu.nvml_discovery._x: walk down to the module the private name is taken from
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
    "flink_gpu.gpu.nvml_discovery": False,
    "flink_gpu.cli": True,
    "flink_gpu.cli._output": False,
    "flink_gpu.cli.coordination_command": False,
    "flink_gpu._native": False,
    "flink_gpu.base.lazy": False,
    "flink_gpu.nvml": False,
    "flink_gpu.pyflink": False,
    "flink_gpu.flink.framework": False,
}


@pytest.mark.parametrize(
    "module, source",
    [
        ("flink_gpu.gpu.nvml_discovery", "from flink_gpu.coordination import _claim"),
        ("flink_gpu.gpu.nvml_discovery", "from flink_gpu import coordination\ncoordination._claim(1)"),
        ("flink_gpu.gpu.nvml_discovery", "import flink_gpu.coordination\nflink_gpu.coordination._claim(1)"),
        ("flink_gpu.gpu.nvml_discovery", "import flink_gpu.coordination as c\nc._claim(1)"),
        ("flink_gpu.pyflink", "def f():\n    from flink_gpu.gpu.nvml_discovery import _gpu_info"),
        ("flink_gpu.pyflink", "import flink_gpu._native"),
        ("flink_gpu.pyflink", "from flink_gpu import _native"),
        ("flink_gpu.pyflink", "from flink_gpu._native import Nvml"),
        ("flink_gpu.cli.coordination_command", "from .. import _native"),
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
        ("flink_gpu.cli.coordination_command", "from flink_gpu.cli._output import table"),  # its own package's
        ("flink_gpu.gpu", "from flink_gpu import _lazy"),  # flink_gpu.gpu is inside flink_gpu
        ("flink_gpu.pyflink", "from flink_gpu.coordination import claim\nx = y._private"),  # not a module
        ("flink_gpu.coordination", "def _own(): pass\n_own()"),
    ],
)
def test_the_check_allows_what_is_within_a_boundary(module, source):
    assert violations(module, source, KINDS) == []


# ---- the concepts of src/flink_gpu/ import one way ---------------------------------------------------

#: Each concept of the package and its rank: a module may import its own concept and those of a lower rank,
#: never a higher one nor another concept of its own rank (binding and deploy know nothing of each other).
#: The native faces sit between Flink's contract and the GPU plugin: the bindings file speaks Flink's memory
#: sizes, the driver and bind call into the faces. Function-local imports count.
CONCEPTS = {
    "base": 0,  # flink_gpu.base.*, flink_gpu.errors
    "flink": 1,
    "faces": 2,  # nvml, coordination, bindings_file, policy, simulator
    "gpu": 3,
    "binding": 4,
    "deploy": 4,
    "cli": 5,
    "pyflink": 5,
    "facade": 6,  # flink_gpu itself (its __init__)
}
_ROOT_CONCEPTS = {
    "flink_gpu": "facade",
    "flink_gpu.errors": "base",
    "flink_gpu.nvml": "faces",
    "flink_gpu.coordination": "faces",
    "flink_gpu.bindings_file": "faces",
    "flink_gpu.policy": "faces",
    "flink_gpu.simulator": "faces",
    "flink_gpu.pyflink": "pyflink",
}


def concept_of(module: str) -> "str | None":
    """The concept ``module`` belongs to; None for the extension module, which every face may use."""
    if module in _ROOT_CONCEPTS:
        return _ROOT_CONCEPTS[module]
    parts = module.split(".")
    if parts[1] == "_native":
        return None
    if parts[1] not in CONCEPTS:
        raise AssertionError(f"{module} belongs to no concept: put it in a folder or name it in _ROOT_CONCEPTS")
    return parts[1]


def upward_imports(module: str, source: str) -> "list[str]":
    """Each import of ``module``'s source that goes against the concept order."""
    concept = concept_of(module)
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from flink_gpu import coordination` imports a module of the package, or a name of its facade
            targets = [node.module]
            if node.module == "flink_gpu":
                targets = [f"flink_gpu.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            # the package itself for its metadata (`import flink_gpu` for its __file__, __version__) is no concept
            if not target.startswith("flink_gpu") or target == "flink_gpu" or target.startswith("flink_gpu.__"):
                continue
            top = target.split(".")[1] if "." in target else ""
            if top and top not in CONCEPTS and top != "_native" and target not in _ROOT_CONCEPTS:
                target = "flink_gpu"  # a name of the facade (`from flink_gpu import GPUInfo`)
            imported = concept_of(target)
            if imported is None or imported == concept:
                continue
            if CONCEPTS[imported] >= CONCEPTS[concept]:
                found.append(f"{module}:{node.lineno} ({concept}) imports {target} ({imported})")
    return found


def test_the_concepts_import_one_way():
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*.py")):
        relative = path.relative_to(SRC).with_suffix("")
        parts = relative.parts[:-1] if relative.name == "__init__" else relative.parts
        found += upward_imports(".".join(parts), path.read_text(encoding="utf-8"))
    assert found == []


@pytest.mark.parametrize(
    "module, source",
    [
        ("flink_gpu.gpu.driver", "from flink_gpu.binding import bind"),
        ("flink_gpu.flink.framework", "def f():\n    from flink_gpu.gpu.info import GPUInfo"),  # function-local
        ("flink_gpu.binding.gpu_binding", "import flink_gpu.deploy.requests"),  # a concept of its own rank
        ("flink_gpu.base.gpu_index", "from flink_gpu import coordination"),
        ("flink_gpu.nvml", "from flink_gpu import GPUInfo"),  # the facade is above everything
        ("flink_gpu.gpu.info", "from flink_gpu import pyflink"),
    ],
)
def test_the_order_check_finds_an_upward_import(module, source):
    assert len(upward_imports(module, source)) == 1


@pytest.mark.parametrize(
    "module, source",
    [
        ("flink_gpu.binding.gpu_binding", "from flink_gpu.gpu.info import cuda_visible_devices"),
        ("flink_gpu.gpu.driver", "from flink_gpu import coordination, policy"),
        ("flink_gpu.pyflink", "from flink_gpu.binding import bind"),
        ("flink_gpu.bindings_file", "from flink_gpu.flink.grammars import format_memory_size"),
        ("flink_gpu.nvml", "from flink_gpu._native import Nvml"),
        ("flink_gpu.cli", "import flink_gpu\nfrom flink_gpu import __version__"),  # the package's metadata
    ],
)
def test_the_order_check_allows_a_downward_import(module, source):
    assert upward_imports(module, source) == []


# ---- every import path the documents show keeps working -------------------------------------------------

#: ``module`` or ``module:name`` as README.md, docs/ and the examples show them.
DOCUMENTED = [
    "flink_gpu:GPUDriverFactory",
    "flink_gpu:GPUInfo",
    "flink_gpu:pin_to_gpus",
    "flink_gpu:Configuration",
    "flink_gpu:ExternalResourceDriver",
    "flink_gpu:ExternalResourceDriverFactory",
    "flink_gpu:ExternalResourceInfo",
    "flink_gpu:load_external_resources",
    "flink_gpu:kubernetes_resource_requirements",
    "flink_gpu:merge_into_pod_template",
    "flink_gpu:yarn_resources",
    "flink_gpu:__version__",
    "flink_gpu.gpu:GPUDriverFactory",
    "flink_gpu.gpu:GPUInfo",
    "flink_gpu.binding:bind",
    "flink_gpu.binding:GPUBinding",
    "flink_gpu.binding:BindingError",
    "flink_gpu.binding:GAUGES",
    "flink_gpu.binding:checked_counts",
    "flink_gpu.binding:checked_memory",
    "flink_gpu.pyflink:bind_gpus",
    "flink_gpu.pyflink:get_external_resource_infos",
    "flink_gpu.coordination:claim",
    "flink_gpu.coordination:release",
    "flink_gpu.coordination:snapshot",
    "flink_gpu.coordination:companion_paths",
    "flink_gpu.nvml:open_library",
    "flink_gpu.nvml:sampled_metrics",
    "flink_gpu.nvml:topology",
    "flink_gpu.policy:discover",
    "flink_gpu.policy:bind",
    "flink_gpu.bindings_file:snapshot",
    "flink_gpu.simulator:environment",
    "flink_gpu.simulator:counters",
    "flink_gpu.errors:NotEnoughGpusError",
    "flink_gpu.cli:main",
    "flink_gpu.deploy.taskmanager_env:taskmanager_environment",
    "flink_gpu.deploy.taskmanager_env:SIMULATOR_KEYS",
    "flink_gpu.deploy.local_cluster:LocalCluster",
    "flink_gpu.deploy.local_cluster:flink_home",
    "flink_gpu.deploy.local_cluster:gpu_resource",
    "flink_gpu.flink.framework:load_factory",
    "flink_gpu.flink.script_protocol:parse_script_args",
    "flink_gpu.base.regular_files:read_regular_file",
    "flink_gpu.binding.cuda_ordinals:cuda_ordinals",
    "flink_gpu.base",
    "flink_gpu.base.lazy:attach",
    "flink_gpu.base.gpu_index:sort_indices",
    "flink_gpu.gpu.holders:lock",
    "flink_gpu.flink.grammars:parse_memory_size",
    "flink_gpu.flink.grammars:format_memory_size",
]


@pytest.mark.parametrize("path", DOCUMENTED)
def test_a_documented_import_path_works(path):
    module, _, name = path.partition(":")
    imported = importlib.import_module(module)
    if name:
        assert getattr(imported, name) is not None


def test_every_import_path_the_documents_show_is_tested():
    """A dotted path the documents show (``flink_gpu.x.y``) is a module or a name of one that DOCUMENTED holds."""
    shown = set()
    for document in [
        REPO / "README.md",
        *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "examples").glob("*.py")),
    ]:
        shown |= set(re.findall(r"\bflink_gpu(?:\.[A-Za-z_][A-Za-z0-9_]*)+", document.read_text(encoding="utf-8")))
    covered = {path.replace(":", ".") for path in DOCUMENTED} | {path.partition(":")[0] for path in DOCUMENTED}
    untested = sorted(
        path
        for path in shown
        if path not in covered
        and not path.startswith(("flink_gpu._", "flink_gpu.external_resource_drivers"))
        and not path.endswith("__file__")
    )
    assert untested == [], f"the documents show {untested}: add them to DOCUMENTED"


# ---- README's architecture table names every module --------------------------------------------------

REPO = Path(__file__).resolve().parent.parent


def architecture_table(readme: str) -> str:
    start = readme.index("## Architecture")
    end = readme.find("\n## ", start + 1)  # the last section, or one before another
    return readme[start : end if end != -1 else len(readme)]


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
# meet only in base/ (status, GPU indices), topology/ (how GPUs are joined and the set choice, pure) and in
# the executable (discovery/).
CSRC_FOLDERS = {
    "base": set(),
    "flink": {"base"},
    "host": {"base"},
    "topology": {"base"},
    "nvml": {"base", "host", "flink", "topology"},
    "coordination": {"base", "flink", "topology"},
    "policy": {"base", "flink", "host", "nvml", "coordination", "topology"},
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


# ---- no name of removed code is left ----------------------------------------------------------------

#: Modules, files and functions that were moved or deleted, with what replaced them: a comment, document or
#: test that still names one points a reader at nothing.
REMOVED = {
    r"flink_gpu\.(config|config_options|config_files|options_splitter|framework|resource_info|script_protocol)\b": (
        "flink_gpu.flink.*"
    ),
    r"flink_gpu\.(java_text|flink_duration|flink_memory_size)\b": "flink_gpu.flink.grammars",
    r"flink_gpu\.(gpu_index|regular_files|_lazy)\b": "flink_gpu.base.*",
    r"flink_gpu\.(deployment|taskmanager_env|cuda_devices)\b": "flink_gpu.deploy.* or flink_gpu.binding.cuda_ordinals",
    r"flink_gpu\.gpu\.(nvml|script)\b": "flink_gpu.gpu.nvml_discovery / script_discovery",
    r"flink_gpu\.cli\.(coordination|demo|resources|taskmanager_env|doctor)\b": "flink_gpu.cli.*_command",
    r"flink_gpu/(binding|config|framework|deployment|cuda_devices|gpu_index|regular_files)\.py": "the concept folders",
    r"\bgpu/(nvml|script)\.py": "gpu/nvml_discovery.py / gpu/script_discovery.py",
    r"\bcli/doctor/": "cli/doctor_command/",
    r"\btest_faults\.py": "the test files of each unit",
    r"flink_gpu\.nvml\.(rank_gpus|states)\b": "the core's one discovery (flink_gpu.policy) / Library.states",
    r"\b(nvml_deadline|nvml_loader|process_liveness)\b": "csrc/nvml/deadline.*, loader.*, coordination/liveness.*",
    r"\bpin_to_caller\b": "nothing: the deadline workers are no longer pinned",
    r"\b(Library|Nvml|nvml)\.(skipped|notices)\(\)": "Library.devices(), one enumeration record",
}
_SEARCHED = ("src", "csrc", "tests", "docs", "tools", "benchmarks", "examples", "README.md", ".ci")


def stale_names(repo: Path) -> "list[str]":
    """Each ``file:line`` of the repository's text that names removed code."""
    patterns = [(re.compile(pattern), instead) for pattern, instead in REMOVED.items()]
    found = []
    for top in _SEARCHED:
        root = repo / top
        paths = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for path in paths:
            if path == Path(__file__).resolve() or path.suffix not in (
                ".py",
                ".pyx",
                ".pxi",
                ".pxd",
                ".pyi",
                ".md",
                ".cpp",
                ".hpp",
                ".sh",
                ".txt",
                ".toml",
                "",
            ):
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except (UnicodeDecodeError, OSError):
                continue
            for number, line in enumerate(text.splitlines(), 1):
                for pattern, instead in patterns:
                    if pattern.search(line):
                        found.append(f"{path.relative_to(repo)}:{number}: {line.strip()[:100]} (now: {instead})")
    return found


def test_no_comment_document_or_test_names_removed_code():
    assert stale_names(REPO) == []


def test_the_stale_name_check_finds_one(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text(
        "see `flink_gpu.config` and\nsrc/flink_gpu/binding.py\nfine: flink_gpu.flink.configuration\n"
    )
    assert [hit.split(":")[1] for hit in stale_names(tmp_path)] == ["1", "2"]
