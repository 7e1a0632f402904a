"""Connections: listeners and accepting (``server``), one connection's framing, dispatch and
in-order answers (``connection``), the socket's protocol and the deadline of its reads
(``stream``: received chunks, answers sent once per loop turn), the shared request budget,
TLS and SASL state. Imports ``protocol``, ``handlers`` and the core."""
