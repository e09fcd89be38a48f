"""The configuration contract: dstack's `.dstack.yml` language as immutable pydantic models.

Everything that reads a user's configuration goes through `parse_config`; the reconciler,
the stacks engines and the agent import models from here and nothing else of ours is
imported by this package (checked by import-linter).
"""
