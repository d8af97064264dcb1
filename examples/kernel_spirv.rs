//! Writes the WGSL and SPIR-V of every mat-vec variant a model's decode step runs on an NVIDIA
//! GPU under Vulkan, without a GPU: the input of the kernel cost report
//! (`scripts/kernel-cost.sh`, which counts each variant's hot loop).
//!
//! ```text
//! cargo run --example kernel_spirv -- [--batches 1,8] OUT_DIR MODEL...
//! ```
//!
//! `--batches` lists the decode batches (rows of x a step) whose variants to write: 1 by
//! default; 2 to 8 take the GEMV over that many rows (each weight run decoded once for all).
//!
//! A MODEL is a GGUF file (only its tensor table is read) or `SHAPE:TYPE`, a shape of `pagoda
//! random-model` in one weight type (`llama-2-7b:q4_k`), whose weights are never written. The
//! variants are the ones pagoda's capability layer picks for an adapter like an H100's
//! (discrete, subgroups of 32, shader-f16: the K-split GEMV); the SPIR-V is naga's, written with
//! the options wgpu's Vulkan backend gives it there (SPIR-V 1.6, index clamping, loop bounding,
//! integer division checks, buffer accesses left to the driver's robustness). Each variant gets
//! `OUT_DIR/<n>.wgsl` and `OUT_DIR/<n>.spv`, and one JSON line on stdout: its label, weight type,
//! models, row lengths, the weight rows a workgroup reads against one load of the activations,
//! the rows of x a workgroup multiplies each weight by, and the binding slots of the weights and
//! activations.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result, bail};
use naga::back::spv;
use naga::valid::{Capabilities as NagaCaps, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator};
use pagoda::dtype::DType;
use pagoda::gpu::shader::{WEIGHT_DTYPES, WeightSource};
use pagoda::gpu::{
    Capabilities, FeatureMask, GateActivation, KernelVariant, KvPrecision, LinearEpilogue, LinearPrologue,
    linear_variant_of,
};
use pagoda::model::architecture::MlpActivation;
use pagoda::model::random::RandomShape;
use pagoda::model::{ModelFiles, TensorView};

/// The adapter the report is for: an NVIDIA GPU under Vulkan (H100, H200, RTX).
fn nvidia_vulkan() -> Capabilities {
    Capabilities {
        adapter_name: "NVIDIA GPU (Vulkan)".into(),
        backend: "Vulkan".into(),
        driver: "NVIDIA".into(),
        device_type: "DiscreteGpu".into(),
        is_cpu: false,
        shader_f16: true,
        subgroup: true,
        subgroup_sizes: (32, 32),
        timestamp_query: true,
        masked: FeatureMask::default(),
        webgpu_default_limits: false,
        limits: wgpu::Limits::default(),
        forced_linear: None,
        forced_attention: None,
        forced_norm: None,
        forced_rope: None,
        forced_gemm_rows: None,
        forced_gemv_rows: None,
        forced_weight_source: None,
        forced_submit: None,
        profile_kernels: false,
        coop: Err("the report models the K-split mat-vec".into()),
    }
}

/// One linear layer of a decode step: its weight's type, row length and what the kernel does
/// around the product.
struct Linear {
    dtype: DType,
    k: usize,
    normed: bool,
    epilogue: LinearEpilogue,
}

/// What sets a layer's epilogues apart, from its weights (as `src/model/llama.rs` decides).
struct LayerKind {
    qkv_bias: bool,
    qk_norm: bool,
    post_norms: bool,
    act: GateActivation,
}

impl LayerKind {
    /// A layer's linears: Q/K/V (stacked when they share a type, RoPE and the K/V write in the
    /// epilogue unless Q/K norms need whole heads), the output projection, gate and up (one
    /// gated weight when they share a type) and down, given each weight's type and row length.
    fn linears(&self, caps: &Capabilities, w: [(DType, usize); 7]) -> Vec<Linear> {
        let [q, k, v, o, gate, up, down] = w;
        let qkv = if self.qk_norm || !caps.fuses_rope() {
            if self.qkv_bias { LinearEpilogue::Bias } else { LinearEpilogue::Store }
        } else {
            LinearEpilogue::RopeCache { kv: caps.kv_format(KvPrecision::Auto), bias: self.qkv_bias }
        };
        let residual = if self.post_norms { LinearEpilogue::Store } else { LinearEpilogue::Accumulate };
        let linear = |(dtype, k): (DType, usize), normed, epilogue| Linear { dtype, k, normed, epilogue };
        let mut out = Vec::new();
        if q.0 == k.0 && k.0 == v.0 {
            out.push(linear(q, true, qkv));
        } else {
            out.extend([q, k, v].map(|part| linear(part, true, qkv)));
        }
        out.push(linear(o, false, residual));
        if gate == up {
            out.push(linear(gate, true, LinearEpilogue::Gated(self.act)));
        } else {
            out.extend([gate, up].map(|part| linear(part, true, LinearEpilogue::Store)));
        }
        out.push(linear(down, false, residual));
        out
    }
}

/// A weight's type and row length.
fn type_and_k(t: &TensorView<'_>) -> (DType, usize) {
    (t.dtype, t.shape.last().copied().unwrap_or(0))
}

/// The linears of a GGUF model's decode step.
fn gguf_linears(path: &Path, caps: &Capabilities) -> Result<Vec<Linear>> {
    let files = ModelFiles::open(path).with_context(|| format!("opening {}", path.display()))?;
    let weights = files.llama_weights()?;
    let act = match files.config.mlp_activation {
        MlpActivation::Silu => GateActivation::Silu,
        MlpActivation::GeluTanh => GateActivation::GeluTanh,
    };
    let mut out = Vec::new();
    for l in &weights.layers {
        let kind = LayerKind {
            qkv_bias: l.qkv_bias.is_some(),
            qk_norm: l.qk_norm.is_some(),
            post_norms: l.post_norms.is_some(),
            act,
        };
        let mlp = l.dense_mlp().expect("a dense model");
        let w = [&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &mlp.gate_proj, &mlp.up_proj, &mlp.down_proj];
        out.extend(kind.linears(caps, w.map(type_and_k)));
    }
    let (dtype, k) = type_and_k(&weights.lm_head);
    out.push(Linear { dtype, k, normed: true, epilogue: LinearEpilogue::Store });
    Ok(out)
}

/// The linears of a decode step of `pagoda random-model`'s shape `name` in `dtype`.
fn shape_linears(name: &str, dtype: DType, caps: &Capabilities) -> Result<Vec<Linear>> {
    let s = RandomShape::named(name)?;
    let kind = LayerKind { qkv_bias: false, qk_norm: false, post_norms: false, act: GateActivation::Silu };
    let (h, attn) = (s.hidden, s.heads * (s.hidden / s.heads));
    let w = [h, h, h, attn, h, h, s.ffn].map(|k| (dtype, k));
    let mut out: Vec<Linear> = (0..s.layers).flat_map(|_| kind.linears(caps, w)).collect();
    out.push(Linear { dtype, k: h, normed: true, epilogue: LinearEpilogue::Store });
    Ok(out)
}

/// What the report says of one variant.
struct Entry {
    variant: KernelVariant,
    dtype: DType,
    models: Vec<String>,
    ks: Vec<usize>,
}

/// naga's SPIR-V of `variant` with the options wgpu-hal's Vulkan backend passes on a Vulkan 1.3
/// device with robust buffer access 2 and zero-initialized workgroup memory (an NVIDIA GPU's),
/// for the checked shader modules pagoda creates.
fn spirv(variant: &KernelVariant) -> Result<Vec<u32>> {
    let src = variant.source();
    let module = naga::front::wgsl::parse_str(&src).map_err(|e| anyhow::anyhow!(e.emit_to_string(&src)))?;
    let mut caps = NagaCaps::SHADER_FLOAT16_IN_FLOAT32 | NagaCaps::SUBGROUP;
    if variant.needs_f16() {
        caps |= NagaCaps::SHADER_FLOAT16;
    }
    let mut validator = Validator::new(ValidationFlags::all(), caps);
    validator.subgroup_stages(ShaderStages::COMPUTE);
    validator.subgroup_operations(SubgroupOperationSet::all());
    let info = validator.validate(&module).map_err(|e| anyhow::anyhow!(e.emit_to_string(&src)))?;
    let options = spv::Options {
        lang_version: (1, 6),
        flags: spv::WriterFlags::LABEL_VARYINGS | spv::WriterFlags::FORCE_POINT_SIZE,
        fake_missing_bindings: true,
        capabilities: None,
        bounds_check_policies: naga::proc::BoundsCheckPolicies {
            index: naga::proc::BoundsCheckPolicy::Restrict,
            buffer: naga::proc::BoundsCheckPolicy::Unchecked,
            image_load: naga::proc::BoundsCheckPolicy::Unchecked,
            binding_array: naga::proc::BoundsCheckPolicy::Unchecked,
        },
        zero_initialize_workgroup_memory: spv::ZeroInitializeWorkgroupMemoryMode::Native,
        force_loop_bounding: true,
        emit_int_div_checks: true,
        ..Default::default()
    };
    let pipeline =
        spv::PipelineOptions { shader_stage: naga::ShaderStage::Compute, entry_point: "main".into() };
    Ok(spv::write_vec(&module, &info, &options, Some(&pipeline))?)
}

/// The binding slot of the variant's storage variable `name`, from naga's reflection.
fn slot(variant: &KernelVariant, name: &str) -> Result<u32> {
    match variant.reflect()?.slot(name) {
        Some(slot) => Ok(slot),
        None => bail!("{} binds no {name}", variant.label()),
    }
}

/// A MODEL argument's name and linears.
fn model_linears(arg: &str, caps: &Capabilities) -> Result<(String, Vec<Linear>)> {
    if let Some((shape, type_name)) = arg.split_once(':') {
        let Some(dtype) = WEIGHT_DTYPES.into_iter().find(|d| d.name() == type_name) else {
            bail!("unknown weight type `{type_name}`");
        };
        return Ok((arg.to_owned(), shape_linears(shape, dtype, caps)?));
    }
    let path = PathBuf::from(arg);
    let name = path.file_stem().map_or(arg.to_owned(), |s| s.to_string_lossy().into_owned());
    Ok((name, gguf_linears(&path, caps)?))
}

fn main() -> Result<()> {
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let mut batches = vec![1];
    if args.first().is_some_and(|a| a == "--batches") && args.len() > 1 {
        batches = args[1].split(',').map(|b| b.trim().parse::<usize>()).collect::<Result<_, _>>()?;
        args.drain(..2);
    }
    let Some((out_dir, models)) = args.split_first().filter(|(_, models)| !models.is_empty()) else {
        bail!(
            "usage: kernel_spirv [--batches 1,8] OUT_DIR MODEL... (a GGUF path or SHAPE:TYPE, e.g. llama-2-7b:q4_k)"
        );
    };
    let out_dir = PathBuf::from(out_dir);
    std::fs::create_dir_all(&out_dir)?;
    let caps = nvidia_vulkan();
    let mut entries: BTreeMap<String, Entry> = BTreeMap::new();
    for arg in models {
        let (model, linears) = model_linears(arg, &caps)?;
        for (l, &m) in linears.iter().flat_map(|l| batches.iter().map(move |m| (l, m))) {
            let normed = l.normed && caps.fuses_norms(caps.linear_kernel(m));
            let prologue = if normed { LinearPrologue::RmsNorm } else { LinearPrologue::Plain };
            let variant =
                linear_variant_of(&caps, l.dtype, WeightSource::Buffer, l.k, m, prologue, l.epilogue);
            let entry = entries.entry(variant.label()).or_insert_with(|| Entry {
                variant,
                dtype: l.dtype,
                models: Vec::new(),
                ks: Vec::new(),
            });
            if !entry.models.contains(&model) {
                entry.models.push(model.clone());
            }
            if !entry.ks.contains(&l.k) {
                entry.ks.push(l.k);
            }
        }
    }
    for (n, (label, entry)) in entries.into_iter().enumerate() {
        let v = &entry.variant;
        let (wgsl, spv_path) = (out_dir.join(format!("{n}.wgsl")), out_dir.join(format!("{n}.spv")));
        std::fs::write(&wgsl, v.source())?;
        let words = spirv(v).with_context(|| label.clone())?;
        std::fs::write(&spv_path, bytemuck::cast_slice::<u32, u8>(&words))?;
        let rows = match v {
            KernelVariant::Linear { epilogue, .. } => v.columns_tile() * epilogue.gates(),
            _ => 1,
        };
        let line = serde_json::json!({
            "kernel": label,
            "weight_type": entry.dtype.name(),
            "models": entry.models,
            "k": entry.ks,
            "rows": rows,
            "x_rows": v.rows_per_workgroup(),
            "workgroup_size": v.workgroup_size(),
            "weights_binding": slot(v, "W")?,
            "activations_binding": slot(v, "X")?,
            "adapter": caps.adapter_name,
            "wgsl": wgsl,
            "spv": spv_path,
        });
        println!("{line}");
    }
    Ok(())
}
