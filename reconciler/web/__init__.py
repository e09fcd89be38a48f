"""The HTTP server: REST API, webhooks, service proxy, metrics, reconcile pages."""
