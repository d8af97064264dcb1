// A mixture-of-experts router's choice per token (src/model/moe.rs, `RouterRule`): from row t
// of logits [rows, stride] (the router's `experts` logits, then the shared expert's gate logit
// at column `experts` where `gate` is 1), the `k` largest logits, largest first with ties to
// the lower expert (NaN counts as the lowest f32), into IDS and their weights into WEIGHTS in
// the same order, both slot-major (slot s of token t at s * rows + t: the order of the experts'
// output slots), and the shared expert's sigmoid gate into GATES[t]. One invocation a row,
// everything in index then slot order, so a token's values depend on its own row alone. rule 0: softmax over every expert, then the top k; 1: the same, renormalised
// by the chosen weights' sum; 2: the top k logits, then a softmax over those k (gpt-oss).
struct MoeRouteParams {
    rows: u32,
    experts: u32,
    k: u32,
    stride: u32,
    rule: u32,
    gate: u32,
}

const NONE: u32 = 0xffffffffu;
const LOWEST: f32 = -3.40282347e38;

@group(0) @binding(SLOT_P) var<uniform> P: MoeRouteParams;
@group(0) @binding(SLOT_LOGITS) var<storage, read> LOGITS: array<f32>;
@group(0) @binding(SLOT_IDS) var<storage, read_write> IDS: array<u32>;
@group(0) @binding(SLOT_WEIGHTS) var<storage, read_write> WEIGHTS: array<f32>;
@group(0) @binding(SLOT_GATES) var<storage, read_write> GATES: array<f32>;

// Logit `e` of the row at `base`, NaN as the lowest f32.
fn logit(base: u32, e: u32) -> f32 {
    let x = LOGITS[base + e];
    return select(LOWEST, x, x == x);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let row = (wid.y * nwg.x + wid.x) * WG + lid;
    if (row >= P.rows) {
        return;
    }
    let base = row * P.stride;
    // slot r of this row: IDS[r * P.rows + row], WEIGHTS likewise
    // round r: the best logit ordered after round r - 1's pick (pv, pi)
    var pv = 0.0;
    var pi = NONE;
    for (var r = 0u; r < P.k; r++) {
        var bv = 0.0;
        var bi = NONE;
        for (var e = 0u; e < P.experts; e++) {
            let x = logit(base, e);
            let after_prev = pi == NONE || x < pv || (x == pv && e > pi);
            if (after_prev && (bi == NONE || x > bv)) {
                bv = x;
                bi = e;
            }
        }
        IDS[r * P.rows + row] = bi;
        WEIGHTS[r * P.rows + row] = bv;
        pv = bv;
        pi = bi;
    }
    if (P.rule == 2u) {
        // softmax over the chosen: the first is the largest
        let top = WEIGHTS[row];
        var sum = 0.0;
        for (var r = 0u; r < P.k; r++) {
            sum += exp(WEIGHTS[r * P.rows + row] - top);
        }
        for (var r = 0u; r < P.k; r++) {
            WEIGHTS[r * P.rows + row] = exp(WEIGHTS[r * P.rows + row] - top) / sum;
        }
    } else {
        var top = LOWEST;
        for (var e = 0u; e < P.experts; e++) {
            top = max(top, logit(base, e));
        }
        var sum = 0.0;
        for (var e = 0u; e < P.experts; e++) {
            sum += exp(logit(base, e) - top);
        }
        var chosen = 0.0;
        for (var r = 0u; r < P.k; r++) {
            let p = exp(WEIGHTS[r * P.rows + row] - top) / sum;
            WEIGHTS[r * P.rows + row] = p;
            chosen += p;
        }
        if (P.rule == 1u) {
            for (var r = 0u; r < P.k; r++) {
                WEIGHTS[r * P.rows + row] = WEIGHTS[r * P.rows + row] / chosen;
            }
        }
    }
    if (P.gate == 1u) {
        GATES[row] = 1.0 / (1.0 + exp(-LOGITS[base + P.experts]));
    }
}
