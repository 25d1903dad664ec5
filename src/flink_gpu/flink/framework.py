"""Flink's external resource framework (docs/design.md §2.2–2.5): the driver ABCs, the resource list,
driver loading and the provider that hands the retrieved infos to operators.

Flink finds driver factories in plugin jars through Java's ServiceLoader; here a factory is a
Python class named by an import path (``my_pkg.fpga:FPGADriverFactory``) or registered in the
entry-point group ``flink_gpu.external_resource_drivers``. Like Flink, nothing here stops a
worker from starting: every failure becomes a WARN line and an empty set. Unlike Flink, the
reason is also kept, per resource, in :meth:`ExternalResourceInfoProvider.missing_reason`.
"""

from __future__ import annotations

import logging
import os
from abc import ABC, abstractmethod
from collections.abc import Collection, Mapping
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

from flink_gpu.errors import FactoryLoadError, FactoryNotFoundError
from flink_gpu.flink.configuration import ConfigOption, Configuration
from flink_gpu.flink.resource_info import ExternalResourceInfo

__all__ = [
    "AMOUNT_SUFFIX",
    "DRIVER_FACTORY_SUFFIX",
    "ENTRY_POINT_GROUP",
    "EXTERNAL_RESOURCE_LIST",
    "PARAM_SUFFIX",
    "ExternalResourceDriver",
    "ExternalResourceDriverFactory",
    "ExternalResourceInfo",
    "ExternalResourceInfoProvider",
    "JAVA_GPU_FACTORY",
    "FactoryLoadError",
    "FactoryNotFoundError",
    "amount_key",
    "configured_factory_name",
    "driver_factory_key",
    "external_resource_amounts",
    "external_resource_names",
    "load_external_resources",
    "load_factory",
    "param_prefix",
    "system_config_key",
]

LOG = logging.getLogger("flink_gpu.flink.framework")

if TYPE_CHECKING:
    from importlib.metadata import EntryPoint

    from typing_extensions import Self  # typing's from Python 3.11

ENTRY_POINT_GROUP = "flink_gpu.external_resource_drivers"
"""Entry-point group where distributions register driver factories (Flink: META-INF/services)."""

EXTERNAL_RESOURCE_LIST: ConfigOption[list[str]] = ConfigOption(
    "external-resources", list, [], "List of the external resources, separated by ';'; 'none' disables them all."
)
NONE = "none"

# Flink's Java factory names that map to a factory of this package, so that an unchanged Flink
# configuration works.
JAVA_GPU_FACTORY = "org.apache.flink.externalresource.gpu.GPUDriverFactory"
JAVA_FACTORY_ALIASES = MappingProxyType({JAVA_GPU_FACTORY: "flink_gpu.gpu.GPUDriverFactory"})


#: The suffixes of a resource's own keys, ``external-resource.<name>.<suffix>`` (docs/design.md §2.1).
AMOUNT_SUFFIX = "amount"
DRIVER_FACTORY_SUFFIX = "driver-factory.class"
PARAM_SUFFIX = "param"


def system_config_key(name: str, suffix: str) -> str:
    """``external-resource.<name>.<suffix>``, e.g. suffix ``kubernetes.config-key``."""
    return f"external-resource.{name}.{suffix}"


def amount_key(name: str) -> str:
    return system_config_key(name, AMOUNT_SUFFIX)


def driver_factory_key(name: str) -> str:
    return system_config_key(name, DRIVER_FACTORY_SUFFIX)


def param_prefix(name: str) -> str:
    return system_config_key(name, PARAM_SUFFIX) + "."


def configured_factory_name(config: Configuration, name: str) -> str | None:
    """``driver-factory.class`` of resource ``name`` as a TaskManager loads it (not stripped), or
    None when it is unset or blank, which makes Flink skip the resource."""
    value = config.get_string(driver_factory_key(name))
    return None if value is None or not value.strip() else value


# ---------------------------------------------------------------------------------------------
# The API a driver implements (org.apache.flink.api.common.externalresource)


class ExternalResourceDriver(ABC):
    """Retrieves the infos of one kind of resource on this host.

    A context manager: ``close`` releases whatever the driver holds (Flink's driver has no
    ``close``; the default does nothing)."""

    @abstractmethod
    def retrieve_resource_info(self, amount: int) -> frozenset[ExternalResourceInfo]:
        """The infos for a worker that was granted ``amount`` of the resource."""

    def close(self) -> None:  # noqa: B027 (optional: a driver that holds nothing need not override it)
        """Release what the driver holds. The default does nothing."""

    def __enter__(self) -> Self:  # a GPUDriver's block gets a GPUDriver (and its GPUInfo)
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class ExternalResourceDriverFactory(ABC):
    """Creates a driver from the resource's ``param.`` keys (prefix stripped).

    A factory class must be constructible without arguments (as Java's ServiceLoader requires).
    """

    @abstractmethod
    def create_external_resource_driver(self, config: Configuration) -> ExternalResourceDriver:
        """A driver for the resource whose ``param.`` keys are in ``config``."""


# ---------------------------------------------------------------------------------------------
# The resource list and amounts (Flink's ExternalResourceUtils)


def external_resource_names(config: Configuration | Mapping[str, object] | None) -> list[str]:
    """The enabled resource names, first appearance first, duplicates dropped.

    ``external-resources`` is read as Flink reads it: a string is split on ``;`` with Flink's
    quoting rules, a list is taken as is, the exact value ``none`` means no resource. Bad quoting
    raises ``IllegalConfigurationException``.
    """
    config = Configuration.coerce(config)
    if config.get_string(EXTERNAL_RESOURCE_LIST.key) == NONE:
        return []
    return list(dict.fromkeys(config.get(EXTERNAL_RESOURCE_LIST)))


def _amounts(config: Configuration, names: list[str], reasons: dict[str, list[str]] | None) -> dict[str, int]:
    found: dict[str, int] = {}
    for name in names:
        option: ConfigOption[int] = ConfigOption(amount_key(name), int)
        amount = config.get(option)  # not a whole number: IllegalConfigurationException, as Flink
        if amount is None:
            LOG.warning("The amount of the %s should be configured. Will ignore that resource.", name)
            if reasons is not None:
                reasons[name].append(f"{option.key} is not set")
        elif amount <= 0:
            LOG.warning(
                "The amount of the external resource %s should be positive, but %s is %d. Will ignore that resource.",
                name,
                option.key,
                amount,
            )
            if reasons is not None:
                reasons[name].append(f"{option.key} is {amount}; it must be positive")
        else:
            found[name] = amount
    return found


def external_resource_amounts(config: Configuration | Mapping[str, object] | None) -> dict[str, int]:
    """Resource name → amount for every enabled resource with a positive amount (Flink's
    ``getExternalResourceAmountMap``); the others are skipped with a WARN."""
    config = Configuration.coerce(config)
    return _amounts(config, external_resource_names(config), None)


# ---------------------------------------------------------------------------------------------
# Loading factories


def _import_attribute(module_name: str, attributes: list[str]) -> Any:
    from importlib import import_module

    value = import_module(module_name)
    for attribute in attributes:
        value = getattr(value, attribute)
    return value


def _import_dotted(path: str) -> Any:
    """Import ``pkg.mod:attr`` or ``pkg.mod.Attr``; ``FactoryNotFoundError`` when no such thing."""
    if ":" in path:
        module_name, _, attribute_path = path.partition(":")
        try:
            return _import_attribute(module_name, attribute_path.split("."))
        except ModuleNotFoundError as error:
            if (
                error.name
                and module_name.startswith(error.name)
                and (module_name == error.name or module_name[len(error.name)] == ".")
            ):
                raise FactoryNotFoundError(f"module {module_name!r} is not installed") from error
            raise FactoryLoadError(f"importing {module_name!r} failed: {_describe(error)}") from error
        except AttributeError as error:
            raise FactoryNotFoundError(f"module {module_name!r} has no {attribute_path!r}") from error
        except Exception as error:
            raise FactoryLoadError(f"importing {module_name!r} failed: {_describe(error)}") from error
    parts = path.split(".")
    # longest importable module prefix first: "a.b.C" tries module "a.b", then "a"
    for split in range(len(parts) - 1, 0, -1):
        module_name = ".".join(parts[:split])
        try:
            return _import_attribute(module_name, parts[split:])
        except ModuleNotFoundError as error:
            if error.name and (module_name == error.name or module_name.startswith(error.name + ".")):
                continue  # this prefix is not a module; try a shorter one
            raise FactoryLoadError(f"importing {module_name!r} failed: {_describe(error)}") from error
        except AttributeError as error:
            raise FactoryNotFoundError(f"module {module_name!r} has no {'.'.join(parts[split:])!r}") from error
        except Exception as error:
            raise FactoryLoadError(f"importing {module_name!r} failed: {_describe(error)}") from error
    raise FactoryNotFoundError(f"no module of {path!r} is installed")


class _EntryPoints:
    """The factories registered in :data:`ENTRY_POINT_GROUP`, scanned on first use only."""

    def __init__(self) -> None:
        self._by_name: dict[str, list[EntryPoint]] | None = None

    def get(self, name: str) -> EntryPoint | None:
        """The entry point registered as ``name``, or None."""
        if self._by_name is None:
            from importlib.metadata import entry_points

            found: dict[str, list[EntryPoint]] = {}
            for entry_point in entry_points(group=ENTRY_POINT_GROUP):
                found.setdefault(entry_point.name, []).append(entry_point)
            self._by_name = found
        candidates = self._by_name.get(name)
        if not candidates:
            return None
        if len({ep.value for ep in candidates}) > 1:
            LOG.warning(
                "Several factories are registered as %r in entry-point group %s (%s); using %s.",
                name,
                ENTRY_POINT_GROUP,
                ", ".join(ep.value for ep in candidates),
                candidates[0].value,
            )
        return candidates[0]


def load_factory(name: str) -> ExternalResourceDriverFactory:
    """A new instance of the factory ``name`` names, resolved as a worker resolves
    ``external-resource.<name>.driver-factory.class``.

    ``name`` is one of Flink's Java factory names (:data:`JAVA_FACTORY_ALIASES`), an import path
    (``pkg.mod.Factory`` or ``pkg.mod:Factory``), or the name of an entry point in
    :data:`ENTRY_POINT_GROUP` (looked up only when the name is not an importable path). A class is
    instantiated without arguments; an object with ``create_external_resource_driver`` is used
    as it is.

    Raises :class:`FactoryNotFoundError` when nothing has that name,
    :class:`FactoryLoadError` when its module fails to import or it is not a factory, and whatever
    the factory's constructor raises.
    """
    return _load_factory(name, _EntryPoints())


def _load_factory(name: str, registered: _EntryPoints) -> ExternalResourceDriverFactory:
    target = JAVA_FACTORY_ALIASES.get(name, name)
    obj = None
    not_found = None
    if "." in target or ":" in target:
        try:
            obj = _import_dotted(target)
        except FactoryNotFoundError as error:
            not_found = error
    if obj is None and ":" not in target:
        entry_point = registered.get(name)
        if entry_point is not None:
            try:
                obj = entry_point.load()
            except Exception as error:
                raise FactoryLoadError(
                    f"loading entry point {entry_point.name} = {entry_point.value} failed: {_describe(error)}"
                ) from error
    if obj is None:
        tried = [] if not_found is None else [not_found.detail]
        if ":" not in target:
            tried.append(f"no entry point {name!r} in group {ENTRY_POINT_GROUP}")
        raise FactoryNotFoundError("; ".join(tried))
    factory = obj() if isinstance(obj, type) else obj
    if not callable(getattr(factory, "create_external_resource_driver", None)):
        raise FactoryLoadError(
            f"{target} is not an ExternalResourceDriverFactory (it has no create_external_resource_driver method)"
        )
    return factory  # type: ignore[no-any-return]  # duck-typed, as Flink's ServiceLoader is not


# ---------------------------------------------------------------------------------------------
# The provider (Flink's StaticExternalResourceInfoProvider)


class ExternalResourceInfoProvider:
    """The infos retrieved for each resource, and why a resource has none.

    :meth:`get_external_resource_infos` never raises and never returns ``None``: an unknown,
    skipped or failed resource gives an empty ``frozenset``, as in Flink.
    :meth:`missing_reason` says why. ``close()`` closes the drivers (also as a context manager).
    """

    def __init__(
        self,
        infos: Mapping[str, Collection[ExternalResourceInfo]] | None = None,
        reasons: Mapping[str, str] | None = None,
        drivers: Mapping[str, ExternalResourceDriver] | None = None,
        enabled: Collection[str] | None = None,
    ) -> None:
        self._infos = {name: frozenset(values) for name, values in (infos or {}).items()}
        self._reasons = dict(reasons or {})
        self._drivers = dict(drivers or {})
        self._enabled = tuple(enabled) if enabled is not None else tuple(self._infos)
        self._closed = False

    @property
    def resource_names(self) -> tuple[str, ...]:
        """The names whose infos were retrieved, in configuration order."""
        return tuple(name for name in self._enabled if name in self._infos) + tuple(
            name for name in self._infos if name not in self._enabled
        )

    @property
    def enabled_resources(self) -> tuple[str, ...]:
        """The names listed in ``external-resources``."""
        return self._enabled

    def get_external_resource_infos(self, resource_name: str) -> frozenset[ExternalResourceInfo]:
        """The infos of ``resource_name``; an empty set when there are none."""
        try:
            return self._infos.get(resource_name, frozenset())
        except TypeError:  # an unhashable "name"
            return frozenset()

    def missing_reason(self, resource_name: str) -> str | None:
        """Why ``resource_name`` has no infos, or ``None`` when it has some."""
        try:
            if self._infos.get(resource_name):
                return None
            reason = self._reasons.get(resource_name)
        except TypeError:
            return f"{resource_name!r} is not a resource name"
        if reason is not None:
            return reason
        if not self._enabled:
            return (
                f"external resource {resource_name!r} is not listed in "
                f"{EXTERNAL_RESOURCE_LIST.key}, which lists no resource"
            )
        return (
            f"external resource {resource_name!r} is not listed in "
            f"{EXTERNAL_RESOURCE_LIST.key} (listed: {', '.join(self._enabled)})"
        )

    @property
    def missing_reasons(self) -> Mapping[str, str]:
        """Reason per enabled resource that has no infos."""
        return MappingProxyType(
            {
                name: reason
                for name in self._enabled
                if not self._infos.get(name) and (reason := self.missing_reason(name))
            }
        )

    def close(self) -> None:
        """Close every driver (once); a driver that fails to close gets a WARN."""
        if self._closed:
            return
        self._closed = True
        for name, driver in self._drivers.items():
            _close_driver(name, driver)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def __repr__(self) -> str:
        counts = ", ".join(f"{name}={len(infos)}" for name, infos in self._infos.items())
        return f"ExternalResourceInfoProvider({counts})"


def _close_driver(name: str, driver: Any) -> None:
    close = getattr(driver, "close", None)
    if close is None:
        return
    try:
        close()
    except Exception:
        LOG.warning("Failed to close the driver of external resource %s.", name, exc_info=True)


def _describe(error: BaseException) -> str:
    return f"{type(error).__name__}: {error}"


def load_external_resources(
    config: Configuration | Mapping[str, object] | str | os.PathLike[str] | None,
) -> ExternalResourceInfoProvider:
    """Build the drivers of the enabled resources and retrieve their infos, as a Flink
    TaskManager does at start-up (``ExternalResourceUtils.createStaticExternalResourceInfoProvider
    FromConfig``).

    ``config`` is a ``Configuration``, a mapping of Flink keys, or the path of a Flink
    configuration file or ``conf`` directory. Only a malformed ``external-resources`` list or a
    non-integer amount raises (``IllegalConfigurationException``, as Flink fails then); every
    other problem is a WARN and an entry in :meth:`~ExternalResourceInfoProvider.missing_reason`.
    Each driver gets ``config.prefixed("external-resource.<name>.param.")``.
    """
    if isinstance(config, (str, os.PathLike)):
        config = Configuration.from_yaml(config)
    config = Configuration.coerce(config)
    names = external_resource_names(config)
    reasons: dict[str, list[str]] = {name: [] for name in names}

    amounts = _amounts(config, names, reasons)
    LOG.info("Enabled external resources: %s", list(amounts))

    drivers: dict[str, Any] = {}
    factories: dict[str, Any] = {}  # one instance per factory name, as Flink has one per class
    registered = _EntryPoints()  # scanned once for all names, and only if a name needs it
    for name in names:
        key = driver_factory_key(name)
        factory_name = configured_factory_name(config, name)
        if factory_name is None:
            LOG.warning("Could not find driver class name for %s. Please make sure %s is configured.", name, key)
            reasons[name].append(f"{key} is not set")
            continue
        try:
            factory = factories[factory_name] if factory_name in factories else _load_factory(factory_name, registered)
        except FactoryNotFoundError as error:
            LOG.warning("Could not find factory class %s for %s.", factory_name, name)
            reasons[name].append(f"factory class {factory_name} was not found ({error.detail})")
            continue
        except FactoryLoadError as error:
            LOG.warning("Could not find factory class %s for %s. %s.", factory_name, name, error)
            reasons[name].append(f"factory class {factory_name} could not be loaded: {error}")
            continue
        except Exception as error:  # the factory's own constructor raised
            LOG.warning("Could not instantiate driver with factory %s for %s. %s", factory_name, name, _describe(error))
            reasons[name].append(f"factory {factory_name} raised {_describe(error)}")
            continue
        factories[factory_name] = factory
        try:
            driver = factory.create_external_resource_driver(config.prefixed(param_prefix(name)))
        except Exception as error:
            LOG.warning("Could not instantiate driver with factory %s for %s. %s", factory_name, name, _describe(error))
            reasons[name].append(f"factory {factory_name} raised {_describe(error)}")
            continue
        if not callable(getattr(driver, "retrieve_resource_info", None)):
            LOG.warning(
                "Could not instantiate driver with factory %s for %s. It returned %r, "
                "which is not an ExternalResourceDriver.",
                factory_name,
                name,
                driver,
            )
            reasons[name].append(f"factory {factory_name} returned {driver!r}, not an ExternalResourceDriver")
            continue
        LOG.info("Add external resources driver for %s.", name)
        drivers[name] = driver

    infos: dict[str, frozenset[ExternalResourceInfo]] = {}
    kept: dict[str, Any] = {}
    for name, driver in drivers.items():
        if name not in amounts:
            LOG.warning("Could not find a legal amount configuration for %s.", name)
            _close_driver(name, driver)
            continue
        kept[name] = driver
        amount = amounts[name]
        try:
            result = driver.retrieve_resource_info(amount)
            if result is None or isinstance(result, (str, bytes)):
                raise TypeError(f"retrieve_resource_info returned {result!r}, not a set of ExternalResourceInfo")
            infos[name] = frozenset(result)
        except Exception as error:
            LOG.warning("Failed to retrieve information of external resource %s.", name, exc_info=True)
            reasons[name].append(f"retrieve_resource_info({amount}) failed with {_describe(error)}")
            continue
        if not infos[name]:
            reasons[name].append(f"the driver of {name} returned no information for amount {amount}")

    return ExternalResourceInfoProvider(infos, {name: "; ".join(r) for name, r in reasons.items() if r}, kept, names)
