#!/usr/bin/env python3
"""The kernel cost report's compiling and counting (scripts/kernel-cost.sh sets up its tools and
says what it counts): pagoda's decode mat-vec variants as naga writes them
(examples/kernel_spirv.rs) beside llama.cpp's Vulkan `mul_mat_vec` shaders compiled by glslc with
the defines of its vulkan-shaders-gen.cpp and the specialization constants its host code
(ggml-vulkan.cpp) sets on NVIDIA, both through `spirv-opt -O`, each hot loop counted by
spirv_hot_loop.py.

usage: kernel_cost.py --example BIN --llama-dir GGML_VULKAN_DIR [--batches 1,8] [--json] MODEL...
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import spirv_hot_loop  # noqa: E402

# The weight types the report always compares (issue 47's targets), besides the models' own.
ALWAYS = ["q4_k", "q6_k", "q8_0", "q4_0"]
# An NVIDIA GPU's subgroup (ggml-vulkan.cpp's `device->subgroup_size`).
NVIDIA_SUBGROUP = 32
# mul_mat_vec_base.glsl's bindings: A (the weights) and B (the activations).
LLAMA_WEIGHTS_BINDING, LLAMA_ACTIVATIONS_BINDING = 0, 1


def run(cmd):
    return subprocess.run(cmd, check=True, capture_output=True, text=True).stdout


def hot_loop(spv, weights_binding, activations_binding, rows):
    """spirv_hot_loop's counts of an optimized module."""
    module = spirv_hot_loop.Module(spirv_hot_loop.disassemble(spv))
    return spirv_hot_loop.hot_loop(module, weights_binding, activations_binding, rows, spv)


def pagoda_rows(example, models, batches, work):
    """One report row for each mat-vec variant the models run at the decode batches
    (examples/kernel_spirv.rs)."""
    out = []
    for line in run([example, "--batches", ",".join(map(str, batches)), work, *models]).splitlines():
        v = json.loads(line)
        opt = v["spv"] + ".opt"
        run(["spirv-opt", "-O", v["spv"], "-o", opt])
        counts = hot_loop(opt, v["weights_binding"], v["activations_binding"], v["rows"])
        out.append(
            {
                "source": "pagoda",
                "kernel": v["kernel"],
                "weight_type": v["weight_type"],
                "models": v["models"],
                "k": v["k"],
                "workgroup_size": v["workgroup_size"],
                "x_rows": v["x_rows"],
                "adapter": v["adapter"],
                **counts,
            }
        )
    return out


class LlamaCpp:
    """llama.cpp's Vulkan sources: the shaders, and the host code's choices for NVIDIA."""

    def __init__(self, root):
        self.shaders = os.path.join(root, "vulkan-shaders")
        host = open(os.path.join(root, "ggml-vulkan.cpp")).read()
        self.host = host
        # The rows-per-workgroup defaults, before the AMD and Intel overrides.
        self.rows = {}
        for name, expr in re.findall(r"uint32_t (rm_\w+) = ([^;]+);", host):
            self.rows.setdefault(name, eval(expr, {}, dict(self.rows)))

    def spec_constants(self, tname, cols):
        """(BLOCK_SIZE, NUM_ROWS, NUM_COLS) of `mul_mat_vec_<tname>_f32_f32` for `cols` activation
        columns (a batch of up to mul_mat_vec_max_cols = 8) on NVIDIA Turing or newer for
        m <= 8192 and k >= 1024 (ggml_vk_get_dequantize_mul_mat_vec picks DMMV_WG_SIZE_LARGE: four
        subgroups a workgroup, reduced with subgroupAdd and shared memory, the `_subgroup`
        shader; the pipeline of `cols` columns is the one created at index cols - 1)."""
        m = re.search(
            r'pipeline_dequant_mul_mat_vec_f32_f32\[w\]\[GGML_TYPE_\w+\s*\]\[i\],\s*"mul_mat_vec_'
            + tname
            + r'_f32_f32".*?\{(\w+),\s*([^,]+),\s*i\+1\}',
            self.host,
        )
        if not m:
            sys.exit(f"kernel_cost: ggml-vulkan.cpp creates no mul_mat_vec_{tname}_f32_f32")
        wg = {"wg_size_subgroup": 4 * NVIDIA_SUBGROUP, "wg_size_subgroup16": 4 * max(NVIDIA_SUBGROUP, 16)}
        return wg[m.group(1)], eval(m.group(2), {}, dict(self.rows)), cols

    def shader(self, tname):
        """vulkan-shaders-gen.cpp's source file for a type."""
        own = (
            tname.endswith("_k")
            or tname.startswith(("iq1_", "iq2_", "iq3_"))
            or tname in ("iq4_xs", "tq1_0", "tq2_0")
        )
        return os.path.join(self.shaders, f"mul_mat_vec_{tname}.comp" if own else "mul_mat_vec.comp")

    def row(self, tname, cols, work):
        """The report row of `mul_mat_vec_<tname>_f32_f32_subgroup` over `cols` activation columns
        (its float path: on NVIDIA, batches past one take the q8_1 integer path, which rounds the
        activations to 8 bits)."""
        name = f"mul_mat_vec_{tname}_f32_f32_subgroup"
        base = os.path.join(work, f"{name}.cols{cols}")
        spv, opt = base + ".spv", base + ".opt.spv"
        defines = {
            "FLOAT_TYPE": "float",
            "FLOAT_TYPEV2": "vec2",
            f"DATA_A_{tname.upper()}": "1",
            "B_TYPE": "float",
            "B_TYPEV2": "vec2",
            "B_TYPEV4": "vec4",
            "D_TYPE": "float",
            "USE_SUBGROUP_ADD": "1",
        }
        run(
            ["glslc", "-fshader-stage=compute", "--target-env=vulkan1.2", "-O", self.shader(tname), "-o", spv]
            + [f"-D{k}={v}" for k, v in defines.items()]
        )
        block, rows, cols = self.spec_constants(tname, cols)
        run(
            ["spirv-opt", "--set-spec-const-default-value", f"0:{block} 1:{rows} 2:{cols}"]
            + ["--freeze-spec-const", "-O", spv, "-o", opt]
        )
        counts = hot_loop(opt, LLAMA_WEIGHTS_BINDING, LLAMA_ACTIVATIONS_BINDING, rows)
        return {
            "source": "llama.cpp",
            "kernel": name,
            "weight_type": tname,
            "workgroup_size": block,
            "x_rows": cols,
            "spec_constants": {"BLOCK_SIZE": block, "NUM_ROWS": rows, "NUM_COLS": cols},
            "adapter": "NVIDIA GPU (Vulkan), Turing or newer, m <= 8192 and k >= 1024",
            **counts,
        }


def print_table(rows):
    """The report as text: every kernel, then pagoda against llama.cpp per weight type and rows
    of x (activation columns) a workgroup multiplies each weight by."""
    print("Decode mat-vec hot loops, per weight and row of x (no GPU: naga's and glslc's SPIR-V through spirv-opt -O)")
    print(f"{'source':10} {'type':7} {'x rows':>6} {'instr':>7} {'moves':>7} {'bytes':>7} {'w bytes':>8} {'w/iter':>7}  kernel")
    for r in rows:
        print(
            f"{r['source']:10} {r['weight_type']:7} {r['x_rows']:6d} {r['instructions_per_weight']:7.2f} "
            f"{r['moves_per_weight']:7.2f} {r['bytes_per_weight']:7.2f} {r['weight_bytes_per_weight']:8.3f} "
            f"{r['weights_per_iteration']:7d}  {r['kernel']}"
        )
    llama = {(r["weight_type"], r["x_rows"]): r for r in rows if r["source"] == "llama.cpp"}
    print("\nPer weight type and rows of x: pagoda's variants (fewest..most) against llama.cpp's")
    print(f"{'type':7} {'x rows':>6} {'pagoda instr':>14} {'llama instr':>12} {'pagoda bytes':>14} {'llama bytes':>12}")
    for t, x_rows in sorted({(r["weight_type"], r["x_rows"]) for r in rows}):
        ours = [r for r in rows if r["source"] == "pagoda" and (r["weight_type"], r["x_rows"]) == (t, x_rows)]
        theirs = llama.get((t, x_rows))

        def span(key):
            lo, hi = min(r[key] for r in ours), max(r[key] for r in ours)
            return f"{lo:.2f}" if lo == hi else f"{lo:.2f}..{hi:.2f}"

        p_instr, p_bytes = (span("instructions_per_weight"), span("bytes_per_weight")) if ours else ("-", "-")
        l_instr = f"{theirs['instructions_per_weight']:.2f}" if theirs else "-"
        l_bytes = f"{theirs['bytes_per_weight']:.2f}" if theirs else "-"
        print(f"{t:7} {x_rows:6d} {p_instr:>14} {l_instr:>12} {p_bytes:>14} {l_bytes:>12}")
    specs = sorted({(r["kernel"], json.dumps(r["spec_constants"])) for r in llama.values()})
    print("\nllama.cpp's specialization constants (its host code's on NVIDIA Turing+, m <= 8192, k >= 1024):")
    for kernel, spec in specs:
        print(f"  {kernel}: {spec}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--example", required=True, help="the built examples/kernel_spirv binary")
    ap.add_argument("--llama-dir", required=True, help="llama.cpp's ggml/src/ggml-vulkan directory")
    ap.add_argument("--json", action="store_true", help="one JSON object a line")
    ap.add_argument(
        "--batches",
        default="1,8",
        help="decode batches (rows of x) whose variants to count, comma-separated (default 1,8: the "
        "one-row GEMV and the GEMV of 8 rows; llama.cpp's shaders with as many columns)",
    )
    ap.add_argument("models", nargs="+", help="GGUF paths or SHAPE:TYPE (e.g. llama-2-7b:q4_k)")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="kernel-cost-") as work:
        batches = [int(b) for b in a.batches.split(",")]
        rows = pagoda_rows(a.example, a.models, batches, work)
        llama = LlamaCpp(a.llama_dir)
        types = sorted({r["weight_type"] for r in rows} | set(ALWAYS))
        # llama.cpp's column counts: a batch's, up to its 8 (larger batches take its GEMM).
        cols = sorted({b for b in batches if b <= 8})
        rows += [llama.row(t, c, work) for t in types for c in cols]
    if a.json:
        for r in rows:
            print(json.dumps(r))
    else:
        print_table(rows)


if __name__ == "__main__":
    main()
