"""The `dockyard` command line (typer + rich); each command group is its own module."""
