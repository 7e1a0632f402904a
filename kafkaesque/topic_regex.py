"""Topic-subscription regexes (KIP-848's subscribed_topic_regex) checked before use.

Kafka matches them with RE2/J: linear time, no lookarounds or backreferences. Python's re
backtracks, so a pattern like ``(a+)+$`` could hold the event loop for minutes on one topic
name. We refuse what RE2 refuses and the shapes that backtrack exponentially (a repeat
around another repeat or an alternation) or polynomially to a high power (more than
``MAX_REPEATS`` repeats: ``.*a.*a.*a.*a.*z`` takes 12 s on a 249-character name), reading
Python's own parse of the pattern.
"""

from __future__ import annotations

import re
import re._constants as sre  # the parser's node kinds (Python 3.11+)
import re._parser as sre_parse
from typing import Any

MAX_LENGTH = 1000
MAX_REPEATS = 3  # three take milliseconds on the longest topic name, four can take seconds
_REPEATS = {sre.MAX_REPEAT, sre.MIN_REPEAT, sre.POSSESSIVE_REPEAT}
_UNSUPPORTED = {
    sre.ASSERT: "lookaround",
    sre.ASSERT_NOT: "lookaround",
    sre.GROUPREF: "backreference",
}


def problem(regex: str) -> str | None:
    """Why ``regex`` is refused, or None if it may be used (with ``re.fullmatch``)."""
    if len(regex) > MAX_LENGTH:
        return f"longer than {MAX_LENGTH} characters"
    try:
        re.compile(regex)
        parsed = sre_parse.parse(regex)
    except re.error as exc:
        return str(exc)
    repeats: list[int] = []
    found = _walk(list(parsed), False, repeats)
    if found is None and len(repeats) > MAX_REPEATS:
        return f"more than {MAX_REPEATS} repetitions (slow backtracking)"
    return found


def _walk(nodes: list[tuple[Any, Any]], inside_repeat: bool, repeats: list[int]) -> str | None:
    """The first refused construct in ``nodes``; counts their repeats into ``repeats``."""
    for op, arg in nodes:
        if op in _UNSUPPORTED:
            return f"{_UNSUPPORTED[op]} (not in RE2)"
        children: list[list[tuple[Any, Any]]] = []
        if op in _REPEATS:
            if inside_repeat and arg[1] > 1:
                return "nested repetition (exponential backtracking)"
            if arg[1] > 1:
                repeats.append(arg[1])
            children, inside = [list(arg[2])], inside_repeat or arg[1] > 1
        elif op is sre.BRANCH:
            if inside_repeat:
                return "alternation inside a repetition (exponential backtracking)"
            children, inside = [list(b) for b in arg[1]], inside_repeat
        elif op is sre.SUBPATTERN:
            children, inside = [list(arg[3])], inside_repeat
        elif op is sre.ATOMIC_GROUP:
            children, inside = [list(arg)], inside_repeat
        for child in children:
            found = _walk(child, inside, repeats)
            if found:
                return found
    return None
