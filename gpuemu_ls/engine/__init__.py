"""The validation engine: pure Python, no editor or protocol code (never imports pygls, the CLI or the server).

The data flows one way, and so do the imports: a subpackage imports only from those before it.

    errors, dtypes, cuda  (foundations: shared by every stage)
    config  -> cases -> oracle -> store -> run -> report -> tools

``config`` reads ``gpuemu.toml``; ``cases`` plans and generates seeded inputs; ``oracle`` judges an
output (comparison, invariants, diagnosis); ``store`` keeps results in SQLite; ``run`` drives workers
through the per-case pipeline and the orchestrator; ``report`` renders results; ``tools`` are the
user-facing operations built on all of it (gate, minimize, calibrate, reproduce, init).
"""
