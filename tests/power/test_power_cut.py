"""acks=all survives a power cut on the embedded server (tests/power/power_cut.py).

Idempotent acks=all producers write through a real broker while every AOF fsync of the
embedded Valkey takes 50 ms (a slow disk); then the power goes: the server is killed and
its AOF cut back to what its fsyncs covered. Started again, it must hold every record a
producer was told was written, at the offset it was told. Under appendfsync everysec
Valkey answers WAITAOF before the fsync it waits for is done, and this lost acknowledged
records; the embedded server runs with appendfsync always."""

from __future__ import annotations

from pathlib import Path

from tests.power.power_cut import build_shim, through_a_power_cut


def test_acks_all_loses_nothing_acknowledged_in_a_power_cut(tmp_path: Path) -> None:
    outcome = through_a_power_cut(tmp_path, build_shim(tmp_path), "all", 4, fsync_delay_ms=50)
    acknowledged, lost = outcome.acknowledged, outcome.lost
    assert len(acknowledged) > 100, f"too few records acknowledged to tell: {len(acknowledged)}"
    assert not lost, (
        f"{len(lost)} of {len(acknowledged)} acknowledged records lost or changed by the "
        f"power cut (AOF bytes dropped: {outcome.dropped}); first: {sorted(lost)[:5]}"
    )
