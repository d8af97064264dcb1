#!/usr/bin/env python3
"""Counts the hot loop of a mat-vec compute shader's SPIR-V (one with every function inlined,
as `spirv-opt -O` leaves it): the instructions one iteration issues and the bytes it loads from
storage buffers, per weight it consumes. Prints one JSON object. Used by scripts/kernel-cost.sh,
whose header gives the definition; in short:

- a loop is the blocks of a structured loop (an `OpLoopMerge` header and every block reachable
  from it without passing its merge block); the candidates are the innermost loops (no other
  loop header among their blocks) that load from the weight buffer; the hot loop is the one
  loading the most weight bytes an iteration (the main walk over a row's blocks, not a tail);
- instructions: every instruction of its blocks but labels, merge declarations, `OpPhi` and
  debug lines, both sides of a branch included (a warp whose lanes diverge issues both);
  `moves` are the ones that only move data between registers or form addresses
  (`OpCompositeExtract`, `OpCompositeConstruct`, `OpCompositeInsert`, `OpVectorShuffle`,
  `OpCopyObject`, `OpBitcast`, `OpAccessChain`, `OpInBoundsAccessChain`);
- bytes: the loaded type's size for every `OpLoad` from a `StorageBuffer` variable;
- weights one iteration consumes: the activation values it loads (distinct access chains)
  times the weight rows each activation multiplies (`--rows`: the kernel's rows a workgroup).

usage: spirv_hot_loop.py SPV --weights-binding N --activations-binding N --rows N
"""

import argparse
import json
import re
import subprocess
import sys

# Opcodes that declare structure rather than execute.
STRUCTURAL = {"OpLabel", "OpLoopMerge", "OpSelectionMerge", "OpPhi", "OpLine", "OpNoLine"}
# Opcodes that only move data between registers or form addresses.
MOVES = {
    "OpCompositeExtract",
    "OpCompositeConstruct",
    "OpCompositeInsert",
    "OpVectorShuffle",
    "OpCopyObject",
    "OpBitcast",
    "OpAccessChain",
    "OpInBoundsAccessChain",
}
TERMINATORS = {
    "OpBranch",
    "OpBranchConditional",
    "OpSwitch",
    "OpReturn",
    "OpReturnValue",
    "OpKill",
    "OpUnreachable",
    "OpTerminateInvocation",
}
ACCESS_CHAINS = {"OpAccessChain", "OpInBoundsAccessChain", "OpPtrAccessChain"}


def disassemble(path):
    """(result id, opcode, operands) for each instruction, ids as `%N`."""
    text = subprocess.run(
        ["spirv-dis", "--raw-id", "--no-color", path], check=True, capture_output=True, text=True
    ).stdout
    out = []
    for line in text.splitlines():
        line = line.split(";", 1)[0].strip()
        if not line:
            continue
        m = re.match(r"(?:(%\w+)\s*=\s*)?(Op\w+)\s*(.*)", line)
        if m:
            out.append((m.group(1), m.group(2), m.group(3).split()))
    return out


class Module:
    """The declarations the counter needs: types, storage-buffer bindings, the entry's blocks."""

    def __init__(self, insts):
        self.defs = {rid: (op, args) for rid, op, args in insts if rid}
        self.binding = {}
        for _, op, args in insts:
            if op == "OpDecorate" and len(args) >= 3 and args[1] == "Binding":
                self.binding[args[0]] = int(args[2])
        self.blocks = self._entry_blocks(insts)

    def _entry_blocks(self, insts):
        entry = next(args[1] for _, op, args in insts if op == "OpEntryPoint")
        blocks, current, inside = {}, None, False
        for rid, op, args in insts:
            if op == "OpFunction":
                inside = rid == entry
            elif inside and op == "OpLabel":
                current = rid
                blocks[current] = []
            elif inside and current and op != "OpFunctionEnd":
                blocks[current].append((rid, op, args))
        if any(op == "OpFunctionCall" for body in blocks.values() for _, op, _ in body):
            sys.exit("spirv_hot_loop: the entry point calls functions; inline them first (spirv-opt -O)")
        return blocks

    def type_size(self, tid):
        """(bytes, scalars) of a type."""
        op, args = self.defs[tid]
        if op in ("OpTypeFloat", "OpTypeInt"):
            return int(args[0]) // 8, 1
        if op == "OpTypeVector":
            size, n = self.type_size(args[0])
            return size * int(args[1]), n * int(args[1])
        if op == "OpTypeArray":
            size, n = self.type_size(args[0])
            count = int(self.defs[args[1]][1][1])
            return size * count, n * count
        if op == "OpTypeStruct":
            sizes = [self.type_size(m) for m in args]
            return sum(s for s, _ in sizes), sum(n for _, n in sizes)
        sys.exit(f"spirv_hot_loop: no size for {op}")

    def storage_root(self, pid):
        """The binding of the storage-buffer variable a pointer walks from, else None."""
        while pid in self.defs and self.defs[pid][0] in ACCESS_CHAINS | {"OpCopyObject"}:
            pid = self.defs[pid][1][1]
        op, args = self.defs.get(pid, (None, []))
        if op == "OpVariable" and args[1] == "StorageBuffer":
            return self.binding.get(pid)
        return None

    def successors(self, label):
        _, op, args = self.blocks[label][-1]
        if op == "OpBranch":
            return [args[0]]
        if op == "OpBranchConditional":
            return args[1:3]
        if op == "OpSwitch":
            return [a for i, a in enumerate(args[1:]) if i % 2 == 0]
        return []

    def loops(self):
        """{header: (merge, blocks)} for every structured loop of the entry point."""
        out = {}
        for label, body in self.blocks.items():
            merge = next((args[0] for _, op, args in body if op == "OpLoopMerge"), None)
            if merge is None:
                continue
            seen, todo = {label}, [label]
            while todo:
                for nxt in self.successors(todo.pop()):
                    if nxt != merge and nxt not in seen:
                        seen.add(nxt)
                        todo.append(nxt)
            out[label] = (merge, seen)
        return out


def count(module, blocks, weights_binding, activations_binding):
    """Instructions, moves, bytes loaded by binding and distinct activation values of a loop."""
    instructions = moves = 0
    loaded = {}
    activations = {}
    for label in blocks:
        for _, op, args in module.blocks[label]:
            if op in STRUCTURAL:
                continue
            instructions += 1
            moves += op in MOVES
            if op != "OpLoad":
                continue
            binding = module.storage_root(args[1])
            if binding is None:
                continue
            size, scalars = module.type_size(args[0])
            loaded[binding] = loaded.get(binding, 0) + size
            if binding == activations_binding:
                chain = module.defs.get(args[1], (None, [args[1]]))[1]
                activations[tuple(chain)] = scalars
    return {
        "instructions": instructions,
        "moves": moves,
        "weight_bytes": loaded.get(weights_binding, 0),
        "activation_bytes": loaded.get(activations_binding, 0),
        "other_bytes": sum(b for k, b in loaded.items() if k not in (weights_binding, activations_binding)),
        "activation_values": sum(activations.values()),
    }


def hot_loop(module, weights_binding, activations_binding, rows, name="module"):
    """The counts of the module's hot loop, and per weight."""
    loops = module.loops()
    innermost = [
        blocks
        for header, (_, blocks) in loops.items()
        if not any(other != header and other in blocks for other in loops)
    ]
    counted = [count(module, blocks, weights_binding, activations_binding) for blocks in innermost]
    candidates = [c for c in counted if c["weight_bytes"] and c["activation_values"]]
    if not candidates:
        sys.exit(f"spirv_hot_loop: {name}: no innermost loop loads weights and activations")
    hot = max(candidates, key=lambda c: (c["weight_bytes"], c["instructions"]))
    weights = hot["activation_values"] * rows
    loaded = hot["weight_bytes"] + hot["activation_bytes"] + hot["other_bytes"]
    hot.update(
        loops=len(loops),
        rows=rows,
        weights_per_iteration=weights,
        instructions_per_weight=round(hot["instructions"] / weights, 3),
        moves_per_weight=round(hot["moves"] / weights, 3),
        bytes_per_weight=round(loaded / weights, 3),
        weight_bytes_per_weight=round(hot["weight_bytes"] / weights, 3),
    )
    return hot


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("spv")
    ap.add_argument("--weights-binding", type=int, required=True)
    ap.add_argument("--activations-binding", type=int, required=True)
    ap.add_argument("--rows", type=int, required=True, help="weight rows each activation multiplies")
    a = ap.parse_args()
    module = Module(disassemble(a.spv))
    print(json.dumps(hot_loop(module, a.weights_binding, a.activations_binding, a.rows, a.spv)))


if __name__ == "__main__":
    main()
