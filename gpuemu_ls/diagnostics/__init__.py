"""Engine results turned into what an editor shows: LSP diagnostics (``diagnostics.py``), code actions and
lenses (``code_actions.py``), hover texts (``hover.py``) and the source ranges they point at (``ranges.py``).

Imports the engine, the workspace session and lsprotocol types, never pygls' server; ``features/`` (request
handlers, the gpuemu.toml features) and ``server.py`` use these.
"""
