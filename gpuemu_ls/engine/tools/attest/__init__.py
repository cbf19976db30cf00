"""Signed, offline-verifiable reports: an in-toto Statement in a DSSE envelope over the report files.

``keys`` loads the signer's key (a file or an environment variable, never written anywhere) and checks
signatures; ``dsse`` is the envelope and its pre-authentication encoding; ``statement`` the in-toto
Statement (subjects by sha256, the results document as predicate); ``sign`` writes the envelope;
``verify`` checks signature, digests and config and says what that proves; ``replay`` re-runs the
recorded seeds from a checkout of the recorded commit (``rerun`` is the child process it starts there).
"""

from __future__ import annotations


class AttestFailed(Exception):
    """A check of an attestation did not pass (tampered, wrong key, another config): exit 1, one line."""
