"""The test suite's one fixture library: workspaces, ops and references, and the real CLI.

Every suite imports from here (``from kit.workspace import ...``); ``tests/`` is on ``sys.path``
through pytest's ``pythonpath`` setting (pyproject.toml), so this works in ``pytest -n 2`` runs
and in single-file runs alike.

- ``kit.workspace``: writing file trees and workspaces (``write_files``, ``write_ws``), copies of
  examples, reading a workspace's gpuemu.toml back, ``load_op`` (write a workspace, load one op's
  config); the ``workspace``/``write_tree`` fixtures and the autouse ``isolated_env`` fixture that
  ``tests/conftest.py`` registers.
- ``kit.ops``: the common op sources and references (correct and buggy twins: scale and its
  partial-tail bug, softmax and its no-max overflow and tail bug, double, the doubling script
  reference ``DOUBLE_REF_SCRIPT``, ``identity_py`` for plan-only ops), ``op_toml``/``kernel_toml``/
  ``project_toml`` to write ``[[ops]]`` and ``[[kernels]]`` entries and headers, and the matching
  gpuemu.toml snippets.
- ``kit.cli``: running the real ``gpuemu`` CLI (by the test venv's interpreter or another) and
  ``gpuemu-ls --check`` as subprocesses, with an environment that leaks nothing of the test run
  (``env``, ``gpuemu``, ``check``, ``out``, ``jdoc``, and the ``clean_env``/``gpuemu_cli`` fixtures).
- ``kit.cases``: cases by hand, ``spec_with`` (the case a seed means, with some fields replaced).
- ``kit.store``: reading a workspace's store (``.gpuemu/gpuemu.db``) with plain sqlite3.
- ``kit.frameworks``: which optional frameworks are installed (found without importing them) and
  the ``needs_*`` skip marks; ``plugin_args`` for pytest subprocesses that load the gpuemu plugin.

Suite-specific helpers stay in their suites and build on these: ``tests/gate/gatekit.py``,
``tests/lsp/lspkit.py``, ``tests/reliability/relkit.py``, ``tests/api/apihelp.py``.
"""
