// Attention sinks (gpt-oss), the one place their formula is written: head h has a learned
// logit SINKS[h] that joins its softmax as one more score with no value. Over the keys' scores
// s_j, m = max(max_j s_j, sink), and
//   out = Σ_j exp(s_j - m) v_j / (Σ_j exp(s_j - m) + exp(sink - m)).
// The kernels walk the keys with their online softmax as without a sink (m_keys, l = Σ_j
// exp(s_j - m_keys), acc = Σ_j exp(s_j - m_keys) v_j) and fold the sink in once at the end:
// with m = max(m_keys, sink) and c = exp(m_keys - m), out = acc * c / (l * c + exp(sink - m)).
// `sink_finish` returns (c, l * c + exp(sink - m)); the sink is not scaled or soft-capped.
@group(0) @binding(SLOT_SINKS) var<storage, read> SINKS: array<f32>;

fn sink_finish(head: u32, m: f32, l: f32) -> vec2<f32> {
    let sink = SINKS[head];
    let m_all = max(m, sink);
    let c = exp(m - m_all);
    return vec2<f32>(c, l * c + exp(sink - m_all));
}
