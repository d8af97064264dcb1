// The k largest values of each row of logits [rows, v], largest first, ties to the lower index;
// NaN is never chosen. One workgroup per row runs k rounds; round r finds the best element
// ordered after the one round r - 1 chose, with a fixed tree over the WG invocations. Lane t
// scans runs of eight neighbours, t * 8, (t + WG) * 8, ..., written out: lavapipe ends every
// loop of an invocation once their iterations together pass 65,535, the k rounds' included.
struct TopKParams {
    rows: u32,
    v: u32,
    k: u32,
}

const NONE: u32 = 0xffffffffu;

@group(0) @binding(SLOT_P) var<uniform> P: TopKParams;
@group(0) @binding(SLOT_LOGITS) var<storage, read> LOGITS: array<f32>;
@group(0) @binding(SLOT_VALUES) var<storage, read_write> VALUES: array<f32>;
@group(0) @binding(SLOT_IDS) var<storage, read_write> IDS: array<u32>;

var<workgroup> best_v: array<f32, WG>;
var<workgroup> best_i: array<u32, WG>;

fn better(v: f32, i: u32, bv: f32, bi: u32) -> bool {
    return i != NONE && (bi == NONE || v > bv || (v == bv && i < bi));
}

// A candidate: its value and index (NONE for none yet).
struct Best {
    v: f32,
    i: u32,
}

// `best`, or element `i` of the row at `base` where it is better and ordered after the previous
// round's pick (pv, pi).
fn candidate(best: Best, base: u32, i: u32, pv: f32, pi: u32) -> Best {
    if (i >= P.v) {
        return best;
    }
    let x = LOGITS[base + i];
    let after_prev = pi == NONE || x < pv || (x == pv && i > pi);
    if (x == x && after_prev && better(x, i, best.v, best.i)) {
        return Best(x, i);
    }
    return best;
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) t: u32) {
    let row = wid.y * nwg.x + wid.x;
    let base = min(row, P.rows - 1u) * P.v;
    var pv = 0.0;
    var pi = NONE;
    for (var r = 0u; r < P.k; r++) {
        var best = Best(0.0, NONE);
        for (var i = t * 8u; i < P.v; i += WG * 8u) {
            best = candidate(best, base, i, pv, pi);
            best = candidate(best, base, i + 1u, pv, pi);
            best = candidate(best, base, i + 2u, pv, pi);
            best = candidate(best, base, i + 3u, pv, pi);
            best = candidate(best, base, i + 4u, pv, pi);
            best = candidate(best, base, i + 5u, pv, pi);
            best = candidate(best, base, i + 6u, pv, pi);
            best = candidate(best, base, i + 7u, pv, pi);
        }
        best_v[t] = best.v;
        best_i[t] = best.i;
        for (var s = WG / 2u; s > 0u; s >>= 1u) {
            workgroupBarrier();
            if (t < s && better(best_v[t + s], best_i[t + s], best_v[t], best_i[t])) {
                best_v[t] = best_v[t + s];
                best_i[t] = best_i[t + s];
            }
        }
        workgroupBarrier();
        pv = best_v[0];
        pi = best_i[0];
        if (t == 0u && row < P.rows) {
            VALUES[row * P.k + r] = pv;
            IDS[row * P.k + r] = pi;
        }
        workgroupBarrier();
    }
}
