"""Fixtures shared by the security tests: the Docker engine of `tests/services/docker.py`."""

from tests.services.docker import docker_engine  # noqa: F401
