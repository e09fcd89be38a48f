"""SSH inside the agent and toward it.

- `server`: the agent's embedded asyncssh server (local fleet, users' ``ssh <run>`` and
  port forwarding), started by the agent process when given ``--ssh-port``.
- `sessions`: what a user's SSH session runs (a shell in the job's environment).
- `transport`: the client side, an httpx transport over ``direct-tcpip`` channels of a
  pooled connection (`agent.tunnel`).
"""
