// KV pools in f16 (shader-f16 feature): a pair of f16 values in each u32 word, read as one
// word (lavapipe loads a storage buffer a 32-bit component and a lane at a time: as
// vec2<f16> a pair was two loads). Values are rounded to f16 by f16's own conversion; widening
// them back, and packing an f16 value, is exact. The same memory layout as the packed form.
alias KvPair = u32;

fn kv_in(p: KvPair) -> vec2<f32> {
    return unpack2x16float(p);
}

fn kv_out(v: vec2<f32>) -> KvPair {
    return pack2x16float(vec2<f32>(vec2<f16>(v)));
}
