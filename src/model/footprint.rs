//! What a model holds and what decoding one token reads of it: parameters in all and active
//! (a mixture of experts uses `experts_per_token` of its experts, and its shared expert), weight
//! bytes in all and read a token (the token embedding's one row, and only the chosen experts of
//! each layer).

use super::tensor::TensorView;
use super::weights::{LlamaWeights, MlpWeights};

/// A model's parameters and weight bytes, in all and per decoded token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Footprint {
    /// Every weight's elements.
    pub parameters: u64,
    /// The elements one token's forward pass uses: all but the unchosen experts (the token
    /// embedding counts whole, as parameter counts do).
    pub active_parameters: u64,
    /// Every weight's stored bytes.
    pub bytes: u64,
    /// Stored bytes one decoded token reads: the embedding's one row, every other weight
    /// except the experts no token chose (a batch of one chooses `experts_per_token`).
    pub bytes_per_token: u64,
}

impl Footprint {
    /// The footprint of `w`, whose layers choose `experts_per_token` experts each (ignored for
    /// dense layers).
    pub fn of(w: &LlamaWeights<'_>, experts_per_token: usize) -> Self {
        let mut f = Self::default();
        let mut add = |t: &TensorView<'_>, active: bool| {
            let (n, b) = (t.num_elements() as u64, t.data.len() as u64);
            f.parameters += n;
            f.bytes += b;
            if active {
                f.active_parameters += n;
                f.bytes_per_token += b;
            }
        };
        let tied = w.lm_head.data.as_ptr() == w.embed_tokens.data.as_ptr();
        add(&w.embed_tokens, true);
        if !tied {
            add(&w.lm_head, true);
        }
        add(&w.norm, true);
        for layer in &w.layers {
            for t in [
                &layer.attn_norm,
                &layer.q_proj,
                &layer.k_proj,
                &layer.v_proj,
                &layer.o_proj,
                &layer.ffn_norm,
            ] {
                add(t, true);
            }
            for t in layer.qkv_bias.iter().flatten().chain(layer.qk_norm.iter().flatten()) {
                add(t, true);
            }
            for t in layer.post_norms.iter().flatten().chain(&layer.o_bias).chain(&layer.sinks) {
                add(t, true);
            }
            match &layer.mlp {
                MlpWeights::Dense(m) => {
                    [&m.gate_proj, &m.up_proj, &m.down_proj].into_iter().for_each(|t| add(t, true))
                }
                MlpWeights::Experts { router, router_bias, experts, shared } => {
                    router_bias.iter().chain([router]).for_each(|t| add(t, true));
                    if let Some(s) = shared {
                        [&s.gate, &s.mlp.gate_proj, &s.mlp.up_proj, &s.mlp.down_proj]
                            .into_iter()
                            .for_each(|t| add(t, true));
                    }
                    for (e, m) in experts.iter().enumerate() {
                        // which experts a token takes varies; each costs the same
                        let active = e < experts_per_token;
                        [&m.gate_proj, &m.up_proj, &m.down_proj]
                            .into_iter()
                            .chain(m.biases.iter().flatten())
                            .for_each(|t| add(t, active));
                    }
                }
            }
        }
        // a token reads one row of the embedding, unless the head reads it whole
        if !tied {
            let table = w.embed_tokens.data.len() as u64;
            let rows = w.embed_tokens.shape.first().copied().unwrap_or(1).max(1) as u64;
            f.bytes_per_token -= table - table / rows;
        }
        f
    }
}
