"""The web console: server-rendered pages of the GitOps loop, runs, fleets and costs.

`build_console_router` (called by `reconciler.web.app`) serves `/console/…` (and `/`
redirects there): sign-in with a Dockyard token sets a signed, HttpOnly, SameSite=Strict
session cookie scoped to `/console` (so it never reaches the service proxy); every page
checks the session and the caller's project role exactly as the API does; every form that
changes state carries a CSRF token. Pages are Jinja2 templates with autoescaping; the
little script there is (`static/console.js`: live log follow, live charts) is served from
here, and the pages read fine without it. Modules: `sessions` (cookie and CSRF signing),
`access` (who may see what), `pages` (the routes), `charts` and `costs` (pure).
"""
