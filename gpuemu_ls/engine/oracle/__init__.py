"""The oracle: comparison with the tolerance rule, invariants, output features and diagnosis.

Imports ``config``, ``cases`` and the foundations; never the runners, the store or a face.
"""
