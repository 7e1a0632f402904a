"""The transaction coordinator: its rules as a pure state machine (``transaction``), its
requests (``coordinator``), the offsets a transaction commits (``offsets``) and the
markers that end one (``completion``). State lives in ``hot``; imports ``hot``,
``groups`` (a transaction's offsets go to a group) and the shared modules."""
