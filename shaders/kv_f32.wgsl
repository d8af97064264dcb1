// KV pools in f32: one vec2<f32> per pair of head dimensions.
alias KvPair = vec2<f32>;

fn kv_in(p: KvPair) -> vec2<f32> {
    return p;
}

fn kv_out(v: vec2<f32>) -> KvPair {
    return v;
}
