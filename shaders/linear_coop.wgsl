// Cooperative-matrix linear (src/gpu/linear_coop.rs): a workgroup computes an MT x NT tile of
// outputs (NT weight rows: output columns, or NT / 2 outputs of a gated weight, whose tile holds
// their gate rows and then their up rows) of rows m0 .. m0 + MT of x. For each stage of KT
// weights of k it stages the activations, converted to the matrices' input type (`coop_in`),
// in `xs` (row-major, MT x KT) and the weights, dequantized by the format's `w_group`, in `ws`
// (weight row j at j KT), zeros past K, past the batch's rows and past the part's rows; then
// `tile_multiply` adds xs · wsᵀ into the f32 accumulators `cs` (row-major, MT x NT), one
// k-step of CS at a time in ascending order, through the adapter's matrix multiply-add
// (coop_mma.wgsl) or its emulation (coop_mma_emu.wgsl). An output's steps are the same
// whatever MT, NT and KT are (the steps past K are skipped, the last one's k past K is zero),
// so a decode row padded to the decode tile has the bits of the same row in a prefill tile.
// The epilogue then hands each output to `emit` (`emit_gated` with its up sum, `emit_pair` two
// columns at a time: the lines starting with GATED, PAIRED and PLAIN are kept by the composer
// as in the other linear kernels).
const TILES_M: u32 = MT / CS;
const TILES_N: u32 = NT / CS;
// Outputs of the tile's NT weight rows.
const OUTS: u32 = NT / GATES;

var<workgroup> xs: array<CoopIn, MT * KT>;
var<workgroup> ws: array<CoopIn, NT * KT>;
var<workgroup> cs: array<f32, MT * NT>;

// Which subgroup an invocation is in, and its lane: the tile's matrices are shared out by
// subgroup, each multiplied by one subgroup's lanes together.
struct CoopLanes {
    @builtin(subgroup_id) sg: u32,
    @builtin(num_subgroups) count: u32,
    @builtin(subgroup_invocation_id) lane: u32,
    @builtin(subgroup_size) size: u32,
}

// Activations k .. k + 3 of tile row r (x row m0 + r) through the input functions; zeros past
// the batch and past K.
fn x_quad(m0: u32, r: u32, k: u32, s: f32) -> vec4<f32> {
    if (m0 + r >= P.m) {
        return vec4<f32>(0.0);
    }
    let xr = (m0 + r) * P.k;
    if (k + 4u <= P.k) {
        return input4(load_x4_direct(xr + k), s, k);
    }
    var v = vec4<f32>(0.0);
    for (var i = 0u; i < 4u && k + i < P.k; i++) {
        v[i] = input1(x1(xr + k + i), s, k + i);
    }
    return v;
}

// Weights k .. k + 7 of the weight row at rb; zeros past K.
fn w_eight(rb: u32, k: u32) -> W8 {
    if (k + 8u <= P.k) {
        return w_group(rb, k / 8u);
    }
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    for (var i = 0u; i < 4u && k + i < P.k; i++) {
        a[i] = w_elem(rb, k + i);
    }
    for (var i = 4u; i < 8u && k + i < P.k; i++) {
        b[i - 4u] = w_elem(rb, k + i);
    }
    return W8(a, b);
}

// Stage k0 .. k0 + KT of the tile's activations into xs.
fn stage_x(m0: u32, k0: u32, t: u32) {
    for (var q = t; q < MT * KT / 4u; q += WG) {
        let r = q / (KT / 4u);
        let kq = q % (KT / 4u) * 4u;
        let v = x_quad(m0, r, k0 + kq, row_scale(r));
        let at = r * KT + kq;
        xs[at] = coop_in(v.x);
        xs[at + 1u] = coop_in(v.y);
        xs[at + 2u] = coop_in(v.z);
        xs[at + 3u] = coop_in(v.w);
    }
}

// Stage k0 .. k0 + KT of the tile's weight rows into ws: tile row j is the weight row of
// output n0 + j % OUTS, its up row for j >= OUTS of a gated weight (the part's up rows follow
// its gate rows); rows past the part are zeros.
fn stage_w(n0: u32, k0: u32, row_words: u32, t: u32) {
    for (var g = t; g < NT * KT / 8u; g += WG) {
        let j = g / (KT / 8u);
        let kg = g % (KT / 8u) * 8u;
        let n = n0 + j % OUTS;
        var w = W8(vec4<f32>(0.0), vec4<f32>(0.0));
        if (n < P.n_part) {
            let rb = P.w0 + (n + j / OUTS * P.n_part) * row_words;
            w = w_eight(rb, k0 + kg);
        }
        let at = j * KT + kg;
        store_w8(at, w);
    }
}

// Eight staged weights at `at` of ws.
fn store_w8(at: u32, w: W8) {
    ws[at] = coop_in(w.a.x);
    ws[at + 1u] = coop_in(w.a.y);
    ws[at + 2u] = coop_in(w.a.z);
    ws[at + 3u] = coop_in(w.a.w);
    ws[at + 4u] = coop_in(w.b.x);
    ws[at + 5u] = coop_in(w.b.y);
    ws[at + 6u] = coop_in(w.b.z);
    ws[at + 7u] = coop_in(w.b.w);
}

@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, lanes: Lanes, u: CoopLanes) {
    let t = lanes.t;
    let n0 = (wid.z * P.nx + wid.x) * OUTS;
    let m0 = wid.y * MT;
    let row_words = w_row_words(P.k);
    row_scales(m0, n0 == 0u, lanes);
    for (var e = t; e < MT * NT; e += WG) {
        cs[e] = 0.0;
    }
    for (var k0 = 0u; k0 < P.k; k0 += KT) {
        workgroupBarrier();
        stage_x(m0, k0, t);
        stage_w(n0, k0, row_words, t);
        workgroupBarrier();
        // The stage's k-steps that hold a k below K.
        tile_multiply(u, min(KT, P.k - k0 + CS - 1u) / CS);
    }
    workgroupBarrier();
    PLAIN for (var e = t; e < MT * OUTS; e += WG) {
    PLAIN     let r = e / OUTS;
    PLAIN     let j = e % OUTS;
    PLAIN     if (m0 + r < P.m && n0 + j < P.n_part) { emit(m0 + r, n0 + j, cs[r * NT + j]); }
    PLAIN }
    GATED for (var e = t; e < MT * OUTS; e += WG) {
    GATED     let r = e / OUTS;
    GATED     let j = e % OUTS;
    GATED     if (m0 + r < P.m && n0 + j < P.n_part) { emit_gated(m0 + r, n0 + j, cs[r * NT + j], cs[r * NT + OUTS + j]); }
    GATED }
    PAIRED for (var e = t; e < MT * OUTS / 2u; e += WG) {
    PAIRED     let r = e / (OUTS / 2u);
    PAIRED     let j = e % (OUTS / 2u) * 2u;
    PAIRED     if (m0 + r < P.m && n0 + j < P.n_part) { emit_pair(m0 + r, n0 + j, cs[r * NT + j], cs[r * NT + j + 1u]); }
    PAIRED }
}
