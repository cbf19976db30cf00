"""Language-server features over engine results: diagnostics, code actions, hover, ranges.

Imports the engine and lsprotocol types; ``server.py`` wires these into pygls.
"""
