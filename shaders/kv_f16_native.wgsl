// KV pools in f16 as vec2<f16> (shader-f16 feature); same memory layout as the packed form.
alias KvPair = vec2<f16>;

fn kv_in(p: KvPair) -> vec2<f32> {
    return vec2<f32>(p);
}

fn kv_out(v: vec2<f32>) -> KvPair {
    return vec2<f16>(v);
}
