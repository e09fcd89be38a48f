"""Executors run jobs: ``process`` (a process group per job) and ``docker`` (a container)."""
