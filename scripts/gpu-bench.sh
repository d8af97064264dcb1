#!/usr/bin/env bash
# The GPU benchmark: decode at batch 1, 8, 32 and 128 (128-token prompts, 32 tokens each), prefill
# of 512 and 2048 tokens, and the kernel bench, on random-weight models of real shapes (the
# default model's, Llama 3.2 1B's and Llama 2 7B's; Q4_K, Q8_0, F16) that the binary writes where
# it runs. Prints tok/s, host time per step (median), dispatches per step, and the weights' GB/s
# as a share of the adapter's memory bandwidth, and llama.cpp's figures on the same files beside
# them.
#
#   scripts/gpu-bench.sh build                # here: release binaries into target/gpu-bench/
#   scripts/gpu-bench.sh pack                 # here: build, packed into target/gpu-bench.tar.xz
#   scripts/gpu-bench.sh run BANDWIDTH_GB_S   # on the GPU machine (needs no cargo, no network)
#
# `run` builds first (without the baseline) when target/gpu-bench/ is missing. Before the models
# it runs the kernel tests there (`kernels_reference`: every kernel against its CPU reference and
# the bitwise invariance tests, with the adapter's own kernel choices; KERNEL_TESTS=0 skips them):
# on an H200 they found NVIDIA's cos and sin too coarse for RoPE at far positions. The GPU machine
# gets target/gpu-bench.tar.xz with the checkout (about 20 MB, 84 MB unpacked: the stripped
# binaries, llama.cpp's baseline, and the Debian packages of the Vulkan loader and of libglvnd,
# which NVIDIA's driver needs); `run` unpacks it where it is newer than target/gpu-bench/, and
# where those libraries are missing, the packages into target/gpu-bench/sysroot, on
# LD_LIBRARY_PATH. Models go to $PAGODA_BENCH_DIR (default /tmp/pagoda-gpu-bench).
#
# Narrow a run with MODELS="llama-3.2-1b:q4_k ...", DECODE_BATCHES=1,8 and PREFILL_LENS="512";
# KERNEL_BENCH=0 skips the kernel bench. The prefills of one model (TILE_SWEEP, default
# llama-3.2-1b:q4_k; empty for none) also run with each GEMM tile forced (PAGODA_GEMM_ROWS=8, 16,
# 32: rows "prefill LEN tROWS"), to see whether the adapter's choice is the fastest. One model
# (PROFILE, default llama-3.2-1b:q4_k; empty for none) also runs 16-token prompts and 64 tokens
# out at batch 1 and 32 with --profile-kernels: each kernel variant's share of the device time (no
# table where the adapter has no timestamp queries). One model (AB_MODEL, default
# llama-3.2-1b:q4_k; empty for none) also decodes at the batches AB_BATCHES (1,32) once with each
# setting of AB_SETTINGS (rows "decode B=N SETTING"; by default each step in one command buffer
# instead of chunks, per-query attention, norms apart and fused everywhere, GEMM tiles of 8 and 32
# rows, subgroups masked: the GEMV's and split-KV's trees wholly in workgroup memory), against the
# adapter's own choices.
#
# The baseline: `build` also builds llama.cpp's `llama-batched-bench` for Vulkan
# (scripts/llama-cpp-vulkan.sh: about 7 minutes the first time, then cached; BASELINE=0 skips it),
# and `run` ends each model's rows with llama.cpp's on the same file, on one GPU (LLAMA_DEVICE,
# default Vulkan0): decode at the same batches ("llama.cpp B=N": tok/s summed over the batch, ITL
# a step's time, TTFT the time to prefill every prompt) and prefills ("llama.cpp ppLEN"), each
# list run twice so that the second, without pipeline compilation, counts. llama.cpp skips CPU
# adapters unless GGML_VK_VISIBLE_DEVICES names one.
#
# Models run in the order given, each shape's Q4_K first; once BUDGET_S seconds (default 400) have
# passed after the kernel tests, the rest is skipped and a run in progress is cut. The kernel
# tests stop at KERNEL_TESTS_S (150) and the kernel bench at KERNEL_BENCH_S (120), so the whole
# run ends within about 11 minutes and, with KERNEL_TESTS=0, within 8. On an H200 the whole
# default set takes longer (batched prefill of the 7B shape is slow): the budget keeps what came
# first.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=target/gpu-bench

# The executable of the cargo target `$1 --$2 $3` (bench or test) that the build names.
executable() {
    cargo "$1" "--$2" "$3" --no-run --message-format=json 2>/dev/null |
        grep "\"kind\":\[\"$2\"\]" | sed -n 's/.*"executable":"\([^"]*\)".*/\1/p'
}

# Copies binary $1 to $2, without its symbols where `strip` is at hand.
install_bin() {
    if command -v strip >/dev/null; then
        strip -o "$2" "$1"
    else
        cp "$1" "$2"
    fi
}

build() {
    cargo build --release --bin pagoda
    mkdir -p "$OUT"
    install_bin target/release/pagoda "$OUT/pagoda"
    local bench tests
    bench=$(executable bench bench kernels)
    tests=$(executable test test kernels_reference)
    if [[ -z $bench || -z $tests ]]; then
        echo "gpu-bench: the kernel bench or kernels_reference did not build (cargo bench --no-run, cargo test --no-run say why)" >&2
        exit 1
    fi
    install_bin "$bench" "$OUT/kernels-bench"
    install_bin "$tests" "$OUT/kernels-reference"
    if [[ ${BASELINE:-1} != 0 ]]; then
        local baseline
        if baseline=$(scripts/llama-cpp-vulkan.sh); then
            cp "$baseline" "$OUT/llama-batched-bench"
        else
            echo "gpu-bench: no llama.cpp baseline (scripts/llama-cpp-vulkan.sh says why above)" >&2
        fi
    fi
    ls -la "$OUT"
}

# The settings AB_MODEL decodes with besides the adapter's own choices.
AB_DEFAULT="PAGODA_SUBMIT=whole PAGODA_ATTENTION=per-query PAGODA_NORM=separate PAGODA_NORM=fused
    PAGODA_GEMM_ROWS=8 PAGODA_GEMM_ROWS=32 PAGODA_DISABLE_FEATURES=subgroup"

# The libraries a GPU machine may lack: the Vulkan loader, and libglvnd's, which NVIDIA's driver
# (libGLX_nvidia) needs.
LIBRARIES="libvulkan1 libglvnd0 libgl1 libglx0 libegl1 libopengl0 libgles2"

# build, with the Debian packages of $LIBRARIES, packed into $OUT.tar.xz: what a GPU machine
# needs beside the checkout.
pack() {
    build
    rm -rf "$OUT/debs"
    mkdir -p "$OUT/debs"
    # shellcheck disable=SC2086
    (cd "$OUT/debs" && apt-get -o APT::Sandbox::User=root download $LIBRARIES >/dev/null)
    tar -C "$(dirname "$OUT")" -cJf "$OUT.tar.xz" "$(basename "$OUT")"
    ls -la "$OUT.tar.xz"
}

# Unpacks $OUT.tar.xz where it is newer than $OUT, and where the Vulkan loader or libglvnd is
# missing, unpacks its Debian packages into $OUT/sysroot and puts their libraries on
# LD_LIBRARY_PATH (no root needed, nothing of the system's replaced).
unpack() {
    if [[ -f $OUT.tar.xz && $OUT.tar.xz -nt $OUT/pagoda ]]; then
        tar -C "$(dirname "$OUT")" -xmJf "$OUT.tar.xz"
    fi
    local found
    found=$(PATH=$PATH:/sbin:/usr/sbin ldconfig -p)
    if grep -q "libvulkan.so.1 " <<<"$found" && grep -q "libGLX.so.0 " <<<"$found"; then
        return
    fi
    if ! compgen -G "$OUT/debs/*.deb" >/dev/null; then
        echo "warning: no Vulkan loader or libglvnd here, and no packages of them in $OUT/debs" >&2
        return
    fi
    local deb
    for deb in "$OUT"/debs/*.deb; do
        dpkg -x "$deb" "$OUT/sysroot"
    done
    local lib
    for lib in "$PWD/$OUT"/sysroot/usr/lib/*-linux-gnu; do
        export LD_LIBRARY_PATH=$lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
    done
}

# Seconds left of the models' time budget (it starts after the kernel tests).
left() {
    echo $((deadline - SECONDS))
}

# The limit for `timeout` on the next run: what is left of the budget, at least a second.
cap() {
    local l
    l=$(left)
    echo $((l > 1 ? l : 1))
}

# The value of number field $1 of the one-line JSON report $2 (pagoda's or llama.cpp's).
field() {
    sed -E "s/.*\"$1\": *([-0-9.eE+]+).*/\1/" <<<"$2"
}

# Prints a decode row labelled $1 at batch $2 with ITL $3 and TTFT $4 (seconds), host µs $5 and
# dispatches $6 a step ("-" where unknown), for the model of the caller's shape, dtype, gb and
# bandwidth.
decode_line() {
    awk -v m="$shape" -v d="$dtype" -v gb="$gb" -v label="$1" -v b="$2" -v itl="$3" -v ttft="$4" \
        -v host="$5" -v disp="$6" -v bw="$bandwidth" 'BEGIN {
            gbs = gb / itl
            printf "%-14s %-5s %7s  %-30s %9.1f %9.2f %9.1f %8s %8s %6.0f  (%.0f%% of %s GB/s)\n",
                m, d, gb, label, b / itl, itl * 1e3, ttft * 1e3, whole(host), whole(disp), gbs,
                100 * gbs / bw, bw
        }
        function whole(v) { return v == "-" ? v : sprintf("%.0f", v) }'
}

# Prints a prefill row labelled $1 of $2 tokens with TTFT $3 (seconds), host µs $4 and
# dispatches $5 a step ("-" where unknown), for the model of the caller's shape, dtype and gb.
prefill_line() {
    awk -v m="$shape" -v d="$dtype" -v gb="$gb" -v label="$1" -v len="$2" -v ttft="$3" -v host="$4" \
        -v disp="$5" 'BEGIN {
            printf "%-14s %-5s %7s  %-30s %9.1f %9s %9.1f %8s %8s\n",
                m, d, gb, label, len / ttft, "-", ttft * 1e3, whole(host), whole(disp)
        }
        function whole(v) { return v == "-" ? v : sprintf("%.0f", v) }'
}

# Prints the decode row of pagoda's bench report $2 (JSON), labelled "decode B=N$1".
decode_row() {
    local b
    b=$(field num_requests "$2")
    decode_line "decode B=$b$1" "$b" "$(field itl_mean_s "$2")" "$(field ttft_p50_s "$2")" \
        "$(field host_us_p50 "$2")" "$(field dispatches_per_step "$2")"
}

# Prints the last report of llama-batched-bench's JSON lines $2 whose field $1 is $3.
last_report() {
    grep "\"$1\": $3," <<<"$2" | tail -1 || true
}

# Prints llama.cpp's rows (llama-batched-bench on the same file, on one GPU: $LLAMA_DEVICE,
# default Vulkan0) for the model of the caller's shape, dtype, gb and bandwidth: decode at each of
# the caller's batches (128-token prompts, 32 tokens each; tok/s summed over the batch, ITL a
# step's time, TTFT the prefill of every prompt) and prefill of each of its prompt lengths
# alone. Each list runs twice and the second pass counts: llama.cpp compiles a pipeline the first
# time a shape needs it.
baseline_rows() {
    local file=$1 bench=("$OUT/llama-batched-bench" -m "$1" -ngl 99 -dev "${LLAMA_DEVICE:-Vulkan0}" -b 2048
        -ub 512 --output-format jsonl)
    local counts lens widest longest reports b len report
    IFS=, read -ra counts <<<"$batches"
    read -ra lens <<<"$prefill_lens"
    widest=$(printf '%s\n' "${counts[@]}" | sort -n | tail -1)
    longest=$(printf '%s\n' "${lens[@]}" | sort -n | tail -1)
    reports=$(timeout "$(cap)" "${bench[@]}" -c $((widest * 160)) -npp 128 -ntg 32 \
        -npl "$batches,$batches" 2>/dev/null) || true
    for b in "${counts[@]}"; do
        report=$(last_report pl "$reports" "$b")
        if [[ -z $report ]]; then
            echo "$shape $dtype llama.cpp decode B=$b: cut at the ${budget}s budget, or failed"
            continue
        fi
        decode_line "llama.cpp B=$b" "$b" "$(awk -v t="$(field t_tg "$report")" 'BEGIN { print t / 32 }')" \
            "$(field t_pp "$report")" - -
    done
    ((${#lens[@]})) || return 0
    local npp
    npp=$(IFS=,; echo "${lens[*]},${lens[*]}")
    reports=$(timeout "$(cap)" "${bench[@]}" -c $((longest + 1)) -npp "$npp" -ntg 1 -npl 1 2>/dev/null) || true
    for len in "${lens[@]}"; do
        report=$(last_report pp "$reports" "$len")
        if [[ -z $report ]]; then
            echo "$shape $dtype llama.cpp prefill $len: cut at the ${budget}s budget, or failed"
            continue
        fi
        prefill_line "llama.cpp pp$len" "$len" "$(field t_pp "$report")" - -
    done
}

run() {
    local bandwidth=$1
    unpack
    if [[ ! -x $OUT/pagoda ]]; then
        BASELINE=0 build
    fi
    local bin=$OUT/pagoda dir=${PAGODA_BENCH_DIR:-/tmp/pagoda-gpu-bench}
    local models=${MODELS:-"llama-3.2-1b:q4_k smollm2-135m:q8_0 llama-2-7b:q4_k llama-3.2-1b:f16 llama-2-7b:q8_0 llama-3.2-1b:q8_0 smollm2-135m:f16 llama-2-7b:f16"}
    local batches=${DECODE_BATCHES:-1,8,32,128} prefill_lens=${PREFILL_LENS:-"512 2048"}
    mkdir -p "$dir"
    "$bin" info >"$dir/info.txt"
    head -12 "$dir/info.txt"
    if grep -q "Cpu)" "$dir/info.txt"; then
        echo "warning: the adapter is a CPU one; set PAGODA_ADAPTER to a GPU's name or index" >&2
    fi
    if [[ ${KERNEL_TESTS:-1} != 0 && -x $OUT/kernels-reference ]]; then
        local limit=${KERNEL_TESTS_S:-150}
        echo
        echo "kernel tests on this adapter (kernels_reference; failures with their messages):"
        local status=0
        timeout "$limit" "$OUT/kernels-reference" 2>&1 |
            grep -E -A1 "^test result|panicked at" | grep -v "^--" || status=${PIPESTATUS[0]}
        if ((status == 124)); then
            echo "kernel tests: cut after ${limit}s (KERNEL_TESTS_S)"
        fi
    fi
    budget=${BUDGET_S:-400}
    deadline=$((SECONDS + budget))
    local engine=(--executor wgpu --workload memory-pressure --no-enable-prefix-caching
        --num-gpu-blocks "${NUM_GPU_BLOCKS:-1536}")
    local flags=("${engine[@]}" --json)
    printf '\n%-14s %-5s %7s  %-30s %9s %9s %9s %8s %8s %6s\n' \
        model dtype GB run tok/s ITL_ms TTFT_ms host_us disp/st GB/s
    for spec in $models; do
        if (($(left) <= 0)); then
            echo "$spec: skipped, the ${budget}s budget is spent"
            continue
        fi
        local shape=${spec%%:*} dtype=${spec##*:}
        local file=$dir/$shape-$dtype.gguf
        "$bin" random-model --shape "$shape" --dtype "$dtype" --out "$file" >/dev/null
        local gb
        gb=$(awk -v b="$(stat -c %s "$file")" 'BEGIN { printf "%.2f", b / 1e9 }')
        local n=0
        IFS=, read -ra counts <<<"$batches"
        while read -r report; do
            decode_row "" "$report"
            n=$((n + 1))
        done < <(timeout "$(cap)" "$bin" bench "${flags[@]}" --model "$file" --num-requests "$batches" \
            --input-len 128 --output-len 32)
        if ((n < ${#counts[@]})); then
            echo "$shape $dtype decode: $n of ${#counts[@]} batch sizes ran (cut at the ${budget}s budget, or failed)"
        fi
        if [[ $spec == "${AB_MODEL-llama-3.2-1b:q4_k}" ]]; then
            local setting
            for setting in ${AB_SETTINGS-$AB_DEFAULT}; do
                n=0
                while read -r report; do
                    decode_row " ${setting#PAGODA_}" "$report"
                    n=$((n + 1))
                done < <(env "$setting" timeout "$(cap)" "$bin" bench "${flags[@]}" --model "$file" \
                    --num-requests "${AB_BATCHES:-1,32}" --input-len 128 --output-len 32)
                if ((n == 0)); then
                    echo "$shape $dtype decode with $setting: cut at the ${budget}s budget, or failed"
                fi
            done
        fi
        local tiles=auto
        if [[ $spec == "${TILE_SWEEP-llama-3.2-1b:q4_k}" ]]; then
            tiles="auto 8 16 32"
        fi
        for len in $prefill_lens; do
            for tile in $tiles; do
                local report label="prefill $len"
                [[ $tile == auto ]] || label="$label t$tile"
                local status=0
                report=$(PAGODA_GEMM_ROWS=${tile#auto} timeout "$(cap)" "$bin" bench "${flags[@]}" \
                    --model "$file" --num-requests 1 --input-len "$len" --output-len 1 \
                    --max-num-batched-tokens "$len") || status=$?
                if ((status == 124)); then
                    echo "$shape $dtype $label: cut at the ${budget}s budget"
                    continue
                elif ((status != 0)); then
                    echo "$shape $dtype $label: failed (exit status $status)"
                    continue
                fi
                prefill_line "$label" "$len" "$(field ttft_p50_s "$report")" "$(field host_us_p50 "$report")" \
                    "$(field dispatches_per_step "$report")"
            done
        done
        if [[ $spec == "${PROFILE-llama-3.2-1b:q4_k}" ]]; then
            echo "kernel device time of $shape $dtype, 16-token prompts and 64 tokens out (mostly decode), batch 1 then 32:"
            timeout "$(cap)" "$bin" bench "${engine[@]}" --model "$file" --num-requests 1,32 --input-len 16 \
                --output-len 64 --profile-kernels | grep -E "^ *[0-9.]+% |kernel device time" || true
        fi
        if [[ ${BASELINE:-1} != 0 && -x $OUT/llama-batched-bench ]]; then
            baseline_rows "$file"
        fi
        rm -f "$file"
    done
    if [[ ${KERNEL_BENCH:-1} != 0 ]]; then
        echo
        echo "kernel bench (decode GEMV of every weight type at 4096 x 4096, 32-row GEMM of Q4_K and Q8_0, paged-attention decode, and what a dispatch costs: steps of 1, 64 and 256 one-row RMSNorms):"
        timeout "${KERNEL_BENCH_S:-120}" "$OUT/kernels-bench" \
            --bench 'gemv_(quant|dense)/[^/]*/proj_7b|gemm_quant/(q4_k|q8_0)/|paged_attention_decode|dispatch/' 2>&1 |
            grep -E "^(gemv_quant|gemv_dense|gemm_quant|paged_attention_decode|dispatch)|time:|thrpt|adapter|attention:|linear:" || true
    fi
}

case ${1:-} in
build) build ;;
pack) pack ;;
run)
    [[ $# -eq 2 ]] || { echo "usage: $0 run BANDWIDTH_GB_S" >&2; exit 2; }
    run "$2"
    ;;
*)
    echo "usage: $0 build | pack | run BANDWIDTH_GB_S" >&2
    exit 2
    ;;
esac
