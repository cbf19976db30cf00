"""Import this before triton: without a GPU the kernels run on Triton's CPU interpreter.

Triton reads ``TRITON_INTERPRET`` when it decorates a function, its own library included, so it must be
set before triton is first imported anywhere in the process (as ``softmax.py`` and ``matmul.py``, copies
of ``examples/triton``, do themselves).
"""

import os
import sys

import torch

if not torch.cuda.is_available() and "TRITON_INTERPRET" not in os.environ:
    if "triton" in sys.modules:
        raise ImportError("no GPU, and triton was imported before TRITON_INTERPRET=1 was set: set it in the env")
    os.environ["TRITON_INTERPRET"] = "1"
