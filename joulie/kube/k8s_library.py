"""kubernetes-asyncio's kubeconfig / in-cluster loaders and its API client, without its generated
API classes and models.

Importing ``kubernetes_asyncio`` runs its package ``__init__``, which imports some 850 generated
modules (every API group and every model) and costs about 33 MiB of memory. Joulie sends requests
on plain paths and decodes JSON itself, so it needs none of them, and the agent runs on every node
of the fleet with an 80 MiB budget. This module imports only the parts Joulie uses: the package
modules are registered without running their ``__init__`` (their search paths kept, so the real
submodules load), and the models package, which the API client imports but uses only to
deserialise into models, as an empty module.

When the full library is already imported (a tool or test that uses it directly), that is used
instead; if the library's layout ever changes so that the slim import fails, the full import is
used, at the old memory cost.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from typing import TYPE_CHECKING, Any

import structlog

__all__ = ["ApiClient", "ConfigException", "Configuration", "full_library", "k8s_config"]

_PACKAGES = ("kubernetes_asyncio", "kubernetes_asyncio.client")
_MODELS = "kubernetes_asyncio.client.models"


def _slim() -> tuple[Any, Any, Any]:
    registered: list[str] = []
    try:
        parent: types.ModuleType | None = None
        for name in _PACKAGES:
            # For the subpackage this finds the stub parent registered just before.
            spec = importlib.util.find_spec(name)
            if spec is None or spec.submodule_search_locations is None:
                raise ImportError(f"{name} is not a package")
            package = types.ModuleType(name)
            package.__path__ = list(spec.submodule_search_locations)
            package.__spec__ = spec
            sys.modules[name] = package
            registered.append(name)
            if parent is not None:
                setattr(parent, name.rsplit(".", 1)[1], package)
            parent = package
        client = sys.modules["kubernetes_asyncio.client"]
        models = types.ModuleType(_MODELS)
        sys.modules[_MODELS] = models
        registered.append(_MODELS)
        client.models = models  # type: ignore[attr-defined]
        configuration = importlib.import_module("kubernetes_asyncio.client.configuration")
        api_client = importlib.import_module("kubernetes_asyncio.client.api_client")
        client.Configuration = configuration.Configuration  # type: ignore[attr-defined]
        client.ApiClient = api_client.ApiClient  # type: ignore[attr-defined]
        config = importlib.import_module("kubernetes_asyncio.config")
        sys.modules["kubernetes_asyncio"].config = config  # type: ignore[attr-defined]
        return api_client.ApiClient, configuration.Configuration, config
    except Exception:
        for name in [*registered, *[m for m in sys.modules if m.startswith("kubernetes_asyncio")]]:
            sys.modules.pop(name, None)
        raise


def _load() -> tuple[Any, Any, Any]:
    if "kubernetes_asyncio" not in sys.modules:
        try:
            return _slim()
        except Exception as exc:
            # The full import below still works, at its memory cost.
            structlog.get_logger("joulie.kube").warning(
                "kubernetes-asyncio imported in full (the slim import failed)", error=repr(exc)
            )
    from kubernetes_asyncio import client, config

    return client.ApiClient, client.Configuration, config


def full_library() -> types.ModuleType:
    """The whole ``kubernetes_asyncio`` package, generated APIs and models included, for the
    rare caller that wants them (a benchmark comparing them with Joulie's projections). The slim
    stand-ins are dropped so the package's own ``__init__`` runs; the modules already loaded
    (configuration, API client) are reused."""
    for name in (*_PACKAGES, _MODELS):
        module = sys.modules.get(name)
        if module is not None and getattr(module, "__file__", None) is None:
            del sys.modules[name]
    return importlib.import_module("kubernetes_asyncio")


if TYPE_CHECKING:
    from kubernetes_asyncio import config as k8s_config
    from kubernetes_asyncio.client import ApiClient, Configuration
else:
    ApiClient, Configuration, k8s_config = _load()

ConfigException = k8s_config.ConfigException
