#!/usr/bin/env bash
# Prints the path of mdBook, the book's builder, installing it once from crates.io into the
# pagoda cache (pinned, without its file watcher and web server: a few minutes on two cores).
set -euo pipefail
version=0.5.4
cache="${PAGODA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/pagoda}"
root="$cache/tools/mdbook-$version"
if [ ! -x "$root/bin/mdbook" ]; then
    echo "mdbook: installing mdbook $version into $root (a few minutes, once)" >&2
    tmp=$(mktemp -d)
    trap 'rm -rf "$tmp"' EXIT
    cargo install mdbook --locked --version "$version" --no-default-features --features search \
        --root "$root" --target-dir "$tmp" --quiet >&2
fi
echo "$root/bin/mdbook"
