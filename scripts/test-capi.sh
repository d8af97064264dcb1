#!/usr/bin/env bash
# The C ABI's checks: the header is current, the library builds, and the C/C++ examples and
# misuse tests, compiled with the system compiler against include/pagoda.h, pass under
# AddressSanitizer (leaks included). Called by scripts/test.sh; needs PAGODA_MODEL_GGUF or
# the cached default model, and PAGODA_FAMILIES_DIR with the tiny adapters
# (scripts/tiny-families.py, scripts/tiny-adapters.py) for the LoRA test.
set -euo pipefail
cd "$(dirname "$0")/.."

target="${CARGO_TARGET_DIR:-target}"
# The library under the C ABI without default features (no server, visualizer, tokio or
# winit), as `-p pagoda-capi` builds it for hosts: it and the C ABI pass clippy.
cargo clippy -p pagoda-capi --all-targets -- -D warnings
# The sanitizer runs link the C ABI built as `cargo test` builds the library (the default
# features, the test fixtures, and through `--all-targets` the dependencies' features as the
# dev-dependencies unify them), so they reuse its builds: the lean feature set's dependencies,
# compiled again, took 4.5 minutes on two cores. The C ABI's code is the same either way.
workspace=(--workspace --features pagoda/testing)
cargo build "${workspace[@]}" --all-targets
cargo test "${workspace[@]}" --test header
lib="$(realpath "$target/debug")"
out="$target/capi"
mkdir -p "$out"

sanitize=(-fsanitize=address,undefined -fno-omit-frame-pointer -g)
link=(-I include -L "$lib" -lpagoda_c -Wl,-rpath,"$lib")
cc -std=c11 -Wall -Wextra -Werror "${sanitize[@]}" examples/c/chat.c -o "$out/chat" "${link[@]}"
c++ -std=c++17 -Wall -Wextra -Werror "${sanitize[@]}" examples/c/batch.cpp -o "$out/batch" "${link[@]}"
cc -std=c11 -Wall -Wextra -Werror "${sanitize[@]}" capi/tests/c/misuse.c -o "$out/misuse" "${link[@]}"
cc -std=c11 -Wall -Wextra -Werror -pthread "${sanitize[@]}" capi/tests/c/threads.c -o "$out/threads" "${link[@]}"
cc -std=c11 -Wall -Wextra -Werror "${sanitize[@]}" capi/tests/c/lora.c -o "$out/lora" "${link[@]}"
# The static library links too (with the system libraries Rust's std needs).
cc -std=c11 -Wall -Werror examples/c/chat.c -o "$out/chat-static" -I include "$lib/libpagoda_c.a" -lm -ldl -lpthread

# LeakSanitizer runs with no suppressions: any block still allocated at exit fails the run.
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=0"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1"

# The Vulkan drivers stay loaded until exit. A driver keeps some allocations for the life of
# the process in its globals (Mesa's, for one, the CPU's L3 cache map on AMD Zen), and the
# Vulkan loader unloads it when the engine closes: its globals vanish before LeakSanitizer
# looks, and those blocks would read as leaks of an unknown module. Preloaded (after the
# sanitizer runtime, which must come first), they stay reachable, and only leaks count.
drivers=()
for manifest in /usr/share/vulkan/icd.d/*.json /etc/vulkan/icd.d/*.json; do
    [ -e "$manifest" ] || continue
    drivers+=("$(sed -n 's/.*"library_path": *"\([^"]*\)".*/\1/p' "$manifest")")
done
sanitized() {
    env LD_PRELOAD="$(cc -print-file-name=libasan.so) ${drivers[*]}" "$@"
}

sanitized "$out/misuse"
sanitized "$out/threads"

# The C example streams the same greedy answer as `pagoda generate --temperature 0`.
question="What is the capital of France?"
expected="$("$target/debug/pagoda" generate --chat --temperature 0 --max-tokens 24 "$question" 2>/dev/null)"
streamed="$(sanitized "$out/chat" "$question" 24)"
if [ "$streamed" != "$expected" ]; then
    printf 'test-capi: chat.c answered\n%s\nbut pagoda generate answered\n%s\n' "$streamed" "$expected" >&2
    exit 1
fi
echo "test-capi: chat.c answer equals pagoda generate: $streamed"

# The C++ example's batched greedy completions equal each prompt's `pagoda generate`.
prompts=("The capital of France is" "Water boils at" "The largest planet is")
batched="$(sanitized "$out/batch" "${prompts[@]}")"
for prompt in "${prompts[@]}"; do
    text="$("$target/debug/pagoda" generate --temperature 0 --max-tokens 12 "$prompt" 2>/dev/null)"
    if ! grep -qxF "$prompt|$text [length, 12 tokens]" <<<"$batched" \
        && ! grep -qF "$prompt|$text [stop," <<<"$batched"; then
        printf 'test-capi: batch.cpp gave\n%s\nexpected for "%s": %s\n' "$batched" "$prompt" "$text" >&2
        exit 1
    fi
done
echo "test-capi: batch.cpp completions equal pagoda generate"

# A LoRA adapter through the C ABI (tiny Llama and its "sql" adapter): its greedy completion
# differs from the base model's (lora.c checks) and equals `pagoda generate --lora`'s.
family="${PAGODA_FAMILIES_DIR:?PAGODA_FAMILIES_DIR names the tiny family models}/llama"
prompt="The capital of France is"
from_c="$(sanitized "$out/lora" "$family" "$family/lora/sql" "$family/llama.f32.gguf" "$prompt" 8)"
from_rust="$("$target/debug/pagoda" generate --model "$family" --seed 1 --num-gpu-blocks 64 \
    --lora "sql=$family/lora/sql" --max-lora-rank 8 --temperature 0 --max-tokens 8 --ignore-eos \
    --json "$prompt" 2>/dev/null | python3 -c 'import json, sys; print(*json.load(sys.stdin)["token_ids"])')"
if [ "$(sed -n 's/^lora //p' <<<"$from_c")" != "$from_rust" ]; then
    printf 'test-capi: lora.c gave\n%s\nbut pagoda generate --lora gave\n%s\n' "$from_c" "$from_rust" >&2
    exit 1
fi
echo "test-capi: lora.c's adapter completion equals pagoda generate --lora: $from_rust"
