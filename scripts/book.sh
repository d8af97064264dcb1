#!/usr/bin/env bash
# Builds the book (docs/) into docs/book/: renders the visualizer's screenshot with the pagoda
# binary into docs/src/images/viz.png, then runs mdBook, failing on any warning it prints.
#
#   scripts/book.sh [PAGODA]    # PAGODA: the binary (default: the debug build)
set -euo pipefail
cd "$(dirname "$0")/.."
pagoda="${1:-${CARGO_TARGET_DIR:-target}/debug/pagoda}"
mdbook="$(scripts/mdbook.sh)"

# The frame the visualizer chapter shows: the simulated model under memory pressure, when
# preempted requests wait beside running ones (no display needed: wgpu renders it offscreen).
mkdir -p docs/src/images
RUST_LOG=error "$pagoda" viz --executor sim --workload memory-pressure --step 60 --snapshot docs/src/images/viz.png

log=$(mktemp)
trap 'rm -f "$log"' EXIT
"$mdbook" build docs 2>&1 | tee "$log"
if grep -E 'WARN|ERROR' "$log" >/dev/null; then
    echo "book: mdbook warned (above)" >&2
    exit 1
fi
echo "book: docs/book/index.html"
