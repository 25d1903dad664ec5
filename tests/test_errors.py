"""The exceptions a caller can act on, in one place (flink_gpu.errors, exported from flink_gpu; docs/design.md
§10.1): no module defines one of its own, each says when it is raised, and the old import paths still name
the same classes."""

import ast
import inspect
from pathlib import Path

import flink_gpu
from flink_gpu import errors

PACKAGE = Path(flink_gpu.__file__).resolve().parent
# The command line's usage errors end the command with exit status 2 and never reach a library caller.
COMMAND_LINE_ONLY = {("cli/__init__.py", "UsageError"), ("cli/__init__.py", "_UsageExit")}


def exception_classes_outside_errors():
    found = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        if where == "errors.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), where)):
            if isinstance(node, ast.ClassDef) and any(
                ast.unparse(base).split(".")[-1].endswith(("Error", "Exception")) for base in node.bases
            ):
                found.append((where, node.name))
    return found


def test_no_module_but_errors_defines_an_exception():
    assert set(exception_classes_outside_errors()) == COMMAND_LINE_ONLY


def test_every_exception_is_exported_from_the_package_and_says_when_it_is_raised():
    assert set(errors.__all__) <= set(flink_gpu.__all__)
    for name in errors.__all__:
        cls = getattr(flink_gpu, name)
        assert cls is getattr(errors, name) and issubclass(cls, Exception), name
        assert len(inspect.getdoc(cls) or "") > 40, f"{name} has no docstring saying when it is raised"


def test_the_failures_of_a_claim_or_a_bind_are_flink_exceptions_and_keep_their_old_names():
    from flink_gpu.base.regular_files import FileTooLargeError, NotARegularFileError
    from flink_gpu.binding import BindingError
    from flink_gpu.binding.cuda_ordinals import CudaDeviceError
    from flink_gpu.flink.framework import FactoryLoadError, FactoryNotFoundError
    from flink_gpu.gpu.script_discovery import DiscoveryScriptNotExecutable, DiscoveryScriptNotFound

    # Flink-style `except FlinkException` catches each; `except BindingError` what bind raised before
    for cls in (
        flink_gpu.NotEnoughGpusError,
        flink_gpu.SlotUnknownError,
        flink_gpu.NvmlError,
        CudaDeviceError,
        FactoryLoadError,
        FactoryNotFoundError,
        DiscoveryScriptNotExecutable,
    ):
        assert issubclass(cls, flink_gpu.FlinkException), cls
    assert BindingError is flink_gpu.BindingError
    assert issubclass(flink_gpu.NotEnoughGpusError, BindingError) and issubclass(
        flink_gpu.SlotUnknownError, BindingError
    )
    # Python's own types where Python has one
    assert issubclass(DiscoveryScriptNotFound, FileNotFoundError)
    assert issubclass(NotARegularFileError, OSError) and issubclass(FileTooLargeError, OSError)
    assert issubclass(flink_gpu.IllegalConfigurationException, ValueError)
    assert issubclass(flink_gpu.ValueTooLongError, ValueError)
