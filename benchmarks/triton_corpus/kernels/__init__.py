"""The corpus' kernel files, one per family. Each imports ``interp`` (TRITON_INTERPRET before triton) and triton."""
