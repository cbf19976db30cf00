"""The server's state outside the protocol: workspaces, background jobs, change detection (no pygls)."""
