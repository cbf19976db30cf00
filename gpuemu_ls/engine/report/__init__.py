"""Reporting: the results document (JSON), text lines, JUnit, SARIF and baselines.

Imports every stage before it; never ``tools`` or a face.
"""
