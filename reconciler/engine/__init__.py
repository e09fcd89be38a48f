"""The shell that runs one reconcile and the background workers; calls the pure core."""
