"""gpuemu-ls: validate GPU kernels against float64 references on a CPU.

The engine (:mod:`gpuemu_ls.engine`) is the product; the CLI, the CI gate, the Python API and the
language server are thin faces over it.
"""

__version__ = "0.1.0"
