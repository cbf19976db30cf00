"""The SQLite store: runs, cases, snapshots and verdicts, shared by every face at once.

Imports ``config``, ``cases``, ``oracle`` and the foundations.
"""
