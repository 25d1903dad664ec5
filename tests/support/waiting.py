"""Waiting on a condition, never on the clock: ``wait_until`` polls until the condition holds and fails naming
what it waited for when ``limit`` passes (an upper bound for a loaded host, never a schedule)."""

import inspect
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(condition: "Callable[[], T]", what: str, limit: float = 60.0, interval: float = 0.01) -> "T":
    """``condition()``'s first true value; fails ("timed out after <limit> s waiting until <what>") if none
    comes within ``limit`` seconds."""
    deadline = time.monotonic() + limit
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {limit:g} s waiting until {what}")
        time.sleep(interval)


#: ``wait_until`` as code for child interpreters that wait: prepend it, then call ``wait_until``
SOURCE = "import time\n\n\n" + inspect.getsource(wait_until)
