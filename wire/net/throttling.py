"""The client quotas' part in every request, around the handlers (Kafka's KIP-13/KIP-219).

- ``Throttling``: caps a Fetch to its consumer quota before the handler, and after it
  records the bytes, sets the response's throttle_time and says how long to mute the
  connection;
- ``with_throttle``: a response saying it was throttled.
"""

from __future__ import annotations

import dataclasses
import datetime
from typing import Any

from kafkaesque.security.quota_rates import QuotaManager
from kafkaesque.security.quotas import ANONYMOUS, CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE
from wire.protocol.codec import Request

PRODUCE, FETCH, ALTER_CLIENT_QUOTAS, SHARE_FETCH = 0, 1, 49, 78


def with_throttle(response: Any, throttle_ms: int) -> Any:
    """``response`` saying it was throttled ``throttle_ms`` (or what it says already, if
    longer); unchanged if its version has no throttle_time (Produce v0)."""
    current = getattr(response, "throttle_time", None)
    wanted = datetime.timedelta(milliseconds=throttle_ms)
    if current is None or current >= wanted:
        return response
    return dataclasses.replace(response, throttle_time=wanted)


class Throttling:
    """The quotas applied around the handlers, for the server. Every client is the user
    ANONYMOUS (no authentication yet), as on Kafka's PLAINTEXT listener."""

    def __init__(self, manager: QuotaManager) -> None:
        self.manager = manager

    def before(self, request: Request) -> Request:
        """A Fetch asks for no more than its consumer quota allows in the measured window
        (Kafka's cap), so one response cannot be throttled for ever."""
        if request.api_key not in (FETCH, SHARE_FETCH) or not self.manager.active:
            return request
        cap = self.manager.max_in_window(CONSUMER_BYTE_RATE, ANONYMOUS, request.client_id or "")
        if cap is None or request.body.max_bytes <= cap:
            return request
        body = dataclasses.replace(request.body, max_bytes=max(int(cap), 1))
        return dataclasses.replace(request, body=body)

    def after(self, request: Request, response: Any, response_size: int) -> tuple[Any, int]:
        """The response to send (with its throttle time) and the ms to mute the connection
        after sending it; ``response_size`` is the encoded response's, for Fetch."""
        if request.api_key == ALTER_CLIENT_QUOTAS and not request.body.validate_only:
            self.manager.changed()  # this broker's own change applies at once
        if not self.manager.active:
            return response, 0
        client_id = request.client_id or ""
        if request.api_key == PRODUCE:
            # Kafka counts the whole request, and throttles acks=0 producers too.
            ms = self.manager.record(PRODUCER_BYTE_RATE, ANONYMOUS, client_id, request.size)
        elif request.api_key == FETCH:
            ms = self.manager.record(CONSUMER_BYTE_RATE, ANONYMOUS, client_id, response_size)
            if ms:
                # As Kafka: the data is not sent (nor counted); the client fetches it again
                # after the throttle time.
                self.manager.unrecord(CONSUMER_BYTE_RATE, ANONYMOUS, client_id, response_size)
                response = dataclasses.replace(response, responses=())
        elif request.api_key == SHARE_FETCH:
            # Kafka counts a ShareFetch as a fetch, and sends its records anyway: they are
            # acquired (locked) for this member.
            ms = self.manager.record(CONSUMER_BYTE_RATE, ANONYMOUS, client_id, response_size)
        else:
            return response, 0
        if ms and response is not None:
            response = with_throttle(response, ms)
        return response, ms
