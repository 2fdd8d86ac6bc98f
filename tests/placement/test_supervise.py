"""`launch sglang --verify`'s supervision (measure/supervise.py) with a stand-in server: verified
once it answers, its exit status passed on, the deadline held, a server that dies said so."""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from xputune.launch.sglang import LaunchSpec
from xputune.measure.client import Endpoint
from xputune.measure.ports import server_port
from xputune.measure.supervise import run_verified
from xputune.measure.verify import server_endpoint

SERVER = textwrap.dedent(
    """
    import http.server, json, os, sys, threading, time
    port, answer_after, code = int(sys.argv[1]), float(sys.argv[2]), int(sys.argv[3])
    threading.Timer(answer_after + 3, lambda: os._exit(code)).start()  # ends on its own too
    time.sleep(answer_after)

    class H(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps({"version": "0"}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
            threading.Timer(0.3, lambda: os._exit(code)).start()

        def log_message(self, *args):
            pass

    http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
    """
)


def _spec(tmp_path: Path, port: int, answer_after: float, code: int) -> LaunchSpec:
    script = tmp_path / "server.py"
    script.write_text(SERVER)
    argv = [sys.executable, str(script), str(port), str(answer_after), str(code)]
    return LaunchSpec(argv, {}, [])


def test_verified_once_it_answers_and_its_status_passed_on(tmp_path: Path) -> None:
    port = server_port()
    seen: list[int] = []
    said: list[str] = []
    spec = _spec(tmp_path, port, 0.5, 3)
    endpoint = Endpoint.parse(f"http://127.0.0.1:{port}")
    code = run_verified(spec, endpoint, 60, seen.append, said.append)
    assert code == 3 and len(seen) == 1 and seen[0] > 0 and said == []


def test_past_the_deadline_it_runs_unverified(tmp_path: Path) -> None:
    port = server_port()
    seen: list[int] = []
    said: list[str] = []
    spec = _spec(tmp_path, port, 4, 0)
    endpoint = Endpoint.parse(f"http://127.0.0.1:{port}")
    code = run_verified(spec, endpoint, 1, seen.append, said.append)
    assert seen == [] and len(said) == 1 and "did not answer within 1 s" in said[0]
    assert code == 0  # it ended on its own, unverified


def test_a_server_that_dies_first_is_not_verified(tmp_path: Path) -> None:
    spec = LaunchSpec([sys.executable, "-c", "raise SystemExit(7)"], {}, [])
    seen: list[int] = []
    code = run_verified(spec, Endpoint.parse("http://127.0.0.1:1"), 30, seen.append, print)
    assert code == 7 and seen == []


def test_where_the_server_will_listen() -> None:
    argv = ("python", "-m", "sglang.launch_server", "--model-path", "m", "--host", "0.0.0.0",
            "--port", "31000")  # fmt: skip
    assert server_endpoint(argv).url == "http://127.0.0.1:31000"
    assert server_endpoint(("python", "-m", "sglang.launch_server")).url == (
        "http://127.0.0.1:30000"
    )
