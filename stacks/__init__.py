"""Infrastructure engines behind one protocol: the local engine and the Pulumi engine.

- `protocol`: the `Engine` protocol, `StackResource`, `StackPlan`, errors, `select_engine`;
- `engines`: `build_engines` (the engines of a server; Pulumi built on first need);
- `local`: this host, SSH hosts, volume directories, the built-in proxy;
- `pulumi_engine`: the Automation API driver (imports Pulumi; optional extra);
- `programs`: pure aws/gcp programs and their cloud-init;
- `catalog`: the GPU offers catalog (data) and the pure search over it.

Imports only `schemas` of ours (import-linter).
"""
