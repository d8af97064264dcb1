//! The default model split by llama.cpp's `llama-gguf-split --split-max-tensors`, with and
//! without tensors in its first part (scripts/make-splits.sh, directory in
//! `PAGODA_SPLIT_DIR`): opened from any part it loads every tensor of the single file, and
//! its greedy tokens and logits are the single file's bit for bit; a missing part, a part of
//! another split, a part of a split of another count and a part under another part's name
//! are refused with typed errors naming the file. (Unix only: symbolic links put parts of
//! several splits together.)
#![cfg(unix)]

use std::path::{Path, PathBuf};

use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::{GpuContext, GpuOptions, KvCacheShape, KvPrecision};
use pagoda::model::gguf::GgufFile;
use pagoda::model::gguf_split::GgufSplitError;
use pagoda::model::llama::{ForwardBatch, LlamaModel, Workspace, WorkspaceLimits};
use pagoda::model::weights::WeightFile;
use pagoda::model::{ModelError, ModelFiles, default_model_path};

/// The file names `llama-gguf-split` gives the default model's parts.
const PREFIX: &str = "SmolLM2-135M-Instruct.Q4_1";
const BLOCK: usize = 16;

/// Part `no` of `count` of a split of scripts/make-splits.sh: `by100` and `by120` (3 parts of
/// at most 100 or 120 of the model's 272 tensors), `by100-meta` (4 parts: the metadata alone,
/// then 100 tensors a part).
fn part(split: &str, no: u32, count: u32) -> PathBuf {
    let dir = std::env::var_os("PAGODA_SPLIT_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_SPLIT_DIR names the directory scripts/make-splits.sh prints");
    let path = dir.join(format!("{split}/{PREFIX}-{no:05}-of-{count:05}.gguf"));
    assert!(path.is_file(), "{} is missing: run scripts/make-splits.sh", path.display());
    path
}

/// Where part `no` of 3 goes in a directory made of parts of several splits.
fn slot(dir: &Path, no: u32) -> PathBuf {
    dir.join(format!("{PREFIX}-{no:05}-of-00003.gguf"))
}

/// A directory of three slots, each linked to the file given (or left empty).
fn assemble(parts: [Option<PathBuf>; 3]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (no, target) in (1..).zip(parts) {
        if let Some(target) = target {
            std::os::unix::fs::symlink(target, slot(dir.path(), no)).unwrap();
        }
    }
    dir
}

fn gguf_model(files: &ModelFiles) -> &pagoda::model::gguf_split::GgufModel {
    match &files.weights {
        WeightFile::Gguf(model) => model,
        other => panic!("not a GGUF model: {other:?}"),
    }
}

/// The split error of opening `path`, whose message names `names`.
fn split_error(path: &Path, names: &Path) -> GgufSplitError {
    match ModelFiles::open(path) {
        Err(ModelError::GgufSplit(e)) => {
            let name = names.file_name().unwrap().to_str().unwrap();
            assert!(e.to_string().contains(name), "{e} names no {name}");
            eprintln!("{e}");
            e
        }
        other => panic!("{}: expected a split error, got {other:?}", path.display()),
    }
}

#[test]
fn any_part_opens_the_tensors_of_the_single_file() {
    let single = ModelFiles::open(default_model_path().unwrap()).unwrap();
    for (name, count) in [("by100", 3), ("by120", 3), ("by100-meta", 4)] {
        for no in 1..=count {
            let split = ModelFiles::open(part(name, no, count)).unwrap();
            assert_eq!(gguf_model(&split).num_parts(), count as usize);
            assert_eq!(split.config, single.config);
            assert_eq!(split.chat_template.is_some(), single.chat_template.is_some());
            let (a, b): (Vec<_>, Vec<_>) =
                (single.weights.tensors().collect(), split.weights.tensors().collect());
            assert_eq!(a, b, "{name}, opened from part {no}: the tensors in order");
        }
    }
}

/// Greedy decoding of `prompt` for `steps` tokens with an f32 KV cache: each step's token and
/// full logits row.
fn greedy(ctx: &GpuContext, files: &ModelFiles, prompt: &[u32], steps: usize) -> Vec<(u32, Vec<f32>)> {
    let model = LlamaModel::load(ctx, files, false).unwrap();
    let c = model.config();
    let max_blocks = (prompt.len() + steps).div_ceil(BLOCK);
    let limits = WorkspaceLimits {
        max_tokens: prompt.len(),
        max_seqs: 1,
        max_logits_rows: 1,
        max_blocks_per_seq: max_blocks,
    };
    let ws = Workspace::new(ctx, &model, limits).unwrap();
    let shape = KvCacheShape {
        num_layers: c.num_hidden_layers,
        num_blocks: max_blocks + 1,
        block_size: BLOCK,
        num_kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
    };
    let cache = ctx.kv_cache(shape, KvPrecision::F32).unwrap();
    let block_table: Vec<u32> = (1..=max_blocks as u32).collect();
    let (mut tokens, mut out) = (prompt.to_vec(), Vec::new());
    let mut done = 0;
    for _ in 0..steps {
        let new = &tokens[done..];
        let batch = ForwardBatch {
            input_ids: new.to_vec(),
            positions: (done as u32..tokens.len() as u32).collect(),
            slot_mapping: (done..tokens.len())
                .map(|p| (block_table[p / BLOCK] as usize * BLOCK + p % BLOCK) as u32)
                .collect(),
            query_start_loc: vec![0, new.len() as u32],
            seq_lens: vec![tokens.len() as u32],
            block_table: block_table.clone(),
            logits_indices: vec![new.len() as u32 - 1],
        };
        let step = model.forward(ctx, &ws, &cache, &batch, 1, true).unwrap();
        done = tokens.len();
        tokens.push(step.top_ids[0]);
        out.push((step.top_ids[0], step.logits.unwrap()));
    }
    out
}

#[test]
fn the_split_model_generates_the_single_files_tokens_and_logits() {
    let ctx = GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap())
        .expect("a wgpu adapter (lavapipe in CI)");
    let single = ModelFiles::open(default_model_path().unwrap()).unwrap();
    let split = ModelFiles::open(part("by100", 1, 3)).unwrap();
    let prompt = single.tokenizer.encode_prompt("The capital of France is").unwrap();
    let (expected, found) = (greedy(&ctx, &single, &prompt, 4), greedy(&ctx, &split, &prompt, 4));
    eprintln!("greedy tokens: {:?}", expected.iter().map(|(t, _)| t).collect::<Vec<_>>());
    for (step, ((token, logits), (split_token, split_logits))) in expected.iter().zip(&found).enumerate() {
        assert_eq!(token, split_token, "step {step}: greedy token");
        let bits = |l: &[f32]| l.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert!(bits(logits) == bits(split_logits), "step {step}: the logits differ");
    }
}

#[test]
fn a_missing_part_is_named() {
    let dir = assemble([Some(part("by100", 1, 3)), None, Some(part("by100", 3, 3))]);
    let missing = slot(dir.path(), 2);
    for opened in [1, 3] {
        match split_error(&slot(dir.path(), opened), &missing) {
            GgufSplitError::MissingPart { path, no: 2, count: 3 } => assert_eq!(path, missing),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_part_of_another_split_is_refused() {
    // Tensors 0..100 and 200..272 from the split by 100, 120..240 from the split by 120.
    let dir = assemble([Some(part("by100", 1, 3)), Some(part("by120", 2, 3)), Some(part("by100", 3, 3))]);
    let twice = GgufFile::open(part("by100", 3, 3)).unwrap().tensor_infos()[0].name.clone();
    match split_error(&slot(dir.path(), 1), &slot(dir.path(), 3)) {
        GgufSplitError::DuplicateTensor { name, first, second } => {
            assert_eq!((name, first, second), (twice, slot(dir.path(), 2), slot(dir.path(), 3)));
        }
        other => panic!("{other:?}"),
    }
    // Tensors 0..200 from the split by 100 and 240..272 from the split by 120: 40 missing.
    let dir = assemble([Some(part("by100", 1, 3)), Some(part("by100", 2, 3)), Some(part("by120", 3, 3))]);
    match split_error(&slot(dir.path(), 2), &slot(dir.path(), 1)) {
        GgufSplitError::TensorCount { path, expected: 272, found: 232 } => {
            assert_eq!(path, slot(dir.path(), 1))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_part_of_a_split_of_another_count_is_refused() {
    let dir =
        assemble([Some(part("by100", 1, 3)), Some(part("by100-meta", 2, 4)), Some(part("by100", 3, 3))]);
    match split_error(&slot(dir.path(), 1), &slot(dir.path(), 2)) {
        GgufSplitError::CountMismatch { path, expected: 3, found: 4 } => {
            assert_eq!(path, slot(dir.path(), 2))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_part_under_another_parts_name_is_refused() {
    let dir = assemble([Some(part("by100", 1, 3)), Some(part("by100", 3, 3)), Some(part("by100", 3, 3))]);
    match split_error(&slot(dir.path(), 1), &slot(dir.path(), 2)) {
        GgufSplitError::WrongPart { path, expected: 2, found: 3 } => assert_eq!(path, slot(dir.path(), 2)),
        other => panic!("{other:?}"),
    }
    // The first part under a name that is no part's: llama.cpp's loader refuses it too.
    let dir = tempfile::tempdir().unwrap();
    let renamed = dir.path().join("model.gguf");
    std::os::unix::fs::symlink(part("by100", 1, 3), &renamed).unwrap();
    match split_error(&renamed, &renamed) {
        GgufSplitError::UnexpectedName { no: 1, count: 3, .. } => {}
        other => panic!("{other:?}"),
    }
}
