#!/usr/bin/env python3
"""What `huggingface_hub`'s snapshot_download writes for the same server and files as pagoda:
`hub_snapshot.py ENDPOINT CACHE_DIR REPO_ID FILE...` downloads FILE... of REPO_ID (main) into
CACHE_DIR from the Hub at ENDPOINT (tests/hub_download.rs starts it and compares the trees)."""
import os
import sys

endpoint, cache_dir, repo_id, *files = sys.argv[1:]
os.environ["HF_ENDPOINT"] = endpoint
os.environ["HF_HUB_DISABLE_TELEMETRY"] = "1"
os.environ["HF_HUB_DISABLE_PROGRESS_BARS"] = "1"
from huggingface_hub import snapshot_download  # noqa: E402 (reads the variables on import)

print(snapshot_download(repo_id, cache_dir=cache_dir, allow_patterns=files, token=False))
