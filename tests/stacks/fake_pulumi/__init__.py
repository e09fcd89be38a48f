"""A fake `pulumi` CLI (test-only): see `cli.py`."""
