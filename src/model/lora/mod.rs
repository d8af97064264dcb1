//! LoRA adapters on the host: read from PEFT's format ([`peft`]) or llama.cpp's LoRA GGUF
//! ([`gguf`]), checked against the base model's shapes, then handed to the GPU
//! ([`bank`]) a slot at a time.

pub mod bank;
pub mod gguf;
pub mod peft;

use std::path::{Path, PathBuf};

use super::architecture::ModelConfig;

/// The seven linears a LoRA adapter may target, in the order the GPU bank stores them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum LoraTarget {
    /// `self_attn.q_proj`.
    Q,
    /// `self_attn.k_proj`.
    K,
    /// `self_attn.v_proj`.
    V,
    /// `self_attn.o_proj`.
    O,
    /// `mlp.gate_proj`.
    Gate,
    /// `mlp.up_proj`.
    Up,
    /// `mlp.down_proj`.
    Down,
}

impl LoraTarget {
    /// All seven, in bank order.
    pub const ALL: [Self; 7] = [Self::Q, Self::K, Self::V, Self::O, Self::Gate, Self::Up, Self::Down];

    /// PEFT's (Hugging Face's) module name.
    pub fn hf_name(self) -> &'static str {
        match self {
            Self::Q => "q_proj",
            Self::K => "k_proj",
            Self::V => "v_proj",
            Self::O => "o_proj",
            Self::Gate => "gate_proj",
            Self::Up => "up_proj",
            Self::Down => "down_proj",
        }
    }

    /// llama.cpp's tensor name within a block.
    pub fn gguf_name(self) -> &'static str {
        match self {
            Self::Q => "attn_q",
            Self::K => "attn_k",
            Self::V => "attn_v",
            Self::O => "attn_output",
            Self::Gate => "ffn_gate",
            Self::Up => "ffn_up",
            Self::Down => "ffn_down",
        }
    }

    /// `(out, in)` features of the base linear.
    pub fn shape(self, c: &ModelConfig) -> (usize, usize) {
        match self {
            Self::Q => (c.q_size(), c.hidden_size),
            Self::K | Self::V => (c.kv_size(), c.hidden_size),
            Self::O => (c.hidden_size, c.q_size()),
            Self::Gate | Self::Up => (c.intermediate_size, c.hidden_size),
            Self::Down => (c.hidden_size, c.intermediate_size),
        }
    }

    /// Index in [`Self::ALL`].
    pub fn index(self) -> usize {
        self as usize
    }
}

/// One adapted linear: `y += scale · B (A x)`.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraModule {
    /// The decoder layer.
    pub layer: usize,
    /// Which linear.
    pub target: LoraTarget,
    /// The rank `r`.
    pub rank: usize,
    /// `alpha / r`, or rsLoRA's `alpha / √r`.
    pub scale: f32,
    /// `A`: `[r, in]`, row-major.
    pub a: Vec<f32>,
    /// `B`: `[out, r]`, row-major; Q's and K's rows in the order [`LoraAdapter::qk_rows`] says.
    pub b: Vec<f32>,
}

/// The order of Q's and K's output rows in an adapter's `B`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QkRows {
    /// As Hugging Face stores them (PEFT's files).
    HuggingFace,
    /// Permuted for interleaved RoPE, as llama.cpp's converter stores Llama's.
    Interleaved,
}

/// A LoRA adapter checked against a base model.
#[derive(Debug, Clone, PartialEq)]
pub struct LoraAdapter {
    /// Where it was read from.
    pub path: PathBuf,
    /// Its adapted linears, by layer then target.
    pub modules: Vec<LoraModule>,
    /// The order of Q's and K's rows in `B`.
    pub qk_rows: QkRows,
}

/// Why an adapter was refused.
#[derive(Debug, thiserror::Error)]
pub enum LoraError {
    /// The files could not be read.
    #[error("cannot read the LoRA adapter {path}: {reason}")]
    Read {
        /// The adapter.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
    /// A field or tensor pagoda does not implement, named.
    #[error("LoRA adapter {path}: unsupported {what}")]
    Unsupported {
        /// The adapter.
        path: PathBuf,
        /// The field or tensor and its value.
        what: String,
    },
    /// The adapter was made for another base model.
    #[error("LoRA adapter {path} does not fit the base model: {reason}")]
    Mismatch {
        /// The adapter.
        path: PathBuf,
        /// Which shape or architecture differs.
        reason: String,
    },
    /// A rank above the server's `--max-lora-rank`.
    #[error("LoRA adapter {path} has rank {rank}, above the maximum {max}")]
    RankTooLarge {
        /// The adapter.
        path: PathBuf,
        /// Its largest rank.
        rank: usize,
        /// The limit.
        max: usize,
    },
}

impl LoraAdapter {
    /// Reads the adapter at `path` — a PEFT directory (`adapter_config.json` and
    /// `adapter_model.safetensors`) or a LoRA GGUF file — for a base model of `config`.
    pub fn load(path: impl AsRef<Path>, config: &ModelConfig) -> Result<Self, LoraError> {
        let path = path.as_ref();
        if path.is_dir() { peft::load(path, config) } else { gguf::load(path, config) }
    }

    /// The largest rank of its modules.
    pub fn max_rank(&self) -> usize {
        self.modules.iter().map(|m| m.rank).max().unwrap_or(0)
    }

    /// Refuses the adapter when its rank exceeds `max`.
    pub fn check_rank(&self, max: usize) -> Result<(), LoraError> {
        match self.max_rank() {
            rank if rank > max => Err(LoraError::RankTooLarge { path: self.path.clone(), rank, max }),
            _ => Ok(()),
        }
    }
}

/// Checks one module's `A` `[r, in]` and `B` `[out, r]` shapes against the base model's
/// linear and builds it.
pub(crate) fn module(
    path: &Path,
    config: &ModelConfig,
    (layer, target): (usize, LoraTarget),
    (a, a_shape): (Vec<f32>, &[usize]),
    (b, b_shape): (Vec<f32>, &[usize]),
    scale_of: impl Fn(usize) -> f32,
) -> Result<LoraModule, LoraError> {
    let mismatch = |reason: String| LoraError::Mismatch { path: path.to_owned(), reason };
    if layer >= config.num_hidden_layers {
        return Err(mismatch(format!("layer {layer} of a {}-layer model", config.num_hidden_layers)));
    }
    let (out, inp) = target.shape(config);
    let name = format!("layer {layer} {}", target.hf_name());
    let (rank, a_in) = match *a_shape {
        [r, k] => (r, k),
        _ => return Err(mismatch(format!("{name}: A of shape {a_shape:?}"))),
    };
    if a_in != inp || b_shape != [out, rank] {
        return Err(mismatch(format!(
            "{name}: A {a_shape:?} and B {b_shape:?}, the base linear is [{out}, {inp}] (A [r, {inp}], B [{out}, r])"
        )));
    }
    if rank == 0 {
        return Err(mismatch(format!("{name}: rank 0")));
    }
    Ok(LoraModule { layer, target, rank, scale: scale_of(rank), a, b })
}
