"""kvplan: exact KV-cache memory planning for LLM serving.

Python API (see :mod:`kvplan.api`)::

    import kvplan
    kvplan.estimate("llama3-8b", 4096).total_bytes        # 536870912
    kvplan.fit("llama3.1-70b", "h100", tp=4, max_model_len="32k").max_concurrent_requests

Importing the package stays cheap: the API's names are resolved on first use (module ``__getattr__``),
so ``import kvplan`` imports nothing else (no torch, numpy or matplotlib, not even kvplan's modules).
"""

__version__ = "0.1.0"

__all__ = ["load_model", "estimate", "fit", "fleet", "get_gpu", "__version__"]

_API = ("load_model", "estimate", "get_gpu")
_CALLABLE_MODULES = ("fit", "fleet")  # kvplan.fit / kvplan.fleet are modules too: made callable on import


def __getattr__(name: str):
    if name in _API:
        from kvplan import api

        return getattr(api, name)
    if name in _CALLABLE_MODULES:
        import importlib

        return importlib.import_module(f"kvplan.{name}")
    raise AttributeError(f"module 'kvplan' has no attribute {name!r}")


def __dir__():
    return sorted({*globals(), *_API, *_CALLABLE_MODULES})


def _make_callable(module_name: str) -> None:
    """Make the module ``kvplan.fit`` (``kvplan.fleet``) callable as :func:`kvplan.api.fit` (``fleet``):
    ``kvplan.fit(...)`` then works whether or not the module was imported first, and its attributes
    (``kvplan.fit.FitOptions``) stay. Called at the end of those modules."""
    import sys
    import types

    api_name = module_name.rsplit(".", 1)[1]

    class _CallableModule(types.ModuleType):
        def __call__(self, *args, **kwargs):
            from kvplan import api

            return getattr(api, api_name)(*args, **kwargs)

    _CallableModule.__call__.__doc__ = f"Call :func:`kvplan.api.{api_name}`."
    sys.modules[module_name].__class__ = _CallableModule
