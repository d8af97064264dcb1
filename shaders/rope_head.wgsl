// A head of a fused Q/K/V row normed (qk_norm_rms.wgsl or qk_norm_none.wgsl) and rotated:
// the one expression of a rotated element that the rope_cache kernel and flash attention's
// decode variant (flash_qk_rope.wgsl) share, so a key or query has the same bits whichever
// kernel turned it. The kernel says what it reads: `qkv_at(i)`, `rope_hd()`,
// `rope_half_split()`, `qk_eps()`, and binds INV_FREQ.

// Element j of the head at `base` (normed by the qk_norm_*.wgsl file composed before this one,
// with its weights from w0), rotated to position `pos`. Pair p is (2p, 2p + 1) interleaved and
// (p, p + hd / 2) half-split; the first of a pair becomes a c - b s, the second a s + b c.
fn rotated(base: u32, j: u32, pos: u32, scale: f32, w0: u32) -> f32 {
    let half = rope_hd() / 2u;
    var p = j / 2u;
    var second = j % 2u == 1u;
    var partner = j ^ 1u;
    if (rope_half_split()) {
        p = j % half;
        second = j >= half;
        partner = select(j + half, j - half, second);
    }
    let a = head_value(base, select(j, partner, second), scale, w0);
    let b = head_value(base, select(partner, j, second), scale, w0);
    let cs = rope_cos_sin(pos, INV_FREQ[p]);
    if (second) {
        return a * cs.y + b * cs.x;
    }
    return a * cs.x - b * cs.y;
}
