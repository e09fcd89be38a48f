"""The control plane: git source, state store, planning, applying, workers, server, CLI.

`domain/` and `core/` are pure (no I/O, no clock); `engine/`, `adapters/`, `web/` and
`cli/` are the shell that fetches, calls the pure code, executes and records.
"""
