"""Cases: the portable generator (rng), the plan of seeds and shapes, and input generation with layouts.

Imports ``config`` and the foundations.
"""
