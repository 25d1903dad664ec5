"""A resource's driver factory: loaded as a worker loads it; drivers other than the GPU plugin's."""

from __future__ import annotations

import difflib

from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.errors import FactoryLoadError, FactoryNotFoundError
from flink_gpu.flink.configuration import Configuration
from flink_gpu.flink.framework import (
    ENTRY_POINT_GROUP,
    JAVA_GPU_FACTORY,
    ExternalResourceDriverFactory,
    configured_factory_name,
    driver_factory_key,
    load_factory,
    param_prefix,
)


def check_factory(checkup: Checkup, name: str) -> "tuple[ExternalResourceDriverFactory, str] | None":
    """(the factory, its configured name), or None when none can be loaded."""
    key = driver_factory_key(name)
    value = configured_factory_name(checkup.config, name)
    if value is None:
        checkup.add(
            "error",
            "factory",
            f"{key} is not set: a TaskManager loads no driver for {name!r}.",
            f"For GPUs set `{key}: {JAVA_GPU_FACTORY}`.",
            resource=name,
        )
        return None
    # The framework's own loader, so that doctor resolves names exactly as a worker does.
    try:
        factory = load_factory(value)  # not stripped: a worker (and Flink) does not strip it
    except FactoryNotFoundError as error:
        checkup.add(
            "error",
            "factory",
            f"Factory class {value} of {name!r} was not found ({error.detail}).",
            _factory_fix(key, value),
            resource=name,
        )
        return None
    except FactoryLoadError as error:
        checkup.add(
            "error",
            "factory",
            f"Factory class {value} of {name!r} cannot be loaded: {error}",
            "Fix or reinstall the package that provides it.",
            resource=name,
        )
        return None
    except Exception as error:
        checkup.add(
            "error",
            "factory",
            f"Factory {value} of {name!r} raised {type(error).__name__}: {error}",
            "Fix the factory's constructor.",
            resource=name,
        )
        return None
    checkup.add("ok", "factory", f"{key} is {value}.", resource=name)
    return factory, value


def _factory_fix(key: str, value: str) -> str:
    known = [JAVA_GPU_FACTORY, "flink_gpu.GPUDriverFactory", "flink_gpu.gpu.GPUDriverFactory"]
    match = difflib.get_close_matches(value.strip(), known, n=1, cutoff=0.8)
    if match:
        return f"Did you mean `{key}: {match[0]}`?"
    return (
        f"For GPUs use `{key}: {JAVA_GPU_FACTORY}`; for another driver install the package "
        f"that provides it (an import path, or an entry point in group {ENTRY_POINT_GROUP})."
    )


def check_other_driver(
    checkup: Checkup, name: str, factory: ExternalResourceDriverFactory, factory_name: str, params: Configuration
) -> None:
    """Builds (and closes) a driver that is not the GPU plugin's; doctor does not run it."""
    try:
        driver = factory.create_external_resource_driver(params)
    except Exception as error:
        checkup.add(
            "error",
            "driver",
            f"Factory {factory_name} cannot create the driver of {name!r}: {type(error).__name__}: {error}",
            f"Fix the {param_prefix(name)}* keys the factory reads.",
            resource=name,
        )
        return
    close = getattr(driver, "close", None)
    if callable(close):
        close()
    checkup.add(
        "ok",
        "driver",
        f"The driver of {name!r} was created (doctor does not run drivers other than the GPU plugin).",
        resource=name,
    )
