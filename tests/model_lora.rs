//! LoRA adapters against transformers + peft (tests/fixtures/lora/, made by
//! scripts/make-lora-reference.py): the tiny adapters scripts/tiny-adapters.py writes next to
//! the tiny family models (`PAGODA_FAMILIES_DIR`), in PEFT's format and as llama.cpp's LoRA
//! GGUF, match the reference logits at every prompt position on the GPU's batched LoRA
//! product; a row's bits do not depend on the other rows' adapters (alone = in a batch mixing
//! four adapters and the base = decoded after its prompt was cached), and a row without one has
//! the bits of the model loaded without LoRA; mismatched or unsupported adapters are refused by
//! name.

use std::path::{Path, PathBuf};

use pagoda::engine::engine_config::gpu_options_from_env;
use pagoda::gpu::{GpuContext, GpuOptions, KvCache, KvCacheShape, KvPrecision, NO_LORA};
use pagoda::model::ModelFiles;
use pagoda::model::llama::{ForwardBatch, LlamaModel, LoraRows, Workspace, WorkspaceLimits};
use pagoda::model::lora::bank::LoraSlots;
use pagoda::model::lora::{LoraAdapter, LoraError};
use serde_json::Value;

const BLOCK: usize = 16;
const ADAPTERS: [&str; 4] = ["sql", "chat", "math", "code"];

fn fixture(family: &str) -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("tests/fixtures/lora/{family}.json"));
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn family_dir(family: &str) -> PathBuf {
    std::env::var_os("PAGODA_FAMILIES_DIR")
        .map(PathBuf::from)
        .expect("PAGODA_FAMILIES_DIR names the tiny families (scripts/tiny-adapters.py adds their adapters)")
        .join(family)
}

fn ctx() -> GpuContext {
    GpuContext::new(&gpu_options_from_env(&GpuOptions::default()).unwrap()).expect("a wgpu adapter")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect()
}

/// One sequence of a step: `tokens` after `past` cached ones, in blocks `blocks`, adapter `slot`.
struct Seq<'a> {
    tokens: &'a [u32],
    past: usize,
    blocks: Vec<u32>,
    slot: u32,
}

/// A model with its workspace, f32 cache and LoRA slots (`lora`: loaded for LoRA serving, else
/// as plain and run without LoRA rows).
struct Runner {
    lora: bool,
    ctx: GpuContext,
    model: LlamaModel,
    ws: Workspace,
    cache: KvCache,
    slots: LoraSlots,
    blocks_per_seq: usize,
}

impl Runner {
    fn new(path: &Path) -> Self {
        Self::with(path, true)
    }

    fn with(path: &Path, lora: bool) -> Self {
        let ctx = ctx();
        let files = ModelFiles::open(path).unwrap();
        let model = if lora {
            LlamaModel::load_for_lora(&ctx, &files, 4096, false).unwrap()
        } else {
            LlamaModel::load_for_context(&ctx, &files, 4096, false).unwrap()
        };
        let c = model.config();
        let (max_tokens, blocks_per_seq) = (256, 4);
        let limits = WorkspaceLimits {
            max_tokens,
            max_seqs: 8,
            max_logits_rows: max_tokens,
            max_blocks_per_seq: blocks_per_seq,
        };
        let ws = Workspace::new(&ctx, &model, limits).unwrap();
        let shape = KvCacheShape {
            num_layers: c.num_hidden_layers,
            num_blocks: 64,
            block_size: BLOCK,
            num_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
        };
        let cache = ctx.kv_cache(shape, KvPrecision::F32).unwrap();
        let slots = LoraSlots::new(&ctx, c, model.qk_interleaved(), 4, 8, max_tokens).unwrap();
        Self { lora, ctx, model, ws, cache, slots, blocks_per_seq }
    }

    fn load(&self, slot: usize, path: &Path) {
        let adapter = LoraAdapter::load(path, self.model.config()).unwrap();
        self.slots.load(&self.ctx, slot, &adapter, self.model.config()).unwrap();
    }

    /// Full logits of every row of one step over `seqs`, sequence by sequence.
    fn step(&self, seqs: &[Seq<'_>]) -> Vec<Vec<Vec<f32>>> {
        self.step_with(seqs, self.lora)
    }

    /// [`Self::step`] with the rows' adapters (`with_rows`), or as a step without any: the
    /// plain forward an engine runs where no row has an adapter.
    fn step_with(&self, seqs: &[Seq<'_>], with_rows: bool) -> Vec<Vec<Vec<f32>>> {
        let mut batch = ForwardBatch { query_start_loc: vec![0], ..Default::default() };
        let mut rows = Vec::new();
        for s in seqs {
            for (i, &id) in s.tokens.iter().enumerate() {
                let pos = s.past + i;
                batch.logits_indices.push(batch.input_ids.len() as u32);
                batch.input_ids.push(id);
                batch.positions.push(pos as u32);
                batch.slot_mapping.push(s.blocks[pos / BLOCK] * BLOCK as u32 + (pos % BLOCK) as u32);
                rows.push(s.slot);
            }
            batch.query_start_loc.push(batch.input_ids.len() as u32);
            batch.seq_lens.push((s.past + s.tokens.len()) as u32);
            let mut table = s.blocks.clone();
            table.resize(self.blocks_per_seq, 0);
            batch.block_table.extend(table);
        }
        let out = if with_rows {
            let lora = LoraRows { slots: &self.slots, rows: &rows };
            self.model.forward_with_lora(&self.ctx, &self.ws, &self.cache, &batch, lora, 1, true)
        } else {
            self.model.forward(&self.ctx, &self.ws, &self.cache, &batch, 1, true)
        };
        let out = out.unwrap();
        let vocab = self.model.config().vocab_size;
        let mut logits =
            out.logits.unwrap().chunks(vocab).map(<[f32]>::to_vec).collect::<Vec<_>>().into_iter();
        seqs.iter().map(|s| logits.by_ref().take(s.tokens.len()).collect()).collect()
    }
}

/// Largest difference between `row` and the reference summary (top-8 and fixed ids); the
/// argmax must agree where the reference's top-1/top-2 gap exceeds 1e-3.
fn worst(row: &[f32], reference: &Value, fixed_ids: &[u32], what: &str) -> f64 {
    let value = |id: u32| f64::from(row[id as usize]);
    let mut worst = 0.0f64;
    let top: Vec<f64> =
        reference["top_values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    for (&id, &expected) in ids(&reference["top_ids"]).iter().zip(&top) {
        worst = worst.max((value(id) - expected).abs());
    }
    for (&id, expected) in fixed_ids.iter().zip(reference["fixed"].as_array().unwrap()) {
        worst = worst.max((value(id) - expected.as_f64().unwrap()).abs());
    }
    if top[0] - top[1] > 1e-3 {
        let argmax = row.iter().enumerate().fold(0, |b, (i, &l)| if l > row[b] { i } else { b });
        assert_eq!(argmax as u64, reference["argmax"].as_u64().unwrap(), "{what}: argmax");
    }
    worst
}

/// Every adapter in `slot` order on `base`, each prompt's logits against the reference.
fn check_parity(family: &str, base: &Path, gguf_adapters: bool) {
    let fx = fixture(family);
    let fixed = ids(&fx["fixed_ids"]);
    let runner = Runner::new(base);
    let lora = family_dir(family).join("lora");
    let mut checked = 0;
    for (slot, name) in ADAPTERS.iter().enumerate() {
        let entry = &fx["adapters"][name];
        let path = if gguf_adapters { lora.join(format!("{name}.f32.gguf")) } else { lora.join(name) };
        if gguf_adapters && entry.get("gguf_sha256").is_none() {
            assert!(!path.exists(), "{name}: a GGUF cannot carry this adapter");
            continue;
        }
        runner.load(slot, &path);
        // Every prompt in one step, each sequence in blocks of its own.
        let prompts = entry["prompts"].as_array().unwrap();
        let tokens: Vec<Vec<u32>> = prompts.iter().map(|p| ids(&p["ids"])).collect();
        let seqs: Vec<Seq<'_>> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| Seq { tokens: t, past: 0, blocks: seq_blocks(i), slot: slot as u32 })
            .collect();
        for (prompt, logits) in prompts.iter().zip(runner.step(&seqs)) {
            for (p, (row, reference)) in logits.iter().zip(prompt["logits"].as_array().unwrap()).enumerate() {
                let what = format!("{family} {name} ({}) {} position {p}", path.display(), prompt["name"]);
                let w = worst(row, reference, &fixed, &what);
                assert!(w < 1e-3, "{what}: off by {w}");
            }
            checked += 1;
        }
    }
    assert!(checked >= 6, "{family}: {checked} prompts checked");
}

/// Blocks `1 + 4i ..` for sequence `i` of a step (up to 64 tokens each).
fn seq_blocks(i: usize) -> Vec<u32> {
    (1 + 4 * i as u32..5 + 4 * i as u32).collect()
}

/// PEFT adapters on the HF base of both families, and on Llama's GGUF base (its Q and K rows
/// permuted, so the adapter's B rows are too).
#[test]
fn peft_adapters_match_transformers() {
    for family in ["llama", "qwen2"] {
        check_parity(family, &family_dir(family), false);
    }
    check_parity("llama", &family_dir("llama").join("llama.f32.gguf"), false);
}

/// The converter's LoRA GGUF on the GGUF base of both families, and on Llama's HF base.
#[test]
fn gguf_adapters_match_transformers() {
    for family in ["llama", "qwen2"] {
        check_parity(family, &family_dir(family).join(format!("{family}.f32.gguf")), true);
    }
    check_parity("llama", &family_dir("llama"), true);
}

/// A row's logits are the same bits alone, in a batch mixing four adapters and the base, and
/// decoded one token at a time after its prompt was cached in another step.
#[test]
fn rows_do_not_depend_on_other_rows_adapters() {
    let fx = fixture("llama");
    let runner = Runner::new(&family_dir("llama"));
    let lora = family_dir("llama").join("lora");
    for (slot, name) in ADAPTERS.iter().enumerate() {
        runner.load(slot, &lora.join(name));
    }
    let prompts: Vec<Vec<u32>> =
        fx["adapters"]["sql"]["prompts"].as_array().unwrap().iter().map(|p| ids(&p["ids"])).collect();
    let prompt = |i: usize| &prompts[i % prompts.len()][..prompts[i % prompts.len()].len().min(40)];
    let slots = [0, 1, NO_LORA, 2, 3];
    let blocks = seq_blocks;
    let alone: Vec<_> = slots
        .iter()
        .enumerate()
        .map(|(i, &slot)| {
            runner.step(&[Seq { tokens: prompt(i), past: 0, blocks: blocks(i), slot }]).remove(0)
        })
        .collect();
    let mixed = runner.step(
        &slots
            .iter()
            .enumerate()
            .map(|(i, &slot)| Seq { tokens: prompt(i), past: 0, blocks: blocks(i), slot })
            .collect::<Vec<_>>(),
    );
    for (i, (a, m)) in alone.iter().zip(&mixed).enumerate() {
        assert!(a == m, "sequence {i} (slot {:#x}): mixed batch changed its bits", slots[i]);
    }
    // The adapters do change the rows.
    assert!(
        alone[0].last()
            != runner.step(&[Seq { tokens: prompt(0), past: 0, blocks: blocks(0), slot: NO_LORA }])[0].last()
    );
    // Each prompt's last token decoded after the rest was cached by a step of its own, the
    // five decodes in one batch in reverse order.
    for (i, &slot) in slots.iter().enumerate() {
        let p = prompt(i);
        runner.step(&[Seq { tokens: &p[..p.len() - 1], past: 0, blocks: blocks(i), slot }]);
    }
    let decodes: Vec<_> = (0..slots.len())
        .rev()
        .map(|i| Seq {
            tokens: &prompt(i)[prompt(i).len() - 1..],
            past: prompt(i).len() - 1,
            blocks: blocks(i),
            slot: slots[i],
        })
        .collect();
    let decoded = runner.step(&decodes);
    for (d, i) in decoded.iter().zip((0..slots.len()).rev()) {
        assert!(
            d[0] == *alone[i].last().unwrap(),
            "sequence {i}: decoded after caching differs from its prefill"
        );
    }
}

/// A model loaded for LoRA serving (the linears unfused, the MLP's gate and up one stacked
/// weight) gives a row without an adapter the bits of the model loaded without LoRA, alone,
/// beside an adapter's row and in a step without adapter rows (the plain forward, its norms
/// fused where the base model's are).
#[test]
fn rows_without_an_adapter_have_the_plain_models_bits() {
    let fx = fixture("llama");
    let dir = family_dir("llama");
    let (served, plain) = (Runner::new(&dir), Runner::with(&dir, false));
    served.load(0, &dir.join("lora").join(ADAPTERS[0]));
    let prompts: Vec<Vec<u32>> =
        fx["adapters"]["sql"]["prompts"].as_array().unwrap().iter().map(|p| ids(&p["ids"])).collect();
    let base = Seq { tokens: &prompts[0], past: 0, blocks: seq_blocks(0), slot: NO_LORA };
    let want = plain.step(&[Seq { slot: NO_LORA, blocks: seq_blocks(0), ..base }]).remove(0);
    let logit_bits = |rows: &[Vec<f32>]| {
        rows.iter().map(|r| r.iter().map(|v| v.to_bits()).collect()).collect::<Vec<Vec<u32>>>()
    };
    let want = logit_bits(&want);
    let alone = served.step(&[Seq { blocks: seq_blocks(0), ..base }]).remove(0);
    assert!(logit_bits(&alone) == want, "a base row alone differs from the plain model");
    let plain_step = served.step_with(&[Seq { blocks: seq_blocks(3), ..base }], false).remove(0);
    assert!(logit_bits(&plain_step) == want, "a step without adapter rows differs from the plain model");
    let adapted = Seq { tokens: &prompts[1 % prompts.len()], past: 0, blocks: seq_blocks(1), slot: 0 };
    let beside = served.step(&[adapted, Seq { blocks: seq_blocks(2), ..base }]).remove(1);
    assert!(logit_bits(&beside) == want, "a base row beside an adapter's differs from the plain model");
}

/// Adapters made for another base, or with fields pagoda does not implement, are refused by name.
#[test]
fn mismatched_and_unsupported_adapters_are_refused_by_name() {
    let llama = ModelFiles::open(family_dir("llama")).unwrap().config;
    let qwen2 = ModelFiles::open(family_dir("qwen2")).unwrap().config;
    let lora = family_dir("llama").join("lora");
    // Architecture (GGUF) and shapes: qwen2 and llama share shapes here, so a different width.
    match LoraAdapter::load(lora.join("chat.f32.gguf"), &qwen2) {
        Err(LoraError::Mismatch { reason, .. }) => {
            assert!(reason.contains("architecture \"llama\""), "{reason}")
        }
        other => panic!("expected an architecture mismatch, got {other:?}"),
    }
    let mut narrow = llama.clone();
    narrow.intermediate_size = 96;
    match LoraAdapter::load(lora.join("chat"), &narrow) {
        Err(LoraError::Mismatch { reason, .. }) => assert!(
            reason.contains("gate_proj") || reason.contains("up_proj") || reason.contains("down_proj"),
            "{reason}"
        ),
        other => panic!("expected a shape mismatch, got {other:?}"),
    }
    let adapter = LoraAdapter::load(lora.join("chat"), &llama).unwrap();
    assert_eq!((adapter.max_rank(), adapter.modules.len()), (8, 14));
    match adapter.check_rank(4) {
        Err(LoraError::RankTooLarge { rank: 8, max: 4, .. }) => {}
        other => panic!("expected a rank refusal, got {other:?}"),
    }
    // Unsupported PEFT fields, each named.
    let tmp = std::env::temp_dir().join(format!("pagoda-lora-{}", std::process::id()));
    for (field, value) in [
        ("use_dora", "true"),
        ("bias", "\"all\""),
        ("modules_to_save", "[\"lm_head\"]"),
        ("peft_type", "\"LOHA\""),
    ] {
        let dir = tmp.join(field);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(lora.join("sql/adapter_model.safetensors"), dir.join("adapter_model.safetensors"))
            .unwrap();
        let mut config: Value =
            serde_json::from_str(&std::fs::read_to_string(lora.join("sql/adapter_config.json")).unwrap())
                .unwrap();
        config[field] = serde_json::from_str(value).unwrap();
        std::fs::write(dir.join("adapter_config.json"), config.to_string()).unwrap();
        match LoraAdapter::load(&dir, &llama) {
            Err(LoraError::Unsupported { what, .. }) => assert!(what.contains(field), "{field}: {what}"),
            other => panic!("{field}: expected a refusal, got {other:?}"),
        }
    }
    // A model GGUF is not an adapter.
    match LoraAdapter::load(family_dir("llama").join("llama.f32.gguf"), &llama) {
        Err(LoraError::Unsupported { what, .. }) => assert!(what.contains("general.type"), "{what}"),
        other => panic!("expected a refusal, got {other:?}"),
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// Greedy tokens of each `(prompt, adapter)` through an engine with LoRA on (2 GPU slots, 2
/// host copies), all queued at once.
fn engine_greedy(jobs: &[(Vec<u32>, Option<&str>)], max_tokens: usize) -> Vec<Vec<u32>> {
    use pagoda::executor::lora::LoraConfig;
    use pagoda::{Engine, EngineConfig, SamplingParams};
    let config = EngineConfig {
        model: Some(family_dir("llama")),
        seed: 1,
        lora: Some(LoraConfig { max_loras: 2, max_lora_rank: 8, max_cpu_loras: 2 }),
        ..EngineConfig::default()
    };
    let mut engine = Engine::new(config).unwrap();
    for name in ADAPTERS {
        engine.load_lora(name, &family_dir("llama").join("lora").join(name)).unwrap();
    }
    let params = SamplingParams { ignore_eos: true, ..SamplingParams::greedy(max_tokens) };
    let ids: Vec<_> = jobs
        .iter()
        .map(|(prompt, lora)| {
            engine.add_tokens_request_with_lora(prompt.clone(), params.clone(), *lora).unwrap()
        })
        .collect();
    let mut out: std::collections::HashMap<_, Vec<u32>> = std::collections::HashMap::new();
    while engine.has_unfinished_requests() {
        for o in engine.step().unwrap() {
            out.entry(o.request_id).or_default().extend(o.new_token_ids);
        }
    }
    ids.iter().map(|id| out.remove(id).unwrap()).collect()
}

/// Requests of four adapters and the base through the engine, two GPU slots swapped LRU and
/// two host copies (the others re-read from disk), `max_loras` 2 a step: each decodes what it
/// decodes alone, and what transformers + peft decode (up to the reference's first near-tie).
#[test]
fn engine_serves_four_adapters_and_the_base_as_each_alone() {
    let fx = fixture("llama");
    let prompt = |name: &str| ids(&fx["adapters"][name]["prompts"][1]["ids"]);
    let mut jobs: Vec<(Vec<u32>, Option<&str>)> = ADAPTERS.iter().map(|&n| (prompt(n), Some(n))).collect();
    jobs.push((prompt("sql"), None));
    let n = 8;
    let together = engine_greedy(&jobs, n);
    for (job, got) in jobs.iter().zip(&together) {
        assert_eq!(
            *got,
            engine_greedy(std::slice::from_ref(job), n)[0],
            "{:?}: batched differs from alone",
            job.1
        );
        if let Some(name) = job.1 {
            let reference = &fx["adapters"][name]["prompts"][1];
            let margins = reference["greedy_margin"].as_array().unwrap();
            let exact = margins.iter().take_while(|m| m.as_f64().unwrap() > 1e-3).count().min(n);
            assert_eq!(got[..exact], ids(&reference["greedy"])[..exact], "{name}: greedy");
        }
    }
    assert_ne!(together[0], together[4], "the adapter changes the continuation");
}
