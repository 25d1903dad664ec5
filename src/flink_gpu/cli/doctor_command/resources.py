"""The resource list and each resource's own keys: what a TaskManager reads before any driver."""

from __future__ import annotations

import difflib

from flink_gpu.cli.doctor_command.findings import Checkup
from flink_gpu.deploy.requests import KUBERNETES_CONFIG_KEY_SUFFIX, YARN_CONFIG_KEY_SUFFIX
from flink_gpu.errors import IllegalConfigurationException
from flink_gpu.flink.configuration import ConfigOption, Configuration
from flink_gpu.flink.framework import (
    AMOUNT_SUFFIX,
    DRIVER_FACTORY_SUFFIX,
    EXTERNAL_RESOURCE_LIST,
    JAVA_GPU_FACTORY,
    PARAM_SUFFIX,
    amount_key,
    driver_factory_key,
    external_resource_names,
)

# the key suffixes of a resource (docs/design.md §2.1), to find resources that are configured but
# not listed
_RESOURCE_SUFFIXES = tuple(
    f".{suffix}"
    for suffix in (AMOUNT_SUFFIX, DRIVER_FACTORY_SUFFIX, KUBERNETES_CONFIG_KEY_SUFFIX, YARN_CONFIG_KEY_SUFFIX)
)


def _gpu_snippet(name: str = "gpu", amount: int = 1) -> str:
    return "\n".join(
        (
            f"{EXTERNAL_RESOURCE_LIST.key}: {name}",
            f"{amount_key(name)}: {amount}",
            f"{driver_factory_key(name)}: {JAVA_GPU_FACTORY}",
        )
    )


def check_resource_list(checkup: Checkup) -> "list[str]":
    """The names external-resources lists, with findings for configured names it does not list."""
    config = checkup.config
    raw_list = config.get_string(EXTERNAL_RESOURCE_LIST.key)
    try:
        names = external_resource_names(config)
    except IllegalConfigurationException as error:
        checkup.add(
            "error",
            "resource-list",
            f"external-resources ({raw_list!r}) cannot be parsed: {error}",
            "Separate names with ';' and close every quote, e.g. `external-resources: gpu`.",
        )
        return []
    configured = _configured_names(config)
    if names:
        checkup.add("ok", "resource-list", f"external-resources lists {', '.join(names)}.")
    for name in sorted(configured - set(names)):
        same = [n for n in names if n.lower() == name.lower()]
        message = (
            f"external-resource.{name}.* keys are set, but {name!r} is not listed in "
            f"external-resources ({_listed(names)}): a TaskManager ignores them."
        )
        if same:
            message += f" Names are case-sensitive: {same[0]!r} is listed."
        listed = ";".join([*names, name])
        checkup.add(
            "error",
            "unlisted-resource",
            message,
            f"List it: `external-resources: {listed}`"
            + (f", or rename the keys to external-resource.{same[0]}.*" if same else "")
            + ".",
            resource=name,
        )
    if not names:
        why = (
            "external-resources is 'none'"
            if raw_list == "none"
            else "external-resources is not set"
            if raw_list is None
            else "external-resources lists no name"
        )
        if not configured:
            checkup.add(
                "error",
                "resource-list",
                f"No external resource is enabled: {why}, so a TaskManager gets no GPU.",
                "Add to the configuration:\n" + _gpu_snippet(),
            )
    return names


def check_amount(checkup: Checkup, name: str) -> "int | None":
    """The amount of ``name`` when it is usable (a positive whole number), else None."""
    key = amount_key(name)
    try:
        amount: int | None = checkup.config.get(ConfigOption(key, int))
    except IllegalConfigurationException as error:
        checkup.add(
            "error",
            "amount",
            f"{error} A TaskManager fails to start.",
            f"Set `{key}` to a whole number of GPUs per TaskManager, e.g. `{key}: 1`.",
            resource=name,
        )
        return None
    if amount is None:
        checkup.add(
            "error",
            "amount",
            f"{key} is not set: a TaskManager ignores resource {name!r}.",
            f"Set it to the number per TaskManager, e.g. `{key}: 1`.",
            resource=name,
        )
        return None
    if amount <= 0:
        checkup.add(
            "error",
            "amount",
            f"{key} is {amount}: it must be positive, so a TaskManager ignores resource {name!r}.",
            f"Set e.g. `{key}: 1`.",
            resource=name,
        )
        return None
    checkup.add("ok", "amount", f"{key} is {amount}.", resource=name)
    return amount


def check_resource_keys(checkup: Checkup, name: str) -> None:
    """Keys of ``name`` no resource option has (``ammount``): Flink ignores a typo silently."""
    config = checkup.config
    prefix = f"external-resource.{name}."
    known = [suffix[1:] for suffix in _RESOURCE_SUFFIXES]
    # keys of a listed resource whose name extends this one ("gpu" and "gpu.a100") are its own
    longer = [
        f"external-resource.{other}."
        for other in external_resource_names(config)
        if other.startswith(prefix[len("external-resource.") :])
    ]
    for key in config.keys():
        rest = key[len(prefix) :]
        if (
            not key.startswith(prefix)
            or rest in known
            or rest.startswith(f"{PARAM_SUFFIX}.")
            or any(key.startswith(other) for other in longer)
        ):
            continue
        match = difflib.get_close_matches(rest, known, n=1, cutoff=0.6)
        checkup.add(
            "warning",
            "resource-keys",
            f"{key} is not an option of external resources; Flink ignores it.",
            f"Did you mean {prefix}{match[0]}?"
            if match
            else f"Remove it; a resource reads {', '.join(prefix + k for k in known)} and {prefix}{PARAM_SUFFIX}.*.",
            resource=name,
        )


def _listed(names: "list[str]") -> str:
    return f"listed: {', '.join(names)}" if names else "it lists nothing"


def _configured_names(config: Configuration) -> "set[str]":
    names = set()
    for key in config.keys():
        if not key.startswith("external-resource."):
            continue
        rest = key[len("external-resource.") :]
        if f".{PARAM_SUFFIX}." in rest:
            names.add(rest.split(f".{PARAM_SUFFIX}.", 1)[0])
            continue
        for suffix in _RESOURCE_SUFFIXES:
            if rest.endswith(suffix) and len(rest) > len(suffix):
                names.add(rest[: -len(suffix)])
                break
    return names
