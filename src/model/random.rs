//! Random-weight Llama models of real shapes, written as GGUF: what a benchmark runs on a
//! machine that has a GPU but not the real files (`pagoda random-model`,
//! `scripts/gpu-bench.sh`). Each matrix row is a run of blocks picked at random from a few
//! hundred blocks quantized from uniform values scaled by `1 / sqrt(cols)`, so the file is
//! valid in every weight type, its activations stay in range, and it is written at disk speed.
//! The vocabulary is a byte-level one with numbered filler pieces: it loads, and benchmarks feed
//! token ids.

use std::path::Path;

use super::gguf::{GgufWriteError, GgufWriter, MetadataValue};
use crate::dtype::{DType, quantize};

/// A Llama model's shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomShape {
    /// The name `pagoda random-model --shape` takes.
    pub name: &'static str,
    /// Hidden size.
    pub hidden: usize,
    /// Decoder layers.
    pub layers: usize,
    /// Query heads.
    pub heads: usize,
    /// Width of one head (Qwen3's differ from hidden / heads).
    pub head_dim: usize,
    /// Key/value heads.
    pub kv_heads: usize,
    /// MLP intermediate size.
    pub ffn: usize,
    /// Vocabulary size.
    pub vocab: usize,
    /// Context length.
    pub context: usize,
    /// RoPE base.
    pub rope_theta: f32,
    /// True when the LM head is the embedding table.
    pub tied: bool,
    /// Qwen3's attention: per-head norms of queries and keys (written as `qwen3`).
    pub qk_norm: bool,
    /// A mixture of experts in every layer instead of the dense MLP (written as `qwen3moe`).
    pub experts: Option<RandomExperts>,
}

/// The experts of a mixture-of-experts shape.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RandomExperts {
    /// Experts a layer.
    pub count: usize,
    /// Experts a token uses.
    pub used: usize,
    /// One expert's intermediate size.
    pub ffn: usize,
}

/// The shapes pagoda can write: the default model's, Llama 3.2 1B's, Llama 2 7B's,
/// Qwen3-30B-A3B's and a dense model of its active parameters.
pub const SHAPES: [RandomShape; 5] = [
    RandomShape {
        name: "smollm2-135m",
        hidden: 576,
        layers: 30,
        heads: 9,
        kv_heads: 3,
        head_dim: 64,
        ffn: 1536,
        vocab: 49152,
        context: 8192,
        rope_theta: 100000.0,
        tied: true,
        qk_norm: false,
        experts: None,
    },
    RandomShape {
        name: "llama-3.2-1b",
        hidden: 2048,
        layers: 16,
        heads: 32,
        kv_heads: 8,
        head_dim: 64,
        ffn: 8192,
        vocab: 128256,
        context: 8192,
        rope_theta: 500000.0,
        tied: true,
        qk_norm: false,
        experts: None,
    },
    RandomShape {
        name: "llama-2-7b",
        hidden: 4096,
        layers: 32,
        heads: 32,
        kv_heads: 32,
        head_dim: 128,
        ffn: 11008,
        vocab: 32000,
        context: 4096,
        rope_theta: 10000.0,
        tied: false,
        qk_norm: false,
        experts: None,
    },
    QWEN3_30B_A3B,
    // Qwen3-30B-A3B's active parameters as one dense MLP: 8 experts of 768 make 6144 columns;
    // the same attention (Qwen3's, with Q/K norms), so that the two differ in the MLP alone.
    RandomShape { name: "qwen3-30b-a3b-dense", experts: None, ..QWEN3_30B_A3B },
];

/// Qwen3-30B-A3B: 128 experts of 768 columns, 8 a token.
const QWEN3_30B_A3B: RandomShape = RandomShape {
    name: "qwen3-30b-a3b",
    hidden: 2048,
    layers: 48,
    heads: 32,
    kv_heads: 4,
    head_dim: 128,
    ffn: 6144,
    vocab: 151936,
    context: 40960,
    rope_theta: 1_000_000.0,
    tied: false,
    qk_norm: true,
    experts: Some(RandomExperts { count: 128, used: 8, ffn: 768 }),
};

/// Why a random model could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RandomModelError {
    /// No shape of that name.
    #[error(
        "unknown shape `{0}` (one of: smollm2-135m, llama-3.2-1b, llama-2-7b, qwen3-30b-a3b, qwen3-30b-a3b-dense)"
    )]
    UnknownShape(String),
    /// A weight type whose blocks do not divide the shape's rows.
    #[error("{dtype} blocks of {block} do not divide the {cols}-column matrices of {shape}")]
    BlocksDoNotFit {
        /// The shape.
        shape: &'static str,
        /// The weight type.
        dtype: &'static str,
        /// Its block length.
        block: usize,
        /// The columns that do not fit.
        cols: usize,
    },
    /// A tensor that does not hold its shape.
    #[error(transparent)]
    Tensor(#[from] GgufWriteError),
    /// The file could not be written.
    #[error("writing the model: {0}")]
    Io(#[from] std::io::Error),
}

impl RandomShape {
    /// The shape named `name`.
    pub fn named(name: &str) -> Result<&'static RandomShape, RandomModelError> {
        SHAPES.iter().find(|s| s.name == name).ok_or_else(|| RandomModelError::UnknownShape(name.to_owned()))
    }

    /// Parameters of its matrices (embedding, LM head, routers and every expert included).
    pub fn matrix_params(&self) -> usize {
        self.params(self.experts.map(|e| e.count))
    }

    /// Parameters of the matrices one token uses (its experts only).
    pub fn active_params(&self) -> usize {
        self.params(self.experts.map(|e| e.used))
    }

    fn params(&self, experts: Option<usize>) -> usize {
        let hd = self.head_dim;
        let mlp = match (self.experts, experts) {
            (Some(e), Some(n)) => self.hidden * e.count + n * 3 * self.hidden * e.ffn,
            _ => 3 * self.hidden * self.ffn,
        };
        let per_layer =
            self.hidden * (self.heads + 2 * self.kv_heads) * hd + self.heads * hd * self.hidden + mlp;
        let head = if self.tied { 0 } else { self.vocab * self.hidden };
        self.layers * per_layer + self.vocab * self.hidden + head
    }
}

/// splitmix64: a small, fast generator (no statistical demands here).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [-1, 1).
    fn unit(&mut self) -> f32 {
        (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
    }
}

/// Distinct blocks a matrix's rows are built from.
const TEMPLATE_BLOCKS: usize = 512;

/// A `[rows, cols]` matrix of `dtype`: every block one of [`TEMPLATE_BLOCKS`] blocks quantized
/// from uniform values in ±`scale`, picked at random.
fn random_matrix(rng: &mut Rng, dtype: DType, rows: usize, cols: usize, scale: f32) -> Vec<u8> {
    let values: Vec<f32> = (0..TEMPLATE_BLOCKS * dtype.block_len()).map(|_| rng.unit() * scale).collect();
    let templates = quantize(dtype, &values);
    let block_bytes = templates.len() / TEMPLATE_BLOCKS;
    let blocks = rows * cols / dtype.block_len();
    let mut out = Vec::with_capacity(blocks * block_bytes);
    for _ in 0..blocks {
        let pick = (rng.next() % TEMPLATE_BLOCKS as u64) as usize;
        out.extend_from_slice(&templates[pick * block_bytes..][..block_bytes]);
    }
    out
}

/// GPT-2's byte-to-character map: printable bytes stand for themselves, the others for the
/// characters from U+0100 on, in byte order.
fn byte_level_alphabet() -> Vec<String> {
    let printable =
        |b: u32| (0x21..=0x7e).contains(&b) || (0xa1..=0xac).contains(&b) || (0xae..=0xff).contains(&b);
    let mut next = 0x100;
    (0..256u32)
        .map(|b| {
            let c = if printable(b) {
                b
            } else {
                next += 1;
                next - 1
            };
            char::from_u32(c).map(String::from).unwrap_or_default()
        })
        .collect()
}

/// Writes a random model of `shape` with matrices in `dtype` to `path`; returns its bytes.
pub fn write_random_model(
    path: &Path,
    shape: &RandomShape,
    dtype: DType,
    seed: u64,
) -> Result<u64, RandomModelError> {
    let s = shape;
    let hd = s.head_dim;
    let ffn = s.experts.map_or(s.ffn, |e| e.ffn);
    for cols in [s.hidden, ffn] {
        if cols % dtype.block_len() != 0 {
            return Err(RandomModelError::BlocksDoNotFit {
                shape: s.name,
                dtype: dtype.name(),
                block: dtype.block_len(),
                cols,
            });
        }
    }
    let mut w = GgufWriter::new();
    let u32v = |v: usize| MetadataValue::U32(v as u32);
    let specials = ["<s>", "</s>"];
    let mut tokens: Vec<String> = specials.iter().map(|t| t.to_string()).collect();
    tokens.extend(byte_level_alphabet());
    tokens.extend((tokens.len()..s.vocab).map(|i| format!("<r{i}>")));
    let arch = match (s.experts, s.qk_norm) {
        (Some(_), _) => "qwen3moe",
        (None, true) => "qwen3",
        (None, false) => "llama",
    };
    let key = |k: &str| format!("{arch}.{k}");
    w.metadata("general.architecture", MetadataValue::String(arch.into()))
        .metadata("general.name", MetadataValue::String(format!("pagoda random {}", s.name)))
        .metadata(&key("context_length"), u32v(s.context))
        .metadata(&key("embedding_length"), u32v(s.hidden))
        .metadata(&key("feed_forward_length"), u32v(s.ffn))
        .metadata(&key("block_count"), u32v(s.layers))
        .metadata(&key("attention.head_count"), u32v(s.heads))
        .metadata(&key("attention.head_count_kv"), u32v(s.kv_heads))
        .metadata(&key("attention.key_length"), u32v(hd))
        .metadata(&key("attention.value_length"), u32v(hd))
        .metadata(&key("attention.layer_norm_rms_epsilon"), MetadataValue::F32(1e-5))
        .metadata(&key("rope.freq_base"), MetadataValue::F32(s.rope_theta))
        .metadata(&key("rope.dimension_count"), u32v(hd))
        .metadata(&key("vocab_size"), u32v(s.vocab))
        .metadata("tokenizer.ggml.model", MetadataValue::String("gpt2".into()))
        .metadata("tokenizer.ggml.pre", MetadataValue::String("default".into()))
        .metadata(
            "tokenizer.ggml.token_type",
            MetadataValue::i32s((0..s.vocab).map(|i| if i < specials.len() { 3 } else { 1 })),
        )
        .metadata("tokenizer.ggml.tokens", MetadataValue::strings(&tokens))
        .metadata("tokenizer.ggml.merges", MetadataValue::strings(Vec::<String>::new()))
        .metadata("tokenizer.ggml.bos_token_id", MetadataValue::U32(0))
        .metadata("tokenizer.ggml.eos_token_id", MetadataValue::U32(1));
    if let Some(e) = s.experts {
        w.metadata(&key("expert_count"), u32v(e.count))
            .metadata(&key("expert_used_count"), u32v(e.used))
            .metadata(&key("expert_feed_forward_length"), u32v(e.ffn));
    }
    let mut rng = Rng(seed);
    let matrix = |rng: &mut Rng, w: &mut GgufWriter, name: &str, rows: usize, cols: usize, scale: f32| {
        let data = random_matrix(rng, dtype, rows, cols, scale);
        w.tensor(name, dtype, &[rows, cols], data).map(|_| ())
    };
    let inv_sqrt = |n: usize| 1.0 / (n as f32).sqrt();
    let ones = |n: usize| quantize(DType::F32, &vec![1.0; n]);
    matrix(&mut rng, &mut w, "token_embd.weight", s.vocab, s.hidden, 1.0)?;
    for l in 0..s.layers {
        let name = |t: &str| format!("blk.{l}.{t}.weight");
        w.tensor(&name("attn_norm"), DType::F32, &[s.hidden], ones(s.hidden))?;
        matrix(&mut rng, &mut w, &name("attn_q"), s.heads * hd, s.hidden, inv_sqrt(s.hidden))?;
        matrix(&mut rng, &mut w, &name("attn_k"), s.kv_heads * hd, s.hidden, inv_sqrt(s.hidden))?;
        matrix(&mut rng, &mut w, &name("attn_v"), s.kv_heads * hd, s.hidden, inv_sqrt(s.hidden))?;
        matrix(&mut rng, &mut w, &name("attn_output"), s.hidden, s.heads * hd, inv_sqrt(s.hidden))?;
        if s.qk_norm {
            // Qwen3's per-head norms of queries and keys
            w.tensor(&name("attn_q_norm"), DType::F32, &[hd], ones(hd))?;
            w.tensor(&name("attn_k_norm"), DType::F32, &[hd], ones(hd))?;
        }
        w.tensor(&name("ffn_norm"), DType::F32, &[s.hidden], ones(s.hidden))?;
        match s.experts {
            None => {
                matrix(&mut rng, &mut w, &name("ffn_gate"), s.ffn, s.hidden, inv_sqrt(s.hidden))?;
                matrix(&mut rng, &mut w, &name("ffn_up"), s.ffn, s.hidden, inv_sqrt(s.hidden))?;
                matrix(&mut rng, &mut w, &name("ffn_down"), s.hidden, s.ffn, inv_sqrt(s.ffn))?;
            }
            Some(e) => {
                // the router in f32, as llama.cpp's converter keeps it
                let router = random_matrix(&mut rng, DType::F32, e.count, s.hidden, inv_sqrt(s.hidden));
                w.tensor(&name("ffn_gate_inp"), DType::F32, &[e.count, s.hidden], router)?;
                for (part, rows, cols) in
                    [("gate", e.ffn, s.hidden), ("up", e.ffn, s.hidden), ("down", s.hidden, e.ffn)]
                {
                    let data = random_matrix(&mut rng, dtype, e.count * rows, cols, inv_sqrt(cols));
                    w.tensor(&name(&format!("ffn_{part}_exps")), dtype, &[e.count, rows, cols], data)?;
                }
            }
        }
    }
    w.tensor("output_norm.weight", DType::F32, &[s.hidden], ones(s.hidden))?;
    if !s.tied {
        matrix(&mut rng, &mut w, "output.weight", s.vocab, s.hidden, inv_sqrt(s.hidden))?;
    }
    w.write(path)?;
    Ok(std::fs::metadata(path)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelFiles;

    #[test]
    fn a_random_mixture_of_experts_loads_with_its_experts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("moe.gguf");
        let experts = RandomExperts { count: 8, used: 2, ffn: 64 };
        let shape = RandomShape {
            name: "tiny-moe",
            hidden: 128,
            layers: 2,
            head_dim: 64,
            vocab: 600,
            experts: Some(experts),
            ..QWEN3_30B_A3B
        };
        write_random_model(&path, &shape, DType::Q4_0, 3).unwrap();
        let files = ModelFiles::open(&path).unwrap();
        let moe = files.config.moe.unwrap();
        assert_eq!((moe.num_experts, moe.experts_per_token, moe.expert_intermediate_size), (8, 2, 64));
        assert_eq!((files.config.architecture.as_str(), files.config.head_dim), ("qwen3moe", 64));
        let w = files.llama_weights().unwrap();
        let crate::model::weights::MlpWeights::Experts { router, experts, .. } = &w.layers[1].mlp else {
            panic!("a mixture of experts")
        };
        assert_eq!((router.dtype, experts.len(), experts[7].down_proj.dtype), (DType::F32, 8, DType::Q4_0));
        let footprint = crate::model::footprint::Footprint::of(&w, 2);
        assert_eq!(footprint.parameters as usize, shape.matrix_params() + (1 + 2 * 2) * 128 + 2 * 2 * 64);
        assert_eq!(footprint.parameters - footprint.active_parameters, 2 * 6 * 3 * 128 * 64);
        assert_eq!(shape.matrix_params() - shape.active_params(), 2 * 6 * 3 * 128 * 64);
    }

    #[test]
    fn a_random_model_loads_with_its_shape() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("smol.gguf");
        let shape = RandomShape::named("smollm2-135m").unwrap();
        let bytes = write_random_model(&path, shape, DType::Q8_0, 7).unwrap();
        assert_eq!(bytes, std::fs::metadata(&path).unwrap().len());
        let files = ModelFiles::open(&path).unwrap();
        let c = &files.config;
        let got = (c.hidden_size, c.num_hidden_layers, c.num_attention_heads, c.num_key_value_heads);
        assert_eq!(got, (576, 30, 9, 3));
        assert_eq!((c.intermediate_size, c.vocab_size), (1536, 49152));
        assert_eq!(files.tokenizer.vocab_size(), 49152);
        let w = files.llama_weights().unwrap();
        assert_eq!(w.layers[0].dense_mlp().unwrap().gate_proj.dtype, DType::Q8_0);
        assert_eq!(w.lm_head.data.as_ptr(), w.embed_tokens.data.as_ptr(), "tied");
    }

    #[test]
    fn blocks_that_do_not_divide_the_rows_and_unknown_shapes_are_errors() {
        let dir = tempfile::tempdir().unwrap();
        let shape = RandomShape::named("smollm2-135m").unwrap();
        let err = write_random_model(&dir.path().join("x.gguf"), shape, DType::Q4K, 0).unwrap_err();
        assert!(matches!(err, RandomModelError::BlocksDoNotFit { cols: 576, .. }), "{err}");
        assert!(matches!(RandomShape::named("llama-9"), Err(RandomModelError::UnknownShape(_))));
    }
}
