"""Package attributes imported on first use (PEP 562), so that importing a package stays cheap."""

import sys
from importlib import import_module

TYPE_CHECKING = False  # not typing's: importing typing costs every operator several ms
if TYPE_CHECKING:
    from typing import Callable


def attach(
    package: str, names: "dict[str, str]", public: "list[str]"
) -> "tuple[Callable[[str], object], Callable[[], list[str]]]":
    """``__getattr__`` and ``__dir__`` for ``package``; ``names`` maps a name to its module."""

    def __getattr__(name: str) -> object:
        module = names.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        setattr(sys.modules[package], name, value)  # later lookups skip __getattr__
        return value

    def __dir__() -> "list[str]":
        return sorted(public)

    return __getattr__, __dir__
