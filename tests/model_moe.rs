//! Mixture-of-experts layers keep the invariance rule bit for bit: a token's logits do not
//! depend on the other sequences of its batch (which share its experts or not), on how its
//! prompt is cut into chunks, or on whether it is decoded one token at a time. The tiny
//! Qwen3-MoE (with and without dense layers between expert layers), Mixtral, Qwen2-MoE and
//! gpt-oss models of scripts/tiny-families.py
//! (`PAGODA_FAMILIES_DIR`);
//! their parity with transformers is tests/model_families.rs'.

use std::path::PathBuf;

use pagoda::dtype::DType;
use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::{GpuContext, GpuOptions, KvCacheShape, KvPrecision};
use pagoda::model::architecture::ModelConfig;
use pagoda::model::footprint::Footprint;
use pagoda::model::gguf::{GgufFile, GgufWriter};
use pagoda::model::llama::{ForwardBatch, LlamaModel, Workspace, WorkspaceLimits};
use pagoda::model::weights::WeightError;
use pagoda::model::{ModelError, ModelFiles};
use serde_json::Value;

const BLOCK: usize = 4;
/// Blocks each sequence owns (enough for the longest fixture prompt, gpt-oss's 105-token chat).
const SEQ_BLOCKS: usize = 27;

fn prompts(name: &str) -> Vec<Vec<u32>> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/families/{name}.json"));
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let ids = |v: &Value| v.as_array().unwrap().iter().map(|i| i.as_u64().unwrap() as u32).collect();
    fixture["prompts"].as_array().unwrap().iter().map(|p| ids(&p["ids"])).collect()
}

/// A model with a workspace and a KV cache in which sequence `s` owns blocks
/// `1 + s * SEQ_BLOCKS ..`.
struct Runner {
    ctx: GpuContext,
    model: LlamaModel,
    ws: Workspace,
    cache: pagoda::gpu::KvCache,
}

impl Runner {
    fn new(path: PathBuf, seqs: usize) -> Self {
        let ctx = GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap()).unwrap();
        let files = ModelFiles::open(path).unwrap();
        let model = LlamaModel::load(&ctx, &files, false).unwrap();
        let c = model.config().clone();
        let limits = WorkspaceLimits {
            max_tokens: seqs * SEQ_BLOCKS * BLOCK,
            max_seqs: seqs,
            max_logits_rows: seqs * SEQ_BLOCKS * BLOCK,
            max_blocks_per_seq: SEQ_BLOCKS,
        };
        let ws = Workspace::new(&ctx, &model, limits).unwrap();
        let shape = KvCacheShape {
            num_layers: c.num_hidden_layers,
            num_blocks: 1 + seqs * SEQ_BLOCKS,
            block_size: BLOCK,
            num_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
        };
        let cache = ctx.kv_cache(shape, KvPrecision::F32).unwrap();
        Self { ctx, model, ws, cache }
    }

    /// One step over `chunks` (sequence, its tokens from position `start`): every token's full
    /// logits row, chunk after chunk.
    fn step(&self, chunks: &[(usize, &[u32], usize)]) -> Vec<Vec<f32>> {
        let mut batch = ForwardBatch { query_start_loc: vec![0], ..ForwardBatch::default() };
        for &(seq, tokens, start) in chunks {
            let table: Vec<u32> = (0..SEQ_BLOCKS).map(|b| (1 + seq * SEQ_BLOCKS + b) as u32).collect();
            for (i, &token) in tokens.iter().enumerate() {
                let pos = start + i;
                batch.logits_indices.push(batch.input_ids.len() as u32);
                batch.input_ids.push(token);
                batch.positions.push(pos as u32);
                batch.slot_mapping.push(table[pos / BLOCK] * BLOCK as u32 + (pos % BLOCK) as u32);
            }
            batch.query_start_loc.push(batch.input_ids.len() as u32);
            batch.seq_lens.push((start + tokens.len()) as u32);
            batch.block_table.extend(table);
        }
        let out = self.model.forward(&self.ctx, &self.ws, &self.cache, &batch, 1, true).unwrap();
        let vocab = self.model.config().vocab_size;
        out.logits.unwrap().chunks(vocab).map(<[f32]>::to_vec).collect()
    }
}

fn bits(rows: &[Vec<f32>]) -> Vec<Vec<u32>> {
    rows.iter().map(|r| r.iter().map(|v| v.to_bits()).collect()).collect()
}

/// Alone, batched with the other prompts, prefilled in 5-token chunks beside a decoding
/// sequence, and decoded one token at a time: the same bits at every position.
fn check_invariance(name: &str, file: &str) {
    let path = std::env::var_os("PAGODA_FAMILIES_DIR").map(PathBuf::from).unwrap().join(name).join(file);
    let prompts = prompts(name);
    let runner = Runner::new(path, prompts.len());
    let alone: Vec<Vec<Vec<u32>>> = prompts.iter().map(|p| bits(&runner.step(&[(0, p, 0)]))).collect();
    // every prompt in one step (sequence 0 last, so its rows are not first)
    let mut chunks: Vec<(usize, &[u32], usize)> =
        prompts.iter().enumerate().rev().map(|(s, p)| (s, p.as_slice(), 0)).collect();
    chunks.rotate_left(1);
    let together = bits(&runner.step(&chunks));
    let mut row = 0;
    for &(s, tokens, _) in &chunks {
        assert_eq!(together[row..row + tokens.len()], alone[s][..], "{name} {file}: prompt {s} batched");
        row += tokens.len();
    }
    // prompt 1 in chunks of 5 beside prompt 0 decoding its last tokens one at a time
    let (long, other) = (&prompts[1], &prompts[0]);
    let decode_from = other.len() - 4;
    runner.step(&[(0, &other[..decode_from], 0)]);
    let mut chunked = Vec::new();
    let mut decoded = Vec::new();
    for (i, piece) in long.chunks(5).enumerate() {
        let mut step = vec![(1, piece, i * 5)];
        let pos = decode_from + i;
        if pos < other.len() {
            step.push((0, &other[pos..pos + 1], pos));
        }
        let rows = bits(&runner.step(&step));
        chunked.extend_from_slice(&rows[..piece.len()]);
        decoded.extend_from_slice(&rows[piece.len()..]);
    }
    assert_eq!(chunked, alone[1], "{name} {file}: prompt 1 prefilled in chunks of 5");
    assert_eq!(decoded, alone[0][decode_from..], "{name} {file}: prompt 0 decoded a token at a time");
}

#[test]
fn qwen3_moe_logits_do_not_depend_on_batch_chunks_or_decoding() {
    check_invariance("qwen3-moe", "qwen3-moe.f16.gguf");
}

#[test]
fn mixtral_logits_do_not_depend_on_batch_chunks_or_decoding() {
    check_invariance("mixtral", "mixtral.f32.gguf");
}

/// Qwen2-MoE: 4 of 8 experts, not renormalised, and the shared expert every row goes through
/// (its gate's sigmoid read back with the router's choice), from the F16 GGUF.
#[test]
fn qwen2_moe_with_its_shared_expert_logits_do_not_depend_on_batch_chunks_or_decoding() {
    check_invariance("qwen2-moe", "qwen2-moe.f16.gguf");
}

/// Qwen3-MoE with dense layers around its one expert layer, from its HF directory: rows move
/// from a dense MLP to the experts and back.
#[test]
fn qwen3_moe_with_dense_layers_logits_do_not_depend_on_batch_chunks_or_decoding() {
    check_invariance("qwen3-moe-dense-layers", "");
}

/// A GGUF cannot say which layers are dense: llama.cpp's converter refuses such a model and
/// its qwen3moe loader wants every layer's router. A qwen3moe file whose layer 0 holds a dense
/// MLP (the tiny Qwen3-MoE's, its experts swapped for `ffn_{gate,up,down}` of
/// `feed_forward_length`) is refused as llama.cpp refuses it: by the router it lacks.
#[test]
fn a_qwen3moe_gguf_with_a_dense_layer_is_refused_by_the_router_it_lacks() {
    let path = std::env::var_os("PAGODA_FAMILIES_DIR").map(PathBuf::from).unwrap().join("qwen3-moe");
    let g = GgufFile::open(path.join("qwen3-moe.f32.gguf")).unwrap();
    let mut w = GgufWriter::new();
    for key in g.metadata_keys() {
        w.metadata(key, g.get(key).unwrap().clone());
    }
    let expert = |name: &str| name.starts_with("blk.0.ffn_") && name != "blk.0.ffn_norm.weight";
    for info in g.tensor_infos().iter().filter(|t| !expert(&t.name)) {
        let t = g.tensor(&info.name).unwrap();
        w.tensor(&info.name, t.dtype, &t.shape, t.data.to_vec()).unwrap();
    }
    let ff = g.get_int("qwen3moe.feed_forward_length").unwrap().unwrap() as usize;
    for (name, shape) in [("gate", [ff, 64]), ("up", [ff, 64]), ("down", [64, ff])] {
        w.tensor(&format!("blk.0.ffn_{name}.weight"), DType::F32, &shape, vec![0; 4 * ff * 64]).unwrap();
    }
    let dir = tempfile::tempdir().unwrap();
    w.write(dir.path().join("dense.gguf")).unwrap();
    let path = dir.path().join("dense.gguf");
    let config = ModelConfig::from_gguf(&GgufFile::open(&path).unwrap()).unwrap();
    assert_eq!(config.moe_layers, [true, true], "every layer of a GGUF file has the experts");
    match ModelFiles::open(&path) {
        Err(ModelError::Weights(WeightError::MissingTensor(name))) => {
            assert_eq!(name, "blk.0.ffn_gate_inp.weight")
        }
        other => panic!("expected the missing router, got {:?}", other.map(|_| ())),
    }
}

/// gpt-oss from its HF directory: biased experts through the clamped SwiGLU, attention sinks,
/// a sliding layer (16 keys, which the long prompts pass) beside a full one.
#[test]
fn gpt_oss_logits_do_not_depend_on_batch_chunks_or_decoding() {
    check_invariance("gpt-oss", "");
}

/// gpt-oss from its MXFP4 checkpoint: the experts' MXFP4 linears (GEMV and GEMM) keep every
/// row's bits whatever the rows beside it.
#[test]
fn gpt_oss_mxfp4_logits_do_not_depend_on_batch_chunks_or_decoding() {
    check_invariance("gpt-oss", "mxfp4");
}

/// `pagoda info`'s numbers for the tiny Qwen3-MoE: every parameter, and a token's share — all
/// but 6 of each layer's 8 experts (2 chosen), each expert 3 matrices of 32 × 64.
#[test]
fn a_token_reads_only_its_experts() {
    let path = std::env::var_os("PAGODA_FAMILIES_DIR").map(PathBuf::from).unwrap().join("qwen3-moe");
    let files = ModelFiles::open(path.join("qwen3-moe.f32.gguf")).unwrap();
    let f = Footprint::of(&files.llama_weights().unwrap(), 2);
    let (vocab, hidden, layers) = (151_936u64, 64u64, 2u64);
    let attention = hidden + 128 * 64 + 2 * (64 * 64) + 64 * 128 + hidden + 2 * 32;
    let expert = 3 * 32 * 64;
    let layer = attention + 8 * 64 + 8 * expert;
    assert_eq!(f.parameters, vocab * hidden + layers * layer + hidden);
    assert_eq!(f.active_parameters, f.parameters - layers * 6 * expert);
    // f32 throughout; the tied embedding is read whole by the head
    assert_eq!((f.bytes, f.bytes_per_token), (4 * f.parameters, 4 * f.active_parameters));
    let f16 = ModelFiles::open(path.join("qwen3-moe.f16.gguf")).unwrap();
    let g = Footprint::of(&f16.llama_weights().unwrap(), 2);
    assert_eq!(g.bytes - g.bytes_per_token, layers * 6 * expert * 2, "unchosen f16 experts");
}

/// The tiny Qwen2-MoE's: its shared expert (3 matrices of 64 × 64 and a gate of 64) is read by
/// every token, beside 4 of its 8 routed experts (3 matrices of 32 × 64 each).
#[test]
fn a_token_reads_the_shared_expert_and_its_routed_ones() {
    let path = std::env::var_os("PAGODA_FAMILIES_DIR").map(PathBuf::from).unwrap().join("qwen2-moe");
    let files = ModelFiles::open(path.join("qwen2-moe.f32.gguf")).unwrap();
    let moe = files.config.moe.unwrap();
    assert_eq!((moe.experts_per_token, moe.shared_expert_intermediate_size), (4, Some(64)));
    let f = Footprint::of(&files.llama_weights().unwrap(), 4);
    let (vocab, hidden, layers) = (151_936u64, 64u64, 2u64);
    let attention = hidden + 64 * 64 + 2 * (32 * 64) + 64 * 64 + (64 + 2 * 32) + hidden;
    let (expert, shared) = (3 * 32 * 64, 3 * 64 * 64 + 64);
    let layer = attention + 8 * 64 + 8 * expert + shared;
    assert_eq!(f.parameters, 2 * vocab * hidden + layers * layer + hidden);
    assert_eq!(f.active_parameters, f.parameters - layers * 4 * expert);
}
