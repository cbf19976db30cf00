"""``gpuemu.toml``: the keys, the checker, the model, TOML positions and edits that keep comments.

Imports only the foundations (``errors``, ``dtypes``, ``cuda`` for its shell-safety rule).
"""
