#!/usr/bin/env python3
"""Runs every `sh` code block of README.md and the book (docs/src/) against the default model,
so that no page shows a command that no longer works.

    python3 scripts/doc-snippets.py PAGODA    # PAGODA: the pagoda binary to put on PATH

Each block runs whole in `bash -euo pipefail`, in a scratch folder of its own, with PAGODA's
folder first on PATH. A block that cannot run here (it needs a release build, a GPU, the
network or a display, or it is CI itself) is preceded by a comment saying so and where it is
covered instead: `<!-- not run by CI: REASON -->`.
"""

import os
import pathlib
import re
import subprocess
import sys
import tempfile
import time

REPO = pathlib.Path(__file__).resolve().parent.parent
SKIP = re.compile(r"^<!-- not run by CI: .+ -->$")
TIMEOUT_S = 600


def blocks(path):
    """The (line number, code) of each `sh` block of a Markdown file that CI runs."""
    lines = path.read_text().splitlines()
    found, i = [], 0
    while i < len(lines):
        if lines[i].strip() == "```sh":
            start = i
            end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
            previous = next((lines[j] for j in range(start - 1, -1, -1) if lines[j].strip()), "")
            if not SKIP.match(previous.strip()):
                found.append((start + 1, "\n".join(lines[start + 1 : end])))
            i = end
        i += 1
    return found


def main():
    pagoda = pathlib.Path(sys.argv[1]).resolve()
    env = dict(os.environ, PATH=f"{pagoda.parent}:{os.environ['PATH']}", RUST_LOG="error")
    documents = [REPO / "README.md"] + sorted((REPO / "docs/src").glob("*.md"))
    passed, failed = 0, []
    for document in documents:
        for line, code in blocks(document):
            name = f"{document.relative_to(REPO)}:{line}"
            started = time.monotonic()
            with tempfile.TemporaryDirectory() as scratch:
                run = subprocess.run(
                    ["bash", "-euo", "pipefail", "-c", code],
                    cwd=scratch, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                    timeout=TIMEOUT_S,
                )
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
