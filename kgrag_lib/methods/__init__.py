"""Methods: one package per paper; `registry` lists them all by CLI name."""

from .base import Method, MethodSpec, RunContext
from .registry import available_methods, check_dataset, get_method

__all__ = ["Method", "MethodSpec", "RunContext", "available_methods", "check_dataset", "get_method"]
