"""Health figures: a GAHP's counter file, the CE-wide sum podgahp reap publishes, and its two forms."""

from __future__ import annotations

import json
import os
import pwd
import stat
import time
from pathlib import Path
from typing import Any, Dict, Iterable, List, Tuple

from gahp.rules.figures import COUNTERS, STALE_S, Stats, classad_lines, gather, prometheus_text, scope_of

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


def user_dir(shared: Path, user: str, owner: int) -> Path:
    """A user's own state directory (gahp.core.statedir) as its owner made it."""
    path = shared / f"Podgahp.{user}.abcdef"
    path.mkdir(mode=0o755)
    os.chown(path, owner, -1)
    return path


def test_the_ce_sums_its_gahps_and_skips_stale_and_foreign_files(tmp_path: Path) -> None:
    nobody = user_dir(tmp_path, "nobody", NOBODY.pw_uid)
    root = user_dir(tmp_path, "root", 0)
    write(nobody / "PodgahpStats.ce-nobody-k8s.json",
          {"api_requests": 10, "api_seconds": 2.0, "pods_created": 3, "updated": NOW - 10})
    write(root / "PodgahpStats.ce-root-k8s.json", {"api_requests": 5, "pods_created": 1, "updated": NOW - 10}, owner=0)
    write(nobody / "PodgahpStats.ce-alice-k8s.json",  # claims to be alice's, is in nobody's directory
          {"api_requests": 10 ** 6, "updated": NOW})
    old = user_dir(tmp_path, "old", 0)
    write(old / "PodgahpStats.ce-old-k8s.json", {"api_requests": 99, "updated": NOW - STALE_S - 1}, owner=0)
    write(nobody / "PodgahpStats.other-ce-nobody-k8s.json", {"api_requests": 99, "updated": NOW})
    write(tmp_path / "PodgahpStats.ce-nobody-k8s.json", {"api_requests": 99, "updated": NOW})  # not in a user's
    write(nobody / "PodgahpBlackholes.ce-nobody-k8s.json", {"queues": {
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


def _samples(families: Iterable[Any]) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    return {(s.name, tuple(sorted(s.labels.items()))): s.value for f in families for s in f.samples}


def test_metrics_parse_as_classic_text_and_as_openmetrics(tmp_path: Path) -> None:
    """Both formats read back by prometheus_client's own parsers, with the same samples, hostile
    label values included (a queue or CE name is the admin's text)."""
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
    from prometheus_client.parser import text_string_to_metric_families as parse_classic

    health = gather(str(tmp_path), 'ce "x"\\', "k8s", {"cpu": {"Running": 4}, 'q"\nz': {"Pending": 1}}, now=NOW)
    classic = prometheus_text(health, 'ce "x"\\', [("podgahp_reap_pods", "pods seen", 5)])
    openmetrics = prometheus_text(health, 'ce "x"\\', [("podgahp_reap_pods", "pods seen", 5)], openmetrics=True)
    assert openmetrics.endswith("# EOF\n") and "# EOF" not in classic
    parsed_classic = _samples(parse_classic(classic))
    parsed_openmetrics = _samples(parse_openmetrics(openmetrics))
    assert parsed_classic == parsed_openmetrics
    ce = ("ce", 'ce "x"\\')
    assert parsed_classic[("podgahp_gahp_api_requests_total", (ce,))] == 0
    assert parsed_classic[("podgahp_pods", (ce, ("phase", "Running"), ("queue", "cpu")))] == 4
    assert parsed_classic[("podgahp_pods", (ce, ("phase", "Pending"), ("queue", 'q"\nz')))] == 1
    types = {f.name: f.type for f in parse_openmetrics(openmetrics)}
    assert types["podgahp_gahp_api_requests"] == "counter" and types["podgahp_pods"] == "gauge"


def test_every_configured_queue_and_series_has_a_sample(tmp_path: Path) -> None:
    import datetime

    from gahp.backends.base import Census, RemoteJob
    from gahp.core.config import Knobs
    from gahp.ce.health import census_health
    from prometheus_client.parser import text_string_to_metric_families as parse_classic

    knobs = Knobs({"PODGAHP_STATE_DIR": str(tmp_path), "LOG": str(tmp_path)})
    now = datetime.datetime.now(datetime.timezone.utc)
    running = [RemoteJob(job_id=f"k8s/ns/p{n}", name=f"p{n}", queue="cpu", state="Running", health="Running",
                         alive=True, sandbox="", created=now, listed_at=now) for n in range(2)]
    health = census_health(knobs, [Census("k8s", running, queues=("cpu", "gpu", "idle"))], {"k8s": "ce"})
    samples = _samples(parse_classic(prometheus_text(health, "ce")))
    for queue in ("cpu", "gpu", "idle"):
        for phase in ("Pending", "Running", "Succeeded", "Failed"):
            expected = 2 if (queue, phase) == ("cpu", "Running") else 0
            assert samples[("podgahp_pods", (("ce", "ce"), ("phase", phase), ("queue", queue)))] == expected
        assert samples[("podgahp_queue_blackhole", (("ce", "ce"), ("queue", queue)))] == 0
    names = {name for name, _ in samples}
    assert {name for _, _, name, _ in COUNTERS} <= names and "podgahp_gahps" in names


def test_metrics_endpoint_answers_each_scrape_in_the_format_asked() -> None:
    import requests
    from prometheus_client.openmetrics.parser import text_string_to_metric_families as parse_openmetrics
    from prometheus_client.parser import text_string_to_metric_families as parse_classic

    from gahp.rules.figures import CeHealth, metric_families, serve_metrics

    scrapes: List[int] = []

    def families() -> List[Any]:
        scrapes.append(1)
        return metric_families(CeHealth(pods={"cpu": {"Running": len(scrapes)}}), "ce")

    server = serve_metrics(families, "127.0.0.1", 0)
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/metrics"
        plain = requests.get(url, timeout=10)
        assert plain.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        first = _samples(parse_classic(plain.text))
        assert first[("podgahp_pods", (("ce", "ce"), ("phase", "Running"), ("queue", "cpu")))] == 1
        om = requests.get(url, headers={"Accept": "application/openmetrics-text; version=1.0.0"}, timeout=10)
        assert om.headers["Content-Type"].startswith("application/openmetrics-text")
        second = _samples(parse_openmetrics(om.text))
        assert second[("podgahp_pods", (("ce", "ce"), ("phase", "Running"), ("queue", "cpu")))] == 2
    finally:
        server.shutdown()
        server.server_close()


def test_names_pre_created_by_another_user_neither_block_a_save_nor_count() -> None:
    """mallory (daemon) makes, in the shared state directory, every name alice's (nobody's) GAHP used to
    write, and a directory named as alice's own with a forged figure in it. alice's GAHP still saves
    its figures and black-hole state, and podgahp reap counts alice's figures alone."""
    from gahp.rules.blackhole import Guard, GuardSettings
    from gahp.core.config import Knobs
    from gahp.core.statedir import own_directory

    from as_user import run_as, shared_directory

    with shared_directory() as shared:
        def mallory() -> None:
            for name in ("PodgahpStats.ce-nobody-k8s.json", "PodgahpBlackholes.ce-nobody-k8s.json"):
                (shared / name).write_text(json.dumps({"api_requests": 10 ** 6, "updated": time.time()}))
            os.mkdir(shared / "Podgahp.nobody.000000", 0o755)
            (shared / "Podgahp.nobody.000000" / "PodgahpStats.ce-nobody-k8s.json").write_text(
                json.dumps({"api_requests": 10 ** 6, "pods_created": 10 ** 6, "updated": time.time()}))

        def alice() -> None:
            own = own_directory(str(shared), "nobody")
            stats = Stats(own, scope_of("ce", "nobody", "k8s"), lambda: (7, 0, 0.5))
            stats.count("pods_created")
            stats.flush()
            guard = Guard(GuardSettings.from_knobs(Knobs({"PODGAHP_BLACKHOLE_FAILURES": "1",
                                                           "PODGAHP_STATE_DIR": str(shared)})),
                          scope_of("ce", "nobody", "k8s"), directory=own)
            guard.outcome("cpu", True, "ErrImagePull")
            assert Guard(guard.settings, scope_of("ce", "nobody", "k8s"), directory=own).health()[0].closed

        run_as("daemon", mallory)
        run_as("nobody", alice)
        health = gather(str(shared), "ce", "k8s", {}, now=time.time())
    assert health.gahps == 1
    assert (health.counters["api_requests"], health.counters["pods_created"]) == (7, 1)
    assert health.blackholes["cpu"]["closed"] and health.blackholes["cpu"]["cause"] == "ErrImagePull"


def test_a_users_own_forged_state_stays_within_what_a_gahp_can_claim(tmp_path: Path) -> None:
    """A user's own files make only that user's figures, and only as far as a GAHP could: a closure
    counts until the longest back-off from now, absurd closure counts not at all, and nothing of the
    file's text reaches the output unescaped (ESC, BEL, CR, newlines, bidirectional overrides)."""
    nobody = user_dir(tmp_path, "nobody", NOBODY.pw_uid)
    write(nobody / "PodgahpBlackholes.ce-nobody-k8s.json", {"queues": {
        "cpu": {"closed_until": 2_845_000_000, "closed_count": 10 ** 9 - 1,
                "cause": "\x1b]0;owned\x07\x1b[2J\rfake\nQueue_gpu_BlackHole = true\u202e"},
        "q\x1b[31m": {"closed_until": NOW + 60, "closed_count": 1, "cause": "x"}}})
    health = gather(str(tmp_path), "ce", "k8s", {}, now=NOW, max_closed_s=3600)
    assert health.blackholes["cpu"]["until"] == NOW + 3600 and health.blackholes["cpu"]["closures"] == 0
    lines = classad_lines(health)
    text = "\n".join(lines) + prometheus_text(health, "ce")
    assert all(c.isprintable() or c == "\n" for c in text), [line for line in lines if not line.isprintable()]
    assert len([line for line in lines if line.startswith("Queue_gpu_")]) == 0  # no line forged
    assert f"Queue_cpu_BlackHoleUntil = {int(NOW + 3600)}" in lines
