"""What a deployment must request for the external resources (docs/design.md §2.6): the Kubernetes
extended resources of the TaskManager's main container and the YARN container resources.

Same rules as Flink's ``ExternalResourceUtils.getExternalResourceConfigurationKeys`` and the
Kubernetes/YARN resource managers: a resource counts when it has a positive amount and a
non-blank ``<system>.config-key``; a blank key is a WARN and the resource is ignored; when two
resources name the same key, the later one in ``external-resources`` wins, with a WARN.
"""

from __future__ import annotations

import copy
import logging
import os
from collections.abc import Mapping
from typing import Any

from flink_gpu.errors import IllegalConfigurationException
from flink_gpu.flink.config_files import read_yaml_mapping
from flink_gpu.flink.configuration import Configuration
from flink_gpu.flink.framework import external_resource_amounts, external_resource_names, system_config_key

__all__ = [
    "KUBERNETES_CONFIG_KEY_SUFFIX",
    "TASK_MANAGER_MAIN_CONTAINER_NAME",
    "YARN_CONFIG_KEY_SUFFIX",
    "kubernetes_resource_requirements",
    "merge_into_pod_template",
    "yarn_resources",
]

LOG = logging.getLogger("flink_gpu.deploy.requests")

KUBERNETES_CONFIG_KEY_SUFFIX = "kubernetes.config-key"
YARN_CONFIG_KEY_SUFFIX = "yarn.config-key"
TASK_MANAGER_MAIN_CONTAINER_NAME = "flink-main-container"
"""The container of a pod template that Flink treats as the TaskManager (Flink's fixed name)."""


def _config_keys(config: Configuration, names: list[str], suffix: str) -> dict[str, str]:
    """Resource name → system key (Flink's ``getExternalResourceConfigurationKeys``)."""
    by_key: dict[str, str] = {}
    result: dict[str, str] = {}
    for name in names:
        option_key = system_config_key(name, suffix)
        key = config.get_string(option_key)
        if key is None or not key.strip():
            LOG.warning("Could not find valid %s for %s. Will ignore that resource.", option_key, name)
            continue
        previous = by_key.get(key)
        if previous is not None:
            LOG.warning(
                "Duplicate config key %s occurred for external resources, the one named %s will overwrite the value.",
                key,
                name,
            )
            del result[previous]
        by_key[key] = name
        result[name] = key
    return result


def _requested(config: Configuration | Mapping[str, object] | None, suffix: str) -> dict[str, int]:
    """System key → amount for every resource with a positive amount and a key."""
    config = Configuration.coerce(config)
    names = external_resource_names(config)
    amounts = external_resource_amounts(config)
    keys = _config_keys(config, names, suffix)
    requested: dict[str, int] = {}
    for name, key in keys.items():
        if name in amounts:
            requested[key] = amounts[name]
            LOG.info("Add external resource config for %s with key %s value %d.", name, key, amounts[name])
    return requested


def kubernetes_resource_requirements(config: Configuration | Mapping[str, object] | None) -> dict[str, dict[str, str]]:
    """The TaskManager container's extended resources: ``{"requests": {"nvidia.com/gpu": "2"},
    "limits": {"nvidia.com/gpu": "2"}}`` (quantities are decimal strings, as Flink writes them)."""
    requested = _requested(config, KUBERNETES_CONFIG_KEY_SUFFIX)
    quantities = {key: str(amount) for key, amount in requested.items()}
    return {"requests": dict(quantities), "limits": dict(quantities)}


def _load_pod_template(path: str) -> dict[str, Any]:
    return read_yaml_mapping(path, "pod template file", "a Pod (a mapping)")


def _mapping_at(parent: dict[str, Any], key: str, where: str) -> dict[str, Any]:
    """``parent[key]`` as a dict, created when absent or null."""
    value = parent.get(key)
    if value is None:
        value = parent[key] = {}
    if not isinstance(value, dict):
        raise IllegalConfigurationException(
            f"The pod template's {where} must be a mapping, not a {type(value).__name__}."
        )
    return value


def merge_into_pod_template(
    template: Mapping[str, Any] | str | os.PathLike[str] | None, config: Configuration | Mapping[str, object] | None
) -> dict[str, Any]:
    """The pod template with the external resources set on the TaskManager main container.

    ``template`` is a Pod as a mapping or the path of a pod template YAML file (``None``: an empty
    Pod). The container named ``flink-main-container`` gets ``resources.requests[key]`` and
    ``resources.limits[key]`` for every resource (overriding a value already there for that
    key); it is added when the template has none, as Flink does. Everything else is kept. The
    input is not modified.
    """
    if template is None:
        pod: dict[str, Any] = {}
    elif isinstance(template, (str, os.PathLike)):
        pod = _load_pod_template(os.fspath(template))
    elif isinstance(template, Mapping):
        pod = copy.deepcopy(dict(template))
    else:
        raise TypeError(f"A pod template must be a mapping or a path, got {type(template).__name__}")

    requirements = kubernetes_resource_requirements(config)
    if not requirements["requests"]:
        return pod

    spec = _mapping_at(pod, "spec", "spec")
    containers = spec.get("containers")
    if containers is None:
        containers = spec["containers"] = []
    if not isinstance(containers, list):
        raise IllegalConfigurationException(
            f"The pod template's spec.containers must be a list, not a {type(containers).__name__}."
        )
    main = next(
        (c for c in containers if isinstance(c, dict) and c.get("name") == TASK_MANAGER_MAIN_CONTAINER_NAME), None
    )
    if main is None:
        main = {"name": TASK_MANAGER_MAIN_CONTAINER_NAME}
        containers.append(main)
    resources = _mapping_at(main, "resources", f"container {TASK_MANAGER_MAIN_CONTAINER_NAME!r} resources")
    for field in ("requests", "limits"):
        values = _mapping_at(resources, field, f"container {TASK_MANAGER_MAIN_CONTAINER_NAME!r} resources.{field}")
        values.update(requirements[field])
    return pod


def yarn_resources(
    config: Configuration | Mapping[str, object] | None, cluster_max: Mapping[str, int] | None = None
) -> dict[str, int]:
    """The YARN container resources: resource type → amount (e.g. ``{"yarn.io/gpu": 2}``).

    With ``cluster_max`` (the cluster's maximum allocation per resource type), a type the cluster
    does not know or an amount above its maximum raises ``IllegalConfigurationException`` with
    Flink's messages (Flink's YARN resource manager raises ``IllegalStateException``).
    """
    requested = _requested(config, YARN_CONFIG_KEY_SUFFIX)
    if cluster_max is not None:
        for key, amount in requested.items():
            if key not in cluster_max:
                raise IllegalConfigurationException(f"External resource {key} is not supported by the Yarn cluster.")
            maximum: Any = cluster_max[key]
            if amount > maximum:
                raise IllegalConfigurationException(
                    f"Configured value for external resource {key} ({amount}) exceeds the max "
                    f"limitation of the Yarn cluster ({maximum})."
                )
    return requested
