"""100,000 seeded random request lines into the real GAHP: exactly one well-formed reply per request
line, no traceback text anywhere, and memory under a stated bound."""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Callable, List

import pytest

from gahp.program import protocol
from gahp_driver import GahpProcess

Start = Callable[..., GahpProcess]
LINES = 100_000
#: Peak resident memory allowed for the GAHP (it needs ~50 MB): the queue and every buffer are bounded.
MEMORY_BOUND_KB = 200 * 1024


def fuzz_line(rng: random.Random, n: int) -> bytes:
    kind = rng.randrange(10)
    rid = str(rng.choice([n + 2, 0, -1, 10 ** 12, n + 2]))
    if kind == 0:
        return f"BLAH_JOB_STATUS {rid} memory/s{n}/1/0".encode()
    if kind == 1:
        return f"BLAH_JOB_CANCEL {rid} k8s/../{'x' * rng.randrange(300)}".encode()
    if kind == 2:  # wrong argument counts
        return " ".join(["BLAH_JOB_STATUS"] + [rid] * rng.randrange(4)).encode()
    if kind == 3:  # random bytes, newlines escaped so that they stay in the line
        raw = bytes(rng.randrange(256) for _ in range(rng.randrange(200)))
        return raw.replace(b"\n", b"\\\n")
    if kind == 4:
        return b"BLAH_JOB_SUBMIT " + rid.encode() + b" [ Cmd = \"\xff\xfe\"; A = " + b"+".join([b"1"] * rng.randrange(6000)) + b" ]"
    if kind == 5:
        return rng.choice([b"", b" ", b"\\", b"NULL", b"BLAH_PING", "BLAH_PING 3 k8s \u00e9".encode(), b"\r"])
    if kind == 6:  # an escaped newline inside a field
        return f"BLAH_JOB_STATUS {rid} memory/a\\\nb/1/0".encode()
    if kind == 7:
        return b"X" * rng.choice([10, 1000, 70_000])
    if kind == 8:
        return rng.choice([b"ASYNC_MODE_OFF", b"BLAH_JOB_REFRESH_PROXY 5 memory/a/1/0 /dev/zero", b"UNKNOWN"])
    return f"BLAH_JOB_STATUS {rid} {'a ' * rng.randrange(5)}".encode()


def replies_expected(line: bytes) -> int:
    """Request lines the server sees in ``line`` (escaped newlines do not end a request)."""
    count, start = 1, 0
    while True:
        at = line.find(b"\n", start)
        if at < 0:
            return count
        if not protocol.newline_escaped(line[:at]):
            count += 1
        start = at + 1


@pytest.mark.timeout(240)
def test_one_reply_per_line_no_tracebacks_bounded_memory(start_gahp: Start, tmp_path: Path) -> None:
    rng = random.Random(9)
    lines = [fuzz_line(rng, n) for n in range(LINES)]
    expected = sum(replies_expected(line) for line in lines)
    gahp = start_gahp()
    gahp.start()
    writer = threading.Thread(target=lambda: [gahp.send(line) for line in lines], daemon=True)
    writer.start()
    replies: List[List[str]] = []
    while len(replies) < expected:
        replies.append(gahp.read(timeout=60, skip_r=False))
    writer.join(60)
    status = Path(f"/proc/{gahp.proc.pid}/status").read_text()
    peak_kb = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:")))
    gahp.send("RESULTS")
    results_header = gahp.read(timeout=60)
    gahp.close()
    assert all(r[0] in ("S", "E", "F") for r in replies), {r[0] for r in replies}
    text = b"".join(gahp.raw).decode("utf-8", "replace")
    assert "Traceback" not in text and "internal error" not in text
    assert results_header[0] == "S"
    print(f"{LINES} lines, {expected} replies, peak {peak_kb // 1024} MB")
    assert peak_kb < MEMORY_BOUND_KB
