"""Connections: listeners and accepting (``server``), one connection's framing, dispatch and
in-order answers (``connection``), the socket's protocol and the deadline of its reads
(``stream``: received chunks, answers sent once per loop turn), what holds requests back
(``throttling``: the shared request budget, the client quotas), TLS and SASL state.
Imports ``protocol``, ``handlers`` and the core."""
