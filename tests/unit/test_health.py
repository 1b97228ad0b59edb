"""Health figures: a GAHP's counter file, the CE-wide sum podgahp reap publishes, and its two forms."""

from __future__ import annotations

import json
import os
import pwd
import stat
from pathlib import Path
from typing import Any, Dict

from gahp.health import STALE_S, Stats, classad_lines, gather, prometheus_text

NOW = 1_800_000_000.0
NOBODY = pwd.getpwnam("nobody")


def write(path: Path, data: Dict[str, Any], owner: int = NOBODY.pw_uid) -> None:
    path.write_text(json.dumps(data))
    os.chown(path, owner, -1)


def test_a_gahp_writes_its_counters_readable_by_the_cron(tmp_path: Path) -> None:
    clock = [NOW]
    stats = Stats(str(tmp_path), "ce-alice-k8s", lambda: (7, 1, 0.5), lambda: clock[0])
    stats.count("pods_created")
    stats.flush()
    data = json.loads((tmp_path / "PodgahpStats.ce-alice-k8s.json").read_text())
    assert (data["pods_created"], data["api_requests"], data["api_errors"], data["updated"]) == (1, 7, 1, NOW)
    clock[0] += 60
    stats.flush()  # nothing changed: not written again
    assert json.loads((tmp_path / "PodgahpStats.ce-alice-k8s.json").read_text())["updated"] == NOW
    stats.count("pods_created")
    stats.close()
    assert json.loads((tmp_path / "PodgahpStats.ce-alice-k8s.json").read_text())["pods_created"] == 2
    assert stat.S_IMODE((tmp_path / "PodgahpStats.ce-alice-k8s.json").stat().st_mode) == 0o644


def test_the_ce_sums_its_gahps_and_skips_stale_and_foreign_files(tmp_path: Path) -> None:
    write(tmp_path / "PodgahpStats.ce-nobody-k8s.json",
          {"api_requests": 10, "api_seconds": 2.0, "pods_created": 3, "updated": NOW - 10})
    write(tmp_path / "PodgahpStats.ce-root-k8s.json",
          {"api_requests": 5, "pods_created": 1, "updated": NOW - 10}, owner=0)
    write(tmp_path / "PodgahpStats.ce-alice-k8s.json",  # claims to be alice's, is nobody's
          {"api_requests": 10 ** 6, "updated": NOW})
    write(tmp_path / "PodgahpStats.ce-old-k8s.json", {"api_requests": 99, "updated": NOW - STALE_S - 1}, owner=0)
    write(tmp_path / "PodgahpStats.other-ce-nobody-k8s.json", {"api_requests": 99, "updated": NOW})
    write(tmp_path / "PodgahpBlackholes.ce-nobody-k8s.json", {"queues": {
        "cpu": {"closed_until": NOW + 60, "cause": 'image "x": ErrImagePull', "closed_count": 2},
        "gpu": {"closed_until": NOW - 60, "closed_count": 1}}})
    health = gather(str(tmp_path), "ce", "k8s", {"cpu": {"Running": 4, "Pending": 1}}, now=NOW)
    assert health.gahps == 2
    assert (health.counters["api_requests"], health.counters["pods_created"]) == (15, 4)
    assert health.blackholes["cpu"]["closed"] and not health.blackholes["gpu"]["closed"]

    lines = classad_lines(health)
    assert "GahpApiRequests = 15" in lines and "GahpPodsCreated = 4" in lines
    assert "GahpApiLatencyAvg = 0.1333" in lines
    assert "Queue_cpu_PodsRunning = 4" in lines and "Queue_cpu_BlackHole = true" in lines
    assert 'Queue_cpu_BlackHoleCause = "image \\"x\\": ErrImagePull"' in lines
    assert "Queue_gpu_BlackHole = false" in lines and "Queue_gpu_BlackHoleClosures = 1" in lines

    text = prometheus_text(health, "ce", [("podgahp_reap_pods", "pods seen", 5)])
    assert 'podgahp_gahp_api_requests_total{ce="ce"} 15' in text
    assert 'podgahp_pods{ce="ce",queue="cpu",phase="Running"} 4' in text
    assert 'podgahp_queue_blackhole{ce="ce",queue="cpu"} 1' in text
    assert 'podgahp_reap_pods{ce="ce"} 5' in text
    for line in text.splitlines():  # every line is a comment or "name{labels} value"
        assert line.startswith("# ") or (line.count("{") == 1 and float(line.rsplit(" ", 1)[1]) >= 0), line
