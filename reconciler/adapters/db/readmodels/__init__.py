"""The web's read models: the queries behind the API and the console, one module per area.

Each function takes the session `Database.read`/`.write` (`database.py`) opens for it, so
each call is one transaction run in a worker thread; they return wire models
(`reconciler.api.models`), never ORM rows. The web (its routes, console pages, `web.app`)
and the server's first start (`reconciler.app`) import them from here.
"""
