// KV pools in f16 packed two per u32 word (needs no shader-f16 feature).
alias KvPair = u32;

fn kv_in(p: KvPair) -> vec2<f32> {
    return unpack2x16float(p);
}

fn kv_out(v: vec2<f32>) -> KvPair {
    return pack2x16float(v);
}
