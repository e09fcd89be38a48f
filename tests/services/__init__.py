"""Real services for the tests (PostgreSQL, Docker engine, OpenSSH sshd), started on demand.

Each module starts its service once per session when the machine allows it and otherwise
makes the tests that need it skip with a clear reason.
"""
