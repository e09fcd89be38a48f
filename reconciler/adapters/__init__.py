"""Adapters to the outside world: git repositories, the SQL state store."""
