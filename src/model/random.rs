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
}

/// The shapes pagoda can write: the default model's, Llama 3.2 1B's and Llama 2 7B's.
pub const SHAPES: [RandomShape; 3] = [
    RandomShape {
        name: "smollm2-135m",
        hidden: 576,
        layers: 30,
        heads: 9,
        kv_heads: 3,
        ffn: 1536,
        vocab: 49152,
        context: 8192,
        rope_theta: 100000.0,
        tied: true,
    },
    RandomShape {
        name: "llama-3.2-1b",
        hidden: 2048,
        layers: 16,
        heads: 32,
        kv_heads: 8,
        ffn: 8192,
        vocab: 128256,
        context: 8192,
        rope_theta: 500000.0,
        tied: true,
    },
    RandomShape {
        name: "llama-2-7b",
        hidden: 4096,
        layers: 32,
        heads: 32,
        kv_heads: 32,
        ffn: 11008,
        vocab: 32000,
        context: 4096,
        rope_theta: 10000.0,
        tied: false,
    },
];

/// Why a random model could not be written.
#[derive(Debug, thiserror::Error)]
pub enum RandomModelError {
    /// No shape of that name.
    #[error("unknown shape `{0}` (one of: smollm2-135m, llama-3.2-1b, llama-2-7b)")]
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

    /// Parameters of its matrices (embedding and LM head included).
    pub fn matrix_params(&self) -> usize {
        let hd = self.hidden / self.heads;
        let per_layer = self.hidden * (self.heads + 2 * self.kv_heads) * hd
            + self.heads * hd * self.hidden
            + 3 * self.hidden * self.ffn;
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
    shape: &'static RandomShape,
    dtype: DType,
    seed: u64,
) -> Result<u64, RandomModelError> {
    let s = shape;
    let hd = s.hidden / s.heads;
    for cols in [s.hidden, s.ffn] {
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
    w.metadata("general.architecture", MetadataValue::String("llama".into()))
        .metadata("general.name", MetadataValue::String(format!("pagoda random {}", s.name)))
        .metadata("llama.context_length", u32v(s.context))
        .metadata("llama.embedding_length", u32v(s.hidden))
        .metadata("llama.feed_forward_length", u32v(s.ffn))
        .metadata("llama.block_count", u32v(s.layers))
        .metadata("llama.attention.head_count", u32v(s.heads))
        .metadata("llama.attention.head_count_kv", u32v(s.kv_heads))
        .metadata("llama.attention.layer_norm_rms_epsilon", MetadataValue::F32(1e-5))
        .metadata("llama.rope.freq_base", MetadataValue::F32(s.rope_theta))
        .metadata("llama.rope.dimension_count", u32v(hd))
        .metadata("llama.vocab_size", u32v(s.vocab))
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
    let mut rng = Rng(seed);
    let mut matrix = |w: &mut GgufWriter, name: &str, rows: usize, cols: usize, scale: f32| {
        let data = random_matrix(&mut rng, dtype, rows, cols, scale);
        w.tensor(name, dtype, &[rows, cols], data).map(|_| ())
    };
    let inv_sqrt = |n: usize| 1.0 / (n as f32).sqrt();
    let ones = |n: usize| quantize(DType::F32, &vec![1.0; n]);
    matrix(&mut w, "token_embd.weight", s.vocab, s.hidden, 1.0)?;
    for l in 0..s.layers {
        let name = |t: &str| format!("blk.{l}.{t}.weight");
        w.tensor(&name("attn_norm"), DType::F32, &[s.hidden], ones(s.hidden))?;
        matrix(&mut w, &name("attn_q"), s.heads * hd, s.hidden, inv_sqrt(s.hidden))?;
        matrix(&mut w, &name("attn_k"), s.kv_heads * hd, s.hidden, inv_sqrt(s.hidden))?;
        matrix(&mut w, &name("attn_v"), s.kv_heads * hd, s.hidden, inv_sqrt(s.hidden))?;
        matrix(&mut w, &name("attn_output"), s.hidden, s.heads * hd, inv_sqrt(s.hidden))?;
        w.tensor(&name("ffn_norm"), DType::F32, &[s.hidden], ones(s.hidden))?;
        matrix(&mut w, &name("ffn_gate"), s.ffn, s.hidden, inv_sqrt(s.hidden))?;
        matrix(&mut w, &name("ffn_up"), s.ffn, s.hidden, inv_sqrt(s.hidden))?;
        matrix(&mut w, &name("ffn_down"), s.hidden, s.ffn, inv_sqrt(s.ffn))?;
    }
    w.tensor("output_norm.weight", DType::F32, &[s.hidden], ones(s.hidden))?;
    if !s.tied {
        matrix(&mut w, "output.weight", s.vocab, s.hidden, inv_sqrt(s.hidden))?;
    }
    w.write(path)?;
    Ok(std::fs::metadata(path)?.len())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelFiles;

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
