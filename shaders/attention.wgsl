// Paged attention over a varlen batch, one invocation per (query token, head), walking the
// whole context block by block in ascending order with an online softmax (attention_common.wgsl),
// so a query's result depends only on its own context.
@compute @workgroup_size(WG)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
    let i = (wid.y * nwg.x + wid.x) * WG + lid;
    if (i >= P.tokens * P.heads) {
        return;
    }
    let at = query_at(i);
    let oo = i * HD;
    let ctx = at.ctx;
    if (ctx == 0u) {
        // Inconsistent batch metadata: zeros rather than a wrapped-around context.
        for (var d = 0u; d < HD; d++) {
            OUT[oo + d] = 0.0;
        }
        return;
    }
    var q = load_query(at.tok, at.head);
    var acc: array<vec2<f32>, HP>;
    var state = Softmax(-3.0e38, 0.0);
    attend_keys(at.seq, at.head / (P.heads / P.kv_heads), first_key(ctx), key_end(ctx), &q, &acc, &state);
    let fin = sink_finish(at.head, state.m, state.l);
    for (var d = 0u; d < HP; d++) {
        let o = acc[d] * fin.x / fin.y;
        OUT[oo + 2u * d] = o.x;
        OUT[oo + 2u * d + 1u] = o.y;
    }
}
