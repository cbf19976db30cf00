"""Running cases: runners, the wire format, worker processes (zygote, supervisor), framework adapters,
the per-case pipeline and the orchestrator of a validation run.

Imports every stage before it (``config``, ``cases``, ``oracle``, ``store``) and the foundations.
"""
