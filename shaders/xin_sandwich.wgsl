// Linear input after Gemma's sandwich: the residual x (X) plus the previous projection's output
// o (O) RMS-normed with the post-norm's weight (POST), x' = x + rms_norm(o) * post, then
// x' RMS-normed on the way in with NORM (the next linears' pre-norm): x'[k] * scale * NORM[k].
// The bits of the rms_norm kernel with `accumulate` (x' as it stores it) and then the linear
// with xin_rms_norm.wgsl: both rows' scales come from rms_scale.wgsl (or rms_scale_lanes.wgsl),
// first over o, then over x' (read through `x1`, which follows `xin_mode`), and x' is each time
// `x + o * post_scale * post` as rms_norm.wgsl adds it. The lead workgroup of each row tile
// writes its rows' x' to XOUT (the residual stream's other buffer: never X itself, which every
// workgroup reads). `row_scale` hands the kernel its row's number in the tile as the row's
// "scale", from which the input functions find the row's o and scales.
@group(0) @binding(SLOT_XOUT) var<storage, read_write> XOUT: array<f32>;

// What `x1` reads: 0 X (the kernel's loads), 1 O (the post-norm's sums), 2 x' (the pre-norm's).
var<private> xin_mode: u32;
// The workgroup's first row and its rows' post-norm and pre-norm scales.
var<private> xin_m0: u32;
var<private> xin_post: array<f32, NORM_ROWS>;
var<private> xin_pre: array<f32, NORM_ROWS>;

// x'[i], column k of row m0 + r of the tile: x + o * post_scale * post.
fn x_sandwich(i: u32, r: u32, k: u32) -> f32 {
    return x_word(i) + o_word(i) * xin_post[r] * post_word(k);
}

fn x1(i: u32) -> f32 {
    if (xin_mode == 1u) {
        return o_word(i);
    }
    if (xin_mode == 2u) {
        // The tile row of i (a division only in tiles of several rows), then its column.
        var r = 0u;
        if (NORM_ROWS > 1u) {
            r = i / P.k - xin_m0;
        }
        return x_sandwich(i, r, i - x_row(xin_m0, r));
    }
    return x_word(i);
}

fn row_scales(m0: u32, lead: bool, lanes: Lanes) {
    xin_m0 = m0;
    xin_mode = 1u;
    rms_scales(m0, P.m, P.k, P.eps, lanes);
    for (var r = 0u; r < NORM_ROWS; r++) {
        xin_post[r] = norm_scale[r];
    }
    xin_mode = 2u;
    rms_scales(m0, P.m, P.k, P.eps, lanes);
    for (var r = 0u; r < NORM_ROWS; r++) {
        xin_pre[r] = norm_scale[r];
    }
    if (lead) {
        for (var r = 0u; r < NORM_ROWS && m0 + r < P.m; r++) {
            let xr = (m0 + r) * P.k;
            for (var k = lanes.t; k < P.k; k += WG) {
                XOUT[xr + k] = x_sandwich(xr + k, r, k);
            }
        }
    }
    xin_mode = 0u;
}

fn row_scale(r: u32) -> f32 {
    return f32(r);
}

// The x row of tile row `s` (row_scale's number).
fn xin_row(s: f32) -> u32 {
    return x_row(xin_m0, u32(s));
}

fn input8(x: W8, s: f32, k: u32) -> W8 {
    let r = u32(s);
    let o = o8(xin_row(s) + k);
    let p = post8(k);
    let a = x.a + o.a * xin_post[r] * p.a;
    let b = x.b + o.b * xin_post[r] * p.b;
    let g = norm8(k);
    return W8(a * xin_pre[r] * g.a, b * xin_pre[r] * g.b);
}

fn input4(x: vec4<f32>, s: f32, k: u32) -> vec4<f32> {
    let r = u32(s);
    let v = x + o4(xin_row(s) + k) * xin_post[r] * post4(k);
    return v * xin_pre[r] * norm4(k);
}

fn input1(x: f32, s: f32, k: u32) -> f32 {
    let r = u32(s);
    let v = x + o_word(xin_row(s) + k) * xin_post[r] * post_word(k);
    return v * xin_pre[r] * norm1(k);
}
