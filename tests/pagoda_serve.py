"""Runs `pagoda serve` for the Python client tests: on a free loopback port, as `smollm2`,
healthy before the test talks to it, stopped after."""

import contextlib
import socket
import subprocess
import time
import urllib.request


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(base: str, server: subprocess.Popen, timeout_s: float = 300.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise SystemExit(f"pagoda serve exited with {server.returncode}")
        try:
            with urllib.request.urlopen(f"{base}/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise SystemExit("pagoda serve did not become healthy")


@contextlib.contextmanager
def serving(argv: list[str], flags: tuple[str, ...] = ()):
    """`pagoda serve` as `smollm2` on a free loopback port (argv: PAGODA_BINARY [MODEL]) with the
    extra `flags`, healthy; yields its base URL and stops the server after."""
    port = free_port()
    command = [argv[1], "serve", "--port", str(port), "--served-model-name", "smollm2", "--max-model-len", "1024"]
    if len(argv) > 2:
        command += ["--model", argv[2]]
    server = subprocess.Popen(command + list(flags))
    try:
        base = f"http://127.0.0.1:{port}"
        wait_healthy(base, server)
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)
