"""The web console (``kafkaesque console``, ``serve --console``): server-rendered pages over
aiohttp with a little plain JavaScript and no front-end build step.

It reads through the project's own layers, as the CLI does, never through a Kafka client:
the partition layer (kafkaesque/partition/) for records and offsets, across Redis and the
PostgreSQL archive; the group coordinators (kafkaesque/groups/); the broker registry; the
archive's own tables (storage_pg/) for the Archive page. Like kafkaesque/cli/, it is a
composer: it may import storage_pg.

Modules: app.py (the application, its routes and middlewares, ``serve_console``),
access.py (sessions, login against the SCRAM credentials, CSRF, ACL visibility),
html.py (page layout and HTML helpers), assets.py (the stylesheet and script),
overview.py, topics.py, messages.py (browse, page, search, export, produce), tail.py (the
live tail over Server-Sent Events), records.py (reading records across both tiers,
decoding values), groups.py (lag, sparklines, resets), archive.py, security.py,
sampler.py (the history behind the sparklines and rates).
"""
