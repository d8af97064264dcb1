//! Mixture-of-experts layers: what a config says about its experts, and which experts each
//! token of a batch goes to with what weight (the router's rule applied to its logits).
//!
//! The router's logits come from the GPU (a plain linear, so a token's logits do not depend on
//! its batch) and so does the choice (`shaders/moe_route.wgsl`, a row at a time, so a token's
//! experts and weights depend on its own logits alone); [`MoeConfig::route`] is the rule on the
//! host, which the kernel's tests hold it to, and [`group_by_expert`] groups a batch by the
//! device's choices.

use serde_json::Value;

use super::gguf::{GgufError, GgufFile};
use crate::gpu::{MoeRouting, RouteRule};

/// Why a config's experts were refused; `ConfigError` takes each case as its own.
#[derive(Debug, thiserror::Error)]
pub enum MoeConfigError {
    /// A required field is absent.
    #[error("model config is missing field {0:?}")]
    MissingField(String),
    /// A field has a value of the wrong type or out of range.
    #[error("model config field {field:?} is invalid: {reason}")]
    InvalidField {
        /// The field.
        field: String,
        /// What is wrong.
        reason: String,
    },
    /// Reading GGUF metadata failed.
    #[error(transparent)]
    Gguf(#[from] GgufError),
}

/// How a router turns a token's logits into its experts' weights.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouterRule {
    /// Softmax over every expert, then the top k; with `renormalize` their probabilities are
    /// divided by their sum (Mixtral always; Qwen3-MoE by `norm_topk_prob`).
    SoftmaxTopK {
        /// Divide the chosen probabilities by their sum.
        renormalize: bool,
    },
    /// The top k logits, then a softmax over those k (gpt-oss).
    TopKSoftmax,
}

/// A mixture-of-experts layer's shape and router.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MoeConfig {
    /// Experts in each layer.
    pub num_experts: usize,
    /// Experts each token uses.
    pub experts_per_token: usize,
    /// Intermediate width of one expert's gated MLP.
    pub expert_intermediate_size: usize,
    /// How the router picks and weighs them.
    pub rule: RouterRule,
    /// Intermediate width of the shared expert every token also goes through, its output
    /// times `sigmoid(shared_expert_gate · x)` (Qwen2-MoE); `None`: no shared expert.
    pub shared_expert_intermediate_size: Option<usize>,
}

impl MoeConfig {
    /// The experts of an HF config (`qwen3_moe`, `qwen2_moe`, `mixtral`, `gpt_oss`), `None`
    /// for a dense family; which layers have them: [`hf_expert_layers`].
    pub fn from_hf(architecture: &str, config: &Value) -> Result<Option<Self>, MoeConfigError> {
        let field = |name: &str| config.get(name).filter(|v| !v.is_null());
        let count = |name: &str| hf_count(config, name);
        let moe = match architecture {
            "qwen3_moe" | "qwen2_moe" => {
                let renormalize = match field("norm_topk_prob") {
                    None => false,
                    Some(v) => {
                        v.as_bool().ok_or_else(|| invalid("norm_topk_prob", format!("{v} is not a bool")))?
                    }
                };
                Self {
                    num_experts: count("num_experts")?,
                    experts_per_token: count("num_experts_per_tok")?,
                    expert_intermediate_size: count("moe_intermediate_size")?,
                    rule: RouterRule::SoftmaxTopK { renormalize },
                    shared_expert_intermediate_size: match architecture {
                        "qwen2_moe" => Some(count("shared_expert_intermediate_size")?),
                        _ => None,
                    },
                }
            }
            "mixtral" => Self {
                num_experts: count("num_local_experts")?,
                experts_per_token: count("num_experts_per_tok")?,
                expert_intermediate_size: count("intermediate_size")?,
                rule: RouterRule::SoftmaxTopK { renormalize: true },
                shared_expert_intermediate_size: None,
            },
            "gpt_oss" => Self {
                num_experts: count("num_local_experts")?,
                experts_per_token: count("num_experts_per_tok")?,
                expert_intermediate_size: count("intermediate_size")?,
                rule: RouterRule::TopKSoftmax,
                shared_expert_intermediate_size: None,
            },
            _ => return Ok(None),
        };
        moe.validate().map(Some)
    }

    /// The experts of a GGUF file's metadata (`{arch}.expert_count` and the rest), `None` when
    /// it has none. Qwen3-MoE and Mixtral (a `llama` file with experts) renormalise the
    /// chosen weights, as llama.cpp does for them, Qwen2-MoE does not (llama.cpp's
    /// `qwen2moe`), unless `{arch}.expert_weights_norm` says otherwise; gpt-oss takes the
    /// softmax of the top k logits. A shared expert has its width in
    /// `{arch}.expert_shared_feed_forward_length`.
    pub fn from_gguf(
        architecture: &str,
        gguf: &GgufFile,
        feed_forward: usize,
    ) -> Result<Option<Self>, MoeConfigError> {
        let key = |k: &str| format!("{architecture}.{k}");
        let count = |k: &str| -> Result<Option<usize>, MoeConfigError> {
            match gguf.get_int(&key(k))? {
                None => Ok(None),
                Some(v) => {
                    usize::try_from(v).map(Some).map_err(|_| invalid(&key(k), format!("{v} is negative")))
                }
            }
        };
        let Some(num_experts) = count("expert_count")?.filter(|&n| n > 0) else { return Ok(None) };
        let experts_per_token = count("expert_used_count")?
            .ok_or_else(|| MoeConfigError::MissingField(key("expert_used_count")))?;
        let expert_intermediate_size = count("expert_feed_forward_length")?.unwrap_or(feed_forward);
        let renormalize = gguf.get_bool(&key("expert_weights_norm"))?.unwrap_or(architecture != "qwen2moe");
        let rule = match architecture {
            "gpt-oss" => RouterRule::TopKSoftmax,
            _ => RouterRule::SoftmaxTopK { renormalize },
        };
        let shared_expert_intermediate_size = count("expert_shared_feed_forward_length")?;
        let moe = Self {
            num_experts,
            experts_per_token,
            expert_intermediate_size,
            rule,
            shared_expert_intermediate_size,
        };
        moe.validate().map(Some)
    }

    fn validate(self) -> Result<Self, MoeConfigError> {
        if self.num_experts == 0 || self.expert_intermediate_size == 0 {
            return Err(invalid("num_experts", "experts and their width must be positive".into()));
        }
        if self.shared_expert_intermediate_size == Some(0) {
            return Err(invalid("shared_expert_intermediate_size", "the shared expert's width is 0".into()));
        }
        if self.experts_per_token == 0 || self.experts_per_token > self.num_experts {
            return Err(invalid(
                "num_experts_per_tok",
                format!("{} of {} experts", self.experts_per_token, self.num_experts),
            ));
        }
        Ok(self)
    }

    /// The device routing of this config (`Step::moe_route`): its rule, and the shared
    /// expert's gate logit after the router's where there is one.
    pub fn routing(&self) -> MoeRouting {
        MoeRouting {
            experts: self.num_experts,
            k: self.experts_per_token,
            rule: match self.rule {
                RouterRule::SoftmaxTopK { renormalize: false } => RouteRule::SoftmaxTopK,
                RouterRule::SoftmaxTopK { renormalize: true } => RouteRule::SoftmaxTopKRenormalized,
                RouterRule::TopKSoftmax => RouteRule::TopKSoftmax,
            },
            shared: self.shared_expert_intermediate_size.is_some(),
        }
    }

    /// One token's experts and weights, from its router logits (`num_experts` of them): the
    /// `experts_per_token` chosen, largest first (ties to the lower expert), each with its
    /// weight. In f32, in one fixed order: the rule the device's routing kernel follows (its
    /// `exp` may differ in the last bits), which its tests compare it against.
    pub fn route(&self, logits: &[f32]) -> Vec<(usize, f32)> {
        let k = self.experts_per_token;
        let by_logit = |a: &usize, b: &usize| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b));
        let mut order: Vec<usize> = (0..logits.len()).collect();
        order.sort_by(by_logit);
        order.truncate(k);
        match self.rule {
            RouterRule::SoftmaxTopK { renormalize } => {
                // softmax is monotonic: the top k logits are the top k probabilities
                let probs = softmax(logits);
                let chosen: Vec<(usize, f32)> = order.iter().map(|&e| (e, probs[e])).collect();
                if !renormalize {
                    return chosen;
                }
                let sum = chosen.iter().fold(0.0f32, |s, &(_, p)| s + p);
                chosen.into_iter().map(|(e, p)| (e, p / sum)).collect()
            }
            RouterRule::TopKSoftmax => {
                let top: Vec<f32> = order.iter().map(|&e| logits[e]).collect();
                order.into_iter().zip(softmax(&top)).collect()
            }
        }
    }
}

/// Per layer of an HF config with `num_layers` layers, whether its MLP is the mixture of
/// experts: every layer of Mixtral and gpt-oss, none of a dense family. Qwen2-MoE and Qwen3-MoE
/// follow transformers: layer `i` has experts unless `mlp_only_layers` lists it, `(i + 1) %
/// decoder_sparse_step != 0` (default 1) or `num_experts` is 0; its dense MLP is then
/// `intermediate_size` wide. A listed layer past the last, or a step of 0, is refused.
pub fn hf_expert_layers(
    architecture: &str,
    config: &Value,
    num_layers: usize,
) -> Result<Vec<bool>, MoeConfigError> {
    match architecture {
        "mixtral" | "gpt_oss" => return Ok(vec![true; num_layers]),
        "qwen3_moe" | "qwen2_moe" => {}
        _ => return Ok(vec![false; num_layers]),
    }
    let field = |name: &str| config.get(name).filter(|v| !v.is_null());
    let step = match field("decoder_sparse_step") {
        None => 1,
        Some(_) => hf_count(config, "decoder_sparse_step")?,
    };
    if step == 0 {
        return Err(invalid("decoder_sparse_step", "0 puts experts on no layer's step".into()));
    }
    let mut dense = vec![hf_count(config, "num_experts")? == 0; num_layers];
    if let Some(listed) = field("mlp_only_layers") {
        let listed =
            listed.as_array().ok_or_else(|| invalid("mlp_only_layers", format!("{listed} is not a list")))?;
        for v in listed {
            match v.as_u64().map(|i| i as usize) {
                Some(i) if i < num_layers => dense[i] = true,
                _ => {
                    return Err(invalid("mlp_only_layers", format!("{v} is not a layer of 0..{num_layers}")));
                }
            }
        }
    }
    Ok(dense.iter().enumerate().map(|(i, &d)| !d && (i + 1).is_multiple_of(step)).collect())
}

/// HF config field `name` as a count: absent or null is missing, anything but a
/// non-negative integer invalid.
fn hf_count(config: &Value, name: &str) -> Result<usize, MoeConfigError> {
    let v =
        config.get(name).filter(|v| !v.is_null()).ok_or_else(|| MoeConfigError::MissingField(name.into()))?;
    v.as_u64().map(|n| n as usize).ok_or_else(|| invalid(name, format!("{v} is not a count")))
}

/// `exp(x - max) / sum`, the sum in index order.
fn softmax(x: &[f32]) -> Vec<f32> {
    let max = x.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exps: Vec<f32> = x.iter().map(|&v| (v - max).exp()).collect();
    let sum = exps.iter().fold(0.0f32, |s, &e| s + e);
    exps.into_iter().map(|e| e / sum).collect()
}

/// A batch's tokens grouped by expert: for each expert, the tokens that chose it (ascending),
/// where each one's output goes among the `experts_per_token` rows of its token (`slot * T +
/// token`, slot-major) and its weight.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ExpertRows {
    /// Tokens (rows of the batch).
    pub tokens: Vec<u32>,
    /// Output row of each: `slot * T + token`.
    pub outputs: Vec<u32>,
    /// Router weight of each (f32 bits).
    pub weights: Vec<u32>,
}

/// A batch's tokens grouped by the experts the device chose for them: `ids` and `weights`
/// (f32 bits) slot-major, `k` slots of `T` tokens, as `Step::moe_route` writes them; one
/// [`ExpertRows`] per expert of `num_experts`, tokens ascending.
pub fn group_by_expert(num_experts: usize, k: usize, ids: &[u32], weights: &[u32]) -> Vec<ExpertRows> {
    let tokens = ids.len() / k;
    let mut groups = vec![ExpertRows::default(); num_experts];
    for t in 0..tokens {
        for slot in 0..k {
            let i = slot * tokens + t;
            let g = &mut groups[ids[i] as usize];
            g.tokens.push(t as u32);
            g.outputs.push(i as u32);
            g.weights.push(weights[i]);
        }
    }
    groups
}

fn invalid(field: &str, reason: String) -> MoeConfigError {
    MoeConfigError::InvalidField { field: field.into(), reason }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn moe(rule: RouterRule) -> MoeConfig {
        MoeConfig {
            num_experts: 4,
            experts_per_token: 2,
            expert_intermediate_size: 8,
            rule,
            shared_expert_intermediate_size: None,
        }
    }

    #[test]
    fn softmax_then_top_k_renormalised_weighs_the_two_largest() {
        let logits = [0.0, 2.0, 1.0, -1.0];
        let routed = moe(RouterRule::SoftmaxTopK { renormalize: true }).route(&logits);
        assert_eq!(routed.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 2]);
        let e1 = 1.0f32.exp();
        assert!((routed[0].1 - e1 / (e1 + 1.0)).abs() < 1e-6);
        assert!((routed[0].1 + routed[1].1 - 1.0).abs() < 1e-6);
        let plain = moe(RouterRule::SoftmaxTopK { renormalize: false }).route(&logits);
        let all: f32 = logits.iter().map(|l| l.exp()).sum();
        assert!((plain[0].1 - 2.0f32.exp() / all).abs() < 1e-6);
    }

    #[test]
    fn top_k_then_softmax_equals_renormalised_softmax_and_ties_go_to_the_lower_expert() {
        let logits = [0.5, 3.0, 0.5, 0.5];
        let a = moe(RouterRule::TopKSoftmax).route(&logits);
        assert_eq!(a.iter().map(|r| r.0).collect::<Vec<_>>(), [1, 0]);
        let b = moe(RouterRule::SoftmaxTopK { renormalize: true }).route(&logits);
        for (x, y) in a.iter().zip(&b) {
            assert_eq!(x.0, y.0);
            assert!((x.1 - y.1).abs() < 1e-6);
        }
    }

    #[test]
    fn rows_are_grouped_by_expert_with_slot_major_outputs() {
        // token 0 takes experts 1 then 2, token 1 experts 0 then 3 (slot-major)
        let ids = [1, 0, /* slot 1 */ 2, 3];
        let weights = [7, 8, /* slot 1 */ 9, 10];
        let groups = group_by_expert(4, 2, &ids, &weights);
        assert_eq!(groups[1].weights, [7]);
        assert_eq!(groups[2].weights, [9]);
        assert_eq!(groups[0].tokens, [1]);
        assert_eq!(groups[0].outputs, [1]); // slot 0 of token 1
        assert_eq!(groups[1].tokens, [0]);
        assert_eq!(groups[1].outputs, [0]);
        assert_eq!(groups[2].outputs, [2]); // slot 1 of token 0: 1 * 2 + 0
        assert_eq!(groups[3].outputs, [3]);
    }

    #[test]
    fn qwen_layers_between_expert_layers_are_dense_as_transformers_places_them() {
        let mut q: Value =
            serde_json::json!({"num_experts": 8, "decoder_sparse_step": 2, "mlp_only_layers": [3]});
        let layers = |q: &Value, arch: &str| hf_expert_layers(arch, q, 6);
        // (i + 1) % 2 == 0 leaves 1, 3 and 5; the list takes 3 out
        assert_eq!(layers(&q, "qwen3_moe").unwrap(), [false, true, false, false, false, true]);
        assert_eq!(layers(&q, "qwen2_moe").unwrap(), [false, true, false, false, false, true]);
        q["decoder_sparse_step"] = Value::Null;
        q["mlp_only_layers"] = serde_json::json!([0]);
        assert_eq!(
            layers(&q, "qwen3_moe").unwrap(),
            [false, true, true, true, true, true],
            "step 1 by default"
        );
        q["num_experts"] = serde_json::json!(0);
        assert_eq!(layers(&q, "qwen3_moe").unwrap(), [false; 6], "no experts: every layer dense");
        assert_eq!(layers(&q, "mixtral").unwrap(), [true; 6]);
        assert_eq!(layers(&q, "qwen3").unwrap(), [false; 6]);
        q["num_experts"] = serde_json::json!(8);
        q["mlp_only_layers"] = serde_json::json!([6]);
        assert!(
            matches!(layers(&q, "qwen3_moe"), Err(MoeConfigError::InvalidField { field, .. }) if field == "mlp_only_layers")
        );
        q["mlp_only_layers"] = serde_json::json!([]);
        q["decoder_sparse_step"] = serde_json::json!(0);
        assert!(
            matches!(layers(&q, "qwen3_moe"), Err(MoeConfigError::InvalidField { field, .. }) if field == "decoder_sparse_step")
        );
    }

    #[test]
    fn configs_are_read_and_bad_ones_refused() {
        let q: Value = serde_json::json!({"num_experts": 8, "num_experts_per_tok": 2, "moe_intermediate_size": 32, "norm_topk_prob": true});
        let m = MoeConfig::from_hf("qwen3_moe", &q).unwrap().unwrap();
        assert_eq!((m.num_experts, m.experts_per_token, m.expert_intermediate_size), (8, 2, 32));
        assert_eq!(m.rule, RouterRule::SoftmaxTopK { renormalize: true });
        let mut too_many = q.clone();
        too_many["num_experts_per_tok"] = serde_json::json!(9);
        assert!(matches!(
            MoeConfig::from_hf("qwen3_moe", &too_many),
            Err(MoeConfigError::InvalidField { .. })
        ));
        assert_eq!(MoeConfig::from_hf("qwen3", &q).unwrap(), None);
        let x: Value =
            serde_json::json!({"num_local_experts": 8, "num_experts_per_tok": 2, "intermediate_size": 64});
        let m = MoeConfig::from_hf("mixtral", &x).unwrap().unwrap();
        assert_eq!((m.expert_intermediate_size, m.rule), (64, RouterRule::SoftmaxTopK { renormalize: true }));
        assert_eq!(m.shared_expert_intermediate_size, None);
        let mut shared = q.clone();
        shared["norm_topk_prob"] = Value::Null;
        shared["shared_expert_intermediate_size"] = serde_json::json!(64);
        let m = MoeConfig::from_hf("qwen2_moe", &shared).unwrap().unwrap();
        assert_eq!(m.shared_expert_intermediate_size, Some(64));
        assert_eq!(m.rule, RouterRule::SoftmaxTopK { renormalize: false }, "Qwen2-MoE's default");
        assert!(matches!(
            MoeConfig::from_hf("qwen2_moe", &q),
            Err(MoeConfigError::MissingField(f)) if f == "shared_expert_intermediate_size"
        ));
        shared["shared_expert_intermediate_size"] = serde_json::json!(0);
        assert!(matches!(MoeConfig::from_hf("qwen2_moe", &shared), Err(MoeConfigError::InvalidField { .. })));
    }
}
