#!/usr/bin/env python3
"""Runs every `sh` and `python` code block of README.md and the book (docs/src/) against the
default model, so that no page shows a command that no longer works.

    python3 scripts/doc-snippets.py PAGODA    # PAGODA: the pagoda binary to put on PATH

Each block runs whole (`bash -euo pipefail`, or `python3`), in a scratch folder of its own, with
PAGODA's folder first on PATH. Python blocks are OpenAI client calls: each runs while
`pagoda serve --port 8000 --served-model-name smollm2` serves the default model, as the pages
that show them say. A block that cannot run here (it needs a release build, a GPU, the network
or a display, or it is CI itself) is preceded by a comment saying so and where it is covered
instead: `<!-- not run by CI: REASON -->`.
"""

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time
import urllib.request

REPO = pathlib.Path(__file__).resolve().parent.parent
SKIP = re.compile(r"^<!-- not run by CI: .+ -->$")
TIMEOUT_S = 600


LANGUAGES = {"sh": ["bash", "-euo", "pipefail", "-c"], "python": ["python3", "-c"]}
SERVE = ["serve", "--port", "8000", "--served-model-name", "smollm2"]


def blocks(path):
    """The (line number, language, code) of each block of a Markdown file that CI runs."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        language = lines[i].strip().removeprefix("```")
        if lines[i].startswith("```") and language in LANGUAGES:
            start = i
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            if not SKIP.match(previous.strip()):
                found.append((start + 1, language, "\n".join(lines[start + 1 : end])))
            i = end
        i += 1
    return found


def start_server(pagoda, env):
    """`pagoda serve` on the default model, once it answers /health."""
    server = subprocess.Popen([pagoda, *SERVE], env=env, stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            urllib.request.urlopen("http://127.0.0.1:8000/health", timeout=5)
            return server
        except OSError:
            if server.poll() is not None:
                sys.exit(f"doc-snippets: pagoda {' '.join(SERVE)} exited ({server.returncode})")
            time.sleep(1)
    server.kill()
    sys.exit("doc-snippets: the server did not come up")


def main():
    pagoda = pathlib.Path(sys.argv[1]).resolve()
    env = dict(os.environ, PATH=f"{pagoda.parent}:{os.environ['PATH']}", RUST_LOG="error")
    documents = [REPO / "README.md"] + sorted((REPO / "docs/src").glob("*.md"))
    passed, failed = 0, []
    for document in documents:
        for line, language, code in blocks(document):
            server = start_server(pagoda, env) if language == "python" else None
            name = f"{document.relative_to(REPO)}:{line}"
            started = time.monotonic()
            with tempfile.TemporaryDirectory() as scratch:
                run = subprocess.run(
                    [*LANGUAGES[language], code],
                    cwd=scratch, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                    timeout=TIMEOUT_S,
                )
            if server is not None:
                server.terminate()
                server.wait()
            seconds = time.monotonic() - started
            if run.returncode == 0:
                passed += 1
                print(f"doc-snippets: {name} ok ({seconds:.0f} s)")
            else:
                failed.append(name)
                print(f"doc-snippets: {name} FAILED (exit {run.returncode})\n{code}\n"
                      f"--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}")
    print(f"doc-snippets: {passed} blocks ran, {len(failed)} failed {failed if failed else ''}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
