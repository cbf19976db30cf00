"""The Python API: validate ops in your own process (where the GPU is), into the workspace's store.

    from gpuemu_ls import Client, ValidationError, validate_op

    client = Client()                                   # nearest gpuemu.toml, its store
    result = client.fuzz_op_client_side("softmax", lambda inputs: my_softmax(inputs["x"]), iterations=50)
    assert result.ok, result.report()

See docs/python-api.md for every call.
"""

from __future__ import annotations

from .client import Check, Client, validate_op
from .replay import client_replay_text
from .results import USER_SEED_BASE, Failure, FuzzResult, TestCase, ValidationError, ValidationResult
from .runners import ClientRunner, PrecomputedRunner

__all__ = [
    "USER_SEED_BASE",
    "Check",
    "Client",
    "ClientRunner",
    "Failure",
    "FuzzResult",
    "PrecomputedRunner",
    "TestCase",
    "ValidationError",
    "ValidationResult",
    "client_replay_text",
    "validate_op",
]
