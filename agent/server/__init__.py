"""The agent's server side: the HTTP app, the job manager and the executors that run jobs.

Composition: ``serving.serve(config)`` builds a ``JobManager`` (``jobs.py``) over a
``JobStore`` (``store.py``, the data dir) and the executors (``executors/``), then serves
``app.create_app(...)`` with uvicorn on 127.0.0.1. Pure decisions live in
``allocation.py`` (GPU/CPU fit) and ``gpus.py`` (parsing ``nvidia-smi``/``amd-smi``).
"""
