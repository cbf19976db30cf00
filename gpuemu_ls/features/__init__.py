"""Language-server request handlers: hover requests, the gpuemu.toml features, Test Explorer payloads, commands,
progress, and which of them are registered (what they show of engine results comes from ``diagnostics/``).

Imports the engine and lsprotocol types; ``server.py`` wires these into pygls.
"""

from pygls.lsp.server import LanguageServer

#: The server a feature is handed (``gpuemu_ls.server.GpuemuServer``), typed by its pygls base: server.py imports
#: the features, and a feature never imports the server back. A class, not ``Any``: pygls hands the server to a
#: handler whose first parameter is annotated with a class the server is an instance of.
Server = LanguageServer
