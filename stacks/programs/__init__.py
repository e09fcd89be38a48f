"""Pulumi programs for aws and gcp: pure functions from a config to resources and outputs.

`config` and `cloudinit` import no Pulumi; `aws`, `gcp` and `registry` do (they are
imported only by the Pulumi engine and its tests, so the local path stays Pulumi-free).
"""
