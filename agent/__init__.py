"""The host agent (runs jobs in Docker or as processes), its client and its SSH tunnels."""
