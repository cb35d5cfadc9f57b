"""Methods: one module per paper plus baselines; each registers its CLI names."""

from .base import Method, MethodSpec, RunContext, available_methods, get_method, register_method

__all__ = ["Method", "MethodSpec", "RunContext", "available_methods", "get_method", "register_method"]
