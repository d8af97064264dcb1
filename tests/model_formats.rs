//! Model files: the tiny Llama written as an HF directory and as GGUF reads back the same,
//! and malformed inputs give typed errors that name the problem.

use std::path::{Path, PathBuf};

use pagoda::dtype::{DType, dequantize, quantize};
use pagoda::model::architecture::ConfigError;
use pagoda::model::architecture::interleave_rope_rows;
use pagoda::model::gguf::{GgufError, GgufFile, GgufWriter};
use pagoda::model::safetensors::{SafetensorsError, SafetensorsFiles};
use pagoda::model::testing::TinyLlama;
use pagoda::model::tokenizer::TokenizerError;
use pagoda::model::weights::WeightError;
use pagoda::model::{ChatMessage, ModelError, ModelFiles, RopeVariant};
use pagoda::{CacheConfig, Engine, EngineConfig, ExecutorKind};

fn tiny_gguf(dir: &Path, tiny: &TinyLlama, dtype: DType) -> PathBuf {
    let path = dir.join("tiny.gguf");
    tiny.write_gguf(&path, dtype).unwrap();
    path
}

/// Copy a GGUF file leaving out one metadata key and/or one tensor.
fn rewrite_without(src: &Path, dst: &Path, skip_key: &str, skip_tensor: &str) {
    let g = GgufFile::open(src).unwrap();
    let mut w = GgufWriter::new();
    for key in g.metadata_keys().iter().filter(|k| *k != skip_key) {
        w.metadata(key, g.get(key).unwrap().clone());
    }
    for info in g.tensor_infos().iter().filter(|t| t.name != skip_tensor) {
        let t = g.tensor(&info.name).unwrap();
        w.tensor(&info.name, t.dtype, &t.shape, t.data.to_vec()).unwrap();
    }
    w.write(dst).unwrap();
}

/// A GGUF v3 file with no metadata and one 32-element tensor of ggml type `type_id`.
fn one_tensor_gguf(type_id: u32) -> Vec<u8> {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(1u64.to_le_bytes());
    b.push(b't');
    b.extend(1u32.to_le_bytes());
    b.extend(32u64.to_le_bytes());
    b.extend(type_id.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.resize(b.len().next_multiple_of(32) + 256, 0);
    b
}

fn open_bytes(dir: &Path, bytes: &[u8]) -> Result<GgufFile, GgufError> {
    let path = dir.join("case.gguf");
    std::fs::write(&path, bytes).unwrap();
    GgufFile::open(&path)
}

#[test]
fn tiny_model_reads_back_the_same_from_hf_and_gguf() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama::new(11);
    tiny.write_hf_dir(&dir.path().join("hf")).unwrap();
    let hf = ModelFiles::open(dir.path().join("hf")).unwrap();
    let gguf = ModelFiles::open(tiny_gguf(dir.path(), &tiny, DType::F32)).unwrap();

    assert_eq!(hf.config, tiny.config);
    assert_eq!(gguf.config.rope_variant, RopeVariant::Interleaved);
    assert_eq!(
        gguf.config,
        pagoda::model::ModelConfig { rope_variant: RopeVariant::Interleaved, ..tiny.config.clone() }
    );

    for text in ["the cat is in the water", "12345 <|im_start|>x", " spaces   and\ttabs\n"] {
        for parse_special in [false, true] {
            let a = hf.tokenizer.encode(text, parse_special).unwrap();
            assert_eq!(a, gguf.tokenizer.encode(text, parse_special).unwrap());
            assert_eq!(hf.tokenizer.decode(&a, false).unwrap(), text);
        }
    }
    assert_eq!(hf.tokenizer.encode("<|im_end|>", true).unwrap(), vec![2]);
    assert_eq!(hf.tokenizer.encode(" the", false).unwrap(), vec![3 + 256 + 2]);

    let messages = [ChatMessage::new("user", "hi")];
    let rendered = hf.chat_template.as_ref().unwrap().render(&messages, true).unwrap();
    assert_eq!(rendered, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    assert_eq!(gguf.chat_template.as_ref().unwrap().render(&messages, true).unwrap(), rendered);

    let (wh, wg) = (hf.llama_weights().unwrap(), gguf.llama_weights().unwrap());
    assert_eq!(wh.embed_tokens.data, wg.embed_tokens.data);
    assert_eq!(
        wh.layers[1].dense_mlp().unwrap().down_proj.data,
        wg.layers[1].dense_mlp().unwrap().down_proj.data
    );
    let c = &tiny.config;
    let permuted = interleave_rope_rows(&wh.layers[0].k_proj.to_f32(), c.num_key_value_heads, c.head_dim);
    assert_eq!(permuted.unwrap(), wg.layers[0].k_proj.to_f32());
    assert_eq!(wg.lm_head.data.as_ptr(), wg.embed_tokens.data.as_ptr());
}

#[test]
fn quantized_gguf_keeps_its_block_types() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama::new(3);
    for dtype in [DType::Q8_0, DType::Q4_0, DType::Q4_1, DType::F16, DType::BF16] {
        let model = ModelFiles::open(tiny_gguf(dir.path(), &tiny, dtype)).unwrap();
        let w = model.llama_weights().unwrap();
        assert_eq!((w.layers[0].dense_mlp().unwrap().gate_proj.dtype, w.norm.dtype), (dtype, DType::F32));
        let hf =
            &tiny.tensors.iter().find(|t| t.name == "model.layers.0.mlp.gate_proj.weight").unwrap().values;
        let max_err = w.layers[0]
            .dense_mlp()
            .unwrap()
            .gate_proj
            .to_f32()
            .iter()
            .zip(hf)
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(max_err < 0.03, "{dtype:?}: {max_err}");
    }
}

/// MXFP4 matrices read from GGUF as written (dequantized on the CPU), and kept in MXFP4 on the
/// GPU, whose kernels read it (tests/kernels_reference.rs checks them against the CPU).
#[test]
fn mxfp4_gguf_reads_on_the_cpu_and_runs_on_the_gpu() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama::new(4);
    let path = tiny_gguf(dir.path(), &tiny, DType::MXFP4);
    let gguf = GgufFile::open(&path).unwrap();
    let info = gguf.tensor("blk.0.ffn_gate.weight").unwrap();
    assert_eq!(info.dtype, DType::MXFP4);
    let model = ModelFiles::open(&path).unwrap();
    let weights = model.llama_weights().unwrap();
    let gate = &weights.layers[0].dense_mlp().unwrap().gate_proj;
    let hf = &tiny.tensors.iter().find(|t| t.name == "model.layers.0.mlp.gate_proj.weight").unwrap().values;
    assert_eq!(gate.dtype, DType::MXFP4);
    assert_eq!(gate.to_f32(), dequantize(DType::MXFP4, &quantize(DType::MXFP4, hf)));
    let config = EngineConfig {
        model: Some(path),
        executor: ExecutorKind::Wgpu,
        cache: CacheConfig { num_gpu_blocks: 16, ..CacheConfig::default() },
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(config).unwrap();
    let params = pagoda::SamplingParams { ignore_eos: true, ..pagoda::SamplingParams::greedy(4) };
    let out = engine.generate([pagoda::Prompt::TokenIds(vec![1, 5, 9])], &params).unwrap();
    assert_eq!(out[0].token_ids.len(), 4);
}

#[test]
fn untied_head_is_loaded_from_its_own_tensor() {
    let dir = tempfile::tempdir().unwrap();
    let dims = pagoda::model::testing::TinyDims { tie_word_embeddings: false, ..Default::default() };
    let tiny = TinyLlama::with_dims(5, dims);
    tiny.write_hf_dir(dir.path()).unwrap();
    let hf = ModelFiles::open(dir.path()).unwrap();
    let gguf = ModelFiles::open(tiny_gguf(dir.path(), &tiny, DType::F32)).unwrap();
    assert!(!hf.config.tie_word_embeddings && !gguf.config.tie_word_embeddings);
    for m in [&hf, &gguf] {
        let w = m.llama_weights().unwrap();
        assert_ne!(w.lm_head.data, w.embed_tokens.data);
    }
}

#[test]
fn sharded_safetensors_match_the_single_file() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama::new(1);
    tiny.write_hf_dir(dir.path()).unwrap();
    let single = SafetensorsFiles::open_dir(dir.path()).unwrap();
    let sharded = dir.path().join("sharded");
    std::fs::create_dir(&sharded).unwrap();
    let names: Vec<String> = single.names().map(str::to_owned).collect();
    let mut weight_map = serde_json::Map::new();
    for (shard, part) in names.chunks(names.len() / 2 + 1).enumerate() {
        let file = format!("model-0000{}-of-00002.safetensors", shard + 1);
        let views: Vec<_> = part.iter().map(|n| (n.clone(), single.tensor(n).unwrap())).collect();
        std::fs::write(sharded.join(&file), pagoda::model::safetensors::serialize(&views).unwrap()).unwrap();
        weight_map.extend(part.iter().map(|n| (n.clone(), serde_json::json!(file))));
    }
    let index = serde_json::json!({"metadata": {}, "weight_map": weight_map});
    std::fs::write(sharded.join("model.safetensors.index.json"), index.to_string()).unwrap();
    let opened = SafetensorsFiles::open_dir(&sharded).unwrap();
    for n in &names {
        assert_eq!(opened.tensor(n).unwrap(), single.tensor(n).unwrap(), "{n}");
    }
}

#[test]
fn gguf_with_wrong_magic_or_version_is_rejected() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = one_tensor_gguf(0);
    bytes[..4].copy_from_slice(b"GGML");
    assert!(matches!(open_bytes(dir.path(), &bytes), Err(GgufError::BadMagic { found }) if found == b"GGML"));
    let mut bytes = one_tensor_gguf(0);
    bytes[4..8].copy_from_slice(&1u32.to_le_bytes());
    assert!(matches!(open_bytes(dir.path(), &bytes), Err(GgufError::UnsupportedVersion(1))));
    assert!(matches!(open_bytes(dir.path(), b"GG"), Err(GgufError::Truncated { .. })));
}

#[test]
fn truncated_gguf_names_what_was_cut() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = std::fs::read(tiny_gguf(dir.path(), &TinyLlama::new(2), DType::Q8_0)).unwrap();
    match open_bytes(dir.path(), &bytes[..200]) {
        Err(GgufError::Truncated { offset, file_len: 200, what }) => {
            assert!(offset < 200 && what.contains("metadata"))
        }
        other => panic!("{other:?}"),
    }
    let data_offset = GgufFile::open(dir.path().join("tiny.gguf")).unwrap().data_offset();
    match open_bytes(dir.path(), &bytes[..data_offset + 100]) {
        Err(GgufError::TensorPastEnd { name, file_len, .. }) => {
            assert_eq!((name.as_str(), file_len), ("token_embd.weight", data_offset + 100))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn unknown_and_unsupported_tensor_types_are_named() {
    let dir = tempfile::tempdir().unwrap();
    match open_bytes(dir.path(), &one_tensor_gguf(99)) {
        Err(GgufError::UnknownTensorType { name, type_id: 99 }) => assert_eq!(name, "t"),
        other => panic!("{other:?}"),
    }
    match open_bytes(dir.path(), &one_tensor_gguf(16)) {
        Err(GgufError::UnsupportedTensorType { name, type_name: "IQ2_XXS" }) => assert_eq!(name, "t"),
        other => panic!("{other:?}"),
    }
    let t = open_bytes(dir.path(), &one_tensor_gguf(0)).unwrap();
    assert_eq!(*t.tensor("t").unwrap().shape, [32]);
    assert!(matches!(t.tensor("u"), Err(GgufError::MissingTensor(n)) if n == "u"));
}

#[test]
fn missing_tensor_and_wrong_shape_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let mut tiny = TinyLlama::new(4);
    tiny.tensors.retain(|t| t.name != "model.norm.weight");
    match ModelFiles::open(tiny_gguf(dir.path(), &tiny, DType::F32)) {
        Err(ModelError::Weights(WeightError::MissingTensor(name))) => assert_eq!(name, "output_norm.weight"),
        other => panic!("{other:?}"),
    }
    let mut tiny = TinyLlama::new(4);
    let up = tiny.tensors.iter_mut().find(|t| t.name == "model.layers.1.mlp.up_proj.weight").unwrap();
    up.shape = vec![64, 64];
    up.values.truncate(64 * 64);
    tiny.write_hf_dir(dir.path()).unwrap();
    match ModelFiles::open(dir.path()) {
        Err(ModelError::Weights(WeightError::ShapeMismatch { name, expected, found })) => {
            assert_eq!(
                (name.as_str(), expected, found),
                ("model.layers.1.mlp.up_proj.weight", vec![96, 64], vec![64, 64])
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn config_missing_a_field_names_it() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama::new(6);
    let src = tiny_gguf(dir.path(), &tiny, DType::F32);
    let dst = dir.path().join("no_blocks.gguf");
    rewrite_without(&src, &dst, "llama.block_count", "");
    match ModelFiles::open(&dst) {
        Err(ModelError::Config(ConfigError::MissingField(f))) => assert_eq!(f, "llama.block_count"),
        other => panic!("{other:?}"),
    }
    let hf = dir.path().join("hf");
    tiny.write_hf_dir(&hf).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_slice(&std::fs::read(hf.join("config.json")).unwrap()).unwrap();
    config.as_object_mut().unwrap().remove("hidden_size");
    std::fs::write(hf.join("config.json"), config.to_string()).unwrap();
    match ModelFiles::open(&hf) {
        Err(ModelError::Config(ConfigError::MissingField(f))) => assert_eq!(f, "hidden_size"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn model_without_a_tokenizer_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let tiny = TinyLlama::new(8);
    let src = tiny_gguf(dir.path(), &tiny, DType::F32);
    let dst = dir.path().join("no_vocab.gguf");
    rewrite_without(&src, &dst, "tokenizer.ggml.tokens", "");
    match ModelFiles::open(&dst) {
        Err(ModelError::Tokenizer(TokenizerError::MissingGgufTokenizer(k))) => {
            assert_eq!(k, "tokenizer.ggml.tokens")
        }
        other => panic!("{other:?}"),
    }
    let hf = dir.path().join("hf");
    tiny.write_hf_dir(&hf).unwrap();
    std::fs::remove_file(hf.join("tokenizer.json")).unwrap();
    match ModelFiles::open(&hf) {
        Err(ModelError::Tokenizer(TokenizerError::NotFound(p))) => assert!(p.ends_with("tokenizer.json")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn truncated_safetensors_and_unknown_paths_are_rejected() {
    let dir = tempfile::tempdir().unwrap();
    TinyLlama::new(9).write_hf_dir(dir.path()).unwrap();
    let file = dir.path().join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() - 10]).unwrap();
    assert!(matches!(
        ModelFiles::open(dir.path()),
        Err(ModelError::Safetensors(SafetensorsError::Invalid { path, .. })) if path == file
    ));
    std::fs::remove_file(&file).unwrap();
    assert!(matches!(
        ModelFiles::open(dir.path()),
        Err(ModelError::Safetensors(SafetensorsError::NotFound(_)))
    ));
    assert!(matches!(ModelFiles::open(dir.path().join("config.json")), Err(ModelError::UnknownFormat(_))));
}
