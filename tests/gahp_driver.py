"""Drive a real GAHP executable over pipes, the way condor_gridmanager does, for tests."""

from __future__ import annotations

import os
import queue
import subprocess
import sys
import threading
import time
from typing import Dict, List, Optional, Sequence

from gahp.program import protocol
from polling import wait_until


class GahpProcess:
    """A GAHP subprocess: write request lines (CRLF, as the gridmanager does), read reply lines."""

    def __init__(self, argv: Sequence[str], env: Optional[Dict[str, str]] = None,
                 cwd: Optional[str] = None) -> None:
        self.proc = subprocess.Popen(list(argv), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, env=env, cwd=cwd)
        self.lines: "queue.Queue[Optional[bytes]]" = queue.Queue()
        self.raw: List[bytes] = []  # every stdout line, for "every line parses" checks
        self.stderr = b""
        self._last_request = 10000  # ids of request(); tests numbering their own stay below
        self._pumps = [threading.Thread(target=self._pump, daemon=True),
                       threading.Thread(target=self._pump_err, daemon=True)]
        for pump in self._pumps:
            pump.start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.raw.append(line)
            self.lines.put(line)
        self.lines.put(None)

    def _pump_err(self) -> None:
        assert self.proc.stderr is not None
        self.stderr = self.proc.stderr.read()

    def send(self, line: str | bytes) -> None:
        data = line if isinstance(line, bytes) else line.encode()
        assert self.proc.stdin is not None
        self.proc.stdin.write(data + b"\r\n")
        self.proc.stdin.flush()

    def send_fields(self, *fields: str) -> None:
        self.send(" ".join(protocol.escape(f) for f in fields))

    def read_raw(self, timeout: float = 10.0) -> Optional[bytes]:
        return self.lines.get(timeout=timeout)

    def read(self, timeout: float = 10.0, skip_r: bool = True) -> List[str]:
        """The next reply line split into fields (``R`` lines skipped unless ``skip_r`` is False)."""
        deadline = time.monotonic() + timeout
        while True:
            line = self.lines.get(timeout=max(0.01, deadline - time.monotonic()))
            if line is None:
                raise EOFError("GAHP closed stdout")
            fields = protocol.split(line.decode("utf-8", "surrogateescape").rstrip("\n"))
            if skip_r and fields == ["R"]:
                continue
            return fields

    def command(self, *fields: str, timeout: float = 10.0) -> List[str]:
        self.send_fields(*fields)
        return self.read(timeout)

    def start(self, timeout: float = 10.0) -> List[str]:
        """Read the banner and do what the gridmanager does first; returns the COMMANDS reply."""
        banner = self.read_raw(timeout)
        assert banner is not None and banner.startswith(b"$") and len(banner) <= 150, banner
        return self.command("COMMANDS", timeout=timeout)

    def results(self, timeout: float = 10.0) -> Dict[str, List[str]]:
        """Send RESULTS once; the result lines by request id."""
        header = self.command("RESULTS", timeout=timeout)
        assert header[0] == "S" and len(header) == 2, header
        out = {}
        for _ in range(int(header[1])):
            fields = self.read(timeout)
            out[fields[0]] = fields[1:]
        return out

    def wait_results(self, request_ids: Sequence[str], timeout: float = 30.0,
                     poll: float = 0.05) -> Dict[str, List[str]]:
        """Poll RESULTS until every request in ``request_ids`` has its result."""
        wanted, got = set(request_ids), {}

        def collect() -> List[str]:
            got.update(self.results())
            return sorted(wanted - set(got))

        wait_until(collect, "a result for every request", timeout, poll, done=lambda missing: not missing)
        return got

    def request(self, command: str, *args: str, timeout: float = 30.0) -> List[str]:
        """Send one asynchronous request under an id of its own; its result (the fields after the id)."""
        self._last_request += 1
        request_id = str(self._last_request)
        assert self.command(command, request_id, *args, timeout=timeout) == ["S"]
        return self.wait_results([request_id], timeout)[request_id]

    def close(self, timeout: float = 10.0) -> int:
        if self.proc.stdin and not self.proc.stdin.closed:
            try:
                self.proc.stdin.close()
            except BrokenPipeError:
                pass
        try:
            return self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            for pump in self._pumps:
                pump.join(5)
            for stream in (self.proc.stdout, self.proc.stderr):
                if stream is not None:
                    stream.close()

    def __enter__(self) -> GahpProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def script(name: str) -> str:
    """Path of a console script installed next to the running interpreter."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: install podgahp (pip install -e .) first")
    return path


def gahp_env(tmp_path: str, **knobs: str) -> Dict[str, str]:
    """An environment whose HTCondor config is only ``_CONDOR_`` variables, logging into tmp_path."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("_CONDOR_")}
    env["CONDOR_CONFIG"] = "ONLY_ENV"
    env["_CONDOR_LOG"] = str(tmp_path)
    # No schedd here: jobs cannot be traced to a route (tests of that check turn it back on).
    env["_CONDOR_PODGAHP_ROUTED_ONLY"] = "False"
    for name, value in knobs.items():
        env[f"_CONDOR_{name}"] = value
    return env
