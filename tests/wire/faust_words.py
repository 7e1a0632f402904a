"""A faust-streaming application counting words into a table (its changelog topic is
compacted), run by tests/wire/test_faust.py against the broker.

Every count it updates goes to the counts topic as "word=count", so a test sees what the
table holds, also after a restart recovered it from the changelog.
Environment: KAFKAESQUE_BOOTSTRAP (host:port), FAUST_APP_ID, FAUST_DATA_DIR,
WORDS_TOPIC, COUNTS_TOPIC.
"""

from __future__ import annotations

import os

import faust

app = faust.App(
    os.environ["FAUST_APP_ID"],
    broker=f"kafka://{os.environ['KAFKAESQUE_BOOTSTRAP']}",
    datadir=os.environ["FAUST_DATA_DIR"],
    store="memory://",  # the table lives only in memory: a restart must recover it
    topic_partitions=1,
    topic_replication_factor=1,
    web_enabled=False,
    consumer_auto_offset_reset="earliest",
)
words = app.topic(os.environ["WORDS_TOPIC"], key_serializer="raw", value_serializer="raw")
counts_topic = app.topic(os.environ["COUNTS_TOPIC"], key_serializer="raw", value_serializer="raw")
counts = app.Table("word_counts", default=int, partitions=1)


@app.agent(words)
async def count(stream: faust.Stream) -> None:
    async for word in stream:
        text = word.decode()
        counts[text] += 1
        await counts_topic.send(key=word, value=f"{text}={counts[text]}".encode())


if __name__ == "__main__":
    app.main()
