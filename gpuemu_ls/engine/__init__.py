"""The validation engine: pure Python, no editor or protocol code (never imports pygls)."""
