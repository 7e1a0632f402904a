"""The group coordinator: the classic protocol as a pure state machine (``state``,
``rules``, ``types``) and its rounds (``coordinator``), KIP-848 consumer groups
(``consumer_state`` pure, ``consumer``), offsets, configs and deletion (``admin``), the
assignors and topic regexes, and share groups (``share``: KIP-932's queues). State lives
in ``hot``; imports ``hot``, ``config`` and the shared modules."""
