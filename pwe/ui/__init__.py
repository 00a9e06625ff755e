"""The live dashboard (``pwe ui``, and ``pwe service`` serves it too): a Starlette app
served by uvicorn, a JSON API whose documents are the command line's ``--json``
documents, a page of plain HTML and JavaScript, live updates over server-sent events.

- :mod:`.app`      the Starlette app: routes, the OpenAPI description, serving it (uvicorn)
- :mod:`.api`      the JSON documents, built by the functions the CLI's ``--json`` uses
- :mod:`.model`    runs read once and kept up to date from their journals' tails
- :mod:`.live`     the server-sent event streams (the runs list, one run's journal)
- :mod:`.actions`  cancel, retry, resume, trigger now/enable/disable: the CLI's code, with who asked
- :mod:`.security` the token, the session cookie, CSRF, Origin and Host checks, bounds
- ``static/``      the page (no build step, no script library: nothing to vendor)

Starlette and uvicorn are the ``web`` extra (``pip install 'pwe[web]'``); nothing below
``pwe.ui`` imports this package, and ``pwe --help`` never does.
"""
