"""Pull requests: the plan as one sticky PR comment, and commit statuses.

- `hosting`: what a code host offers (comments, statuses, the PR head, files at a commit);
  `github` and `gitlab` implement it over httpx, `requesting` maps HTTP failures to one
  clear `HostError` each (never with the token in it).
- `costing`: each run action's best offer and $/h, and the plan's total change in $/h.
- `reviewing`: the plan of a PR head from its files (what the server and the CLI post).
- `document`: the plan JSON with costs, read back into a plan (`dockyard pr comment --plan`).
- `commenting`: the comment body (hidden marker + the planner's markdown) and the status.
- `posting`: upsert the comment by its marker and set `dockyard/plan` on the head SHA.
- `serving`: the server side: plan and post on `pull_request` webhooks, and `dockyard/apply`
  statuses from the engine's reconciles.
"""
