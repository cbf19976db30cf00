"""User-facing operations over the whole engine: the CI gate, minimize, calibrate, reproduce, init."""
