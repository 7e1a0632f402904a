"""Topic-subscription regexes (KIP-848's subscribed_topic_regex), matched as Kafka does.

Kafka matches them with RE2/J: linear time in the topic name whatever the pattern, no
lookarounds or backreferences. So do we, with Google's RE2 (the google-re2 package): every
pattern Kafka accepts is accepted (``(^.*a.*)|(^.*b.*)``, ``(a+)+$``), none can hold the
event loop, and the ones RE2 cannot compile are refused with RE2's reason. A topic matches
when the whole name does, as RE2/J's ``matches()``.
"""

from __future__ import annotations

from functools import lru_cache

import re2

MAX_LENGTH = 1000  # a subscription is a client's input: bound what it may ask to compile


def _options() -> re2.Options:
    options = re2.Options()
    options.log_errors = False  # refusals are answered to the client, not logged by RE2
    return options


_OPTIONS = _options()


def problem(regex: str) -> str | None:
    """Why ``regex`` is refused, or None if it may be used."""
    if len(regex) > MAX_LENGTH:
        return f"longer than {MAX_LENGTH} characters"
    try:
        compiled(regex)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        return reason.decode(errors="replace") if isinstance(reason, bytes) else str(reason)
    return None


@lru_cache(maxsize=256)
def compiled(regex: str) -> re2._Regexp:
    """``regex`` compiled by RE2 (cached: a group's members share their subscriptions);
    raises re2.error for a pattern RE2 refuses."""
    return re2.compile(regex, _OPTIONS)


def matches(regex: str, topic: str) -> bool:
    """Whether ``topic`` as a whole matches ``regex`` (one ``problem`` found acceptable)."""
    return compiled(regex).fullmatch(topic) is not None
