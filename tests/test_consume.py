"""The CLI's consumer loop: what an idle follow costs."""

from __future__ import annotations

import asyncio
import io
from collections.abc import Callable

import kafkaesque.cli.line_consumer
from kafkaesque.cli.line_consumer import Consumer
from kafkaesque.config.topic_config import TopicConfig
from kafkaesque.hot.log import Log
from kafkaesque.records.build import build_batch


def test_idle_follow_reads_only_partitions_that_moved(
    make_log: Callable[[], Log], monkeypatch
) -> None:
    monkeypatch.setattr(kafkaesque.cli.line_consumer, "FOLLOW_WAKEUP", 0.1)

    async def scenario() -> None:
        log = make_log()
        await log.create_topic(TopicConfig("many", 50))
        await log.append("many", 7, [build_batch([b"seven"], timestamp=1)])
        reads: list[int] = []
        read = log.read

        async def counting_read(topic: str, partition: int, *args, **kwargs):
            reads.append(partition)
            return await read(topic, partition, *args, **kwargs)

        monkeypatch.setattr(log, "read", counting_read)
        out = io.BytesIO()
        consumer = Consumer(log, "many", dict.fromkeys(range(50), 0))
        following = asyncio.create_task(consumer.run(out, follow=True))
        await asyncio.sleep(0.6)  # several safety-net wakeups with nothing new
        assert out.getvalue() == b"seven\n"
        await log.append("many", 31, [build_batch([b"late"], timestamp=1)])
        for _ in range(50):
            if out.getvalue().endswith(b"late\n"):
                break
            await asyncio.sleep(0.05)
        following.cancel()
        assert out.getvalue() == b"seven\nlate\n"
        assert reads == [7, 31]

    asyncio.run(scenario())
