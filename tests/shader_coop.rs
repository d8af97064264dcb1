//! Every cooperative-matrix linear variant (`shader::coop_variants`: every weight type, matrix
//! shape and tile, the adapter's matrices and their emulation), composed exactly as at run
//! time, must parse and validate with naga with the capabilities it asks for, and translate
//! with its SPIR-V and MSL back ends (the two that write the matrices: Vulkan and Metal); the
//! SPIR-V of the matrix variants multiplies with `OpCooperativeMatrixMulAddKHR`, the emulated
//! ones' with none.

use naga::back::{msl, spv};
use naga::valid::{Capabilities, ModuleInfo, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator};
use pagoda::gpu::shader::{KernelVariant, coop_variants};

fn validate(variant: &KernelVariant) -> Result<(naga::Module, ModuleInfo), String> {
    let src = variant.source();
    let module = naga::front::wgsl::parse_str(&src).map_err(|e| e.emit_to_string(&src))?;
    let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    caps.set(Capabilities::SHADER_FLOAT16, variant.needs_f16());
    caps.set(Capabilities::SUBGROUP, variant.needs_subgroup());
    caps.set(Capabilities::COOPERATIVE_MATRIX, variant.needs_coop());
    let mut validator = Validator::new(ValidationFlags::all(), caps);
    validator.subgroup_stages(ShaderStages::COMPUTE);
    validator.subgroup_operations(SubgroupOperationSet::all());
    let info = validator.validate(&module).map_err(|e| e.emit_to_string(&src))?;
    Ok((module, info))
}

/// The SPIR-V words, and the MSL source, naga writes for a validated module.
fn translate(module: &naga::Module, info: &ModuleInfo) -> Result<(Vec<u32>, String), String> {
    let msl_opts = msl::Options { lang_version: (2, 4), ..Default::default() };
    let (msl, _) = msl::write_string(module, info, &msl_opts, &msl::PipelineOptions::default())
        .map_err(|e| format!("msl: {e}"))?;
    let spv_opts = spv::Options { lang_version: (1, 6), ..Default::default() };
    let words = spv::write_vec(module, info, &spv_opts, None).map_err(|e| format!("spir-v: {e}"))?;
    Ok((words, msl))
}

/// How many instructions of `opcode` the SPIR-V module `words` holds.
fn count_opcode(words: &[u32], opcode: u32) -> usize {
    let mut at = 5;
    let mut n = 0;
    while at < words.len() {
        let (length, op) = ((words[at] >> 16) as usize, words[at] & 0xffff);
        n += usize::from(op == opcode);
        at += length.max(1);
    }
    n
}

/// `OpCooperativeMatrixMulAddKHR`.
const OP_COOP_MUL_ADD: u32 = 4459;

#[test]
fn every_coop_variant_validates_and_translates_to_spirv_and_msl() {
    let variants = coop_variants();
    let mut failures = Vec::new();
    for variant in &variants {
        let result = validate(variant).and_then(|(module, info)| translate(&module, &info));
        match result {
            Ok((words, msl)) => {
                let multiplies = count_opcode(&words, OP_COOP_MUL_ADD);
                let simdgroup = msl.contains("simdgroup_multiply_accumulate");
                if (multiplies > 0, simdgroup) != (variant.needs_coop(), variant.needs_coop()) {
                    failures.push(format!(
                        "{}: {multiplies} matrix multiply-adds in SPIR-V, simdgroup MSL {simdgroup}",
                        variant.label()
                    ));
                }
            }
            Err(e) => failures.push(format!("{}: {e}", variant.label())),
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} variants failed:\n{}",
        failures.len(),
        variants.len(),
        failures.join("\n\n")
    );
}

/// Every weight type on every matrix shape, through the matrices and emulated, in both tiles:
/// 16 types x 4 shapes x 2 x 2 tiles; every shape meets every prologue and epilogue pair.
#[test]
fn coop_variants_cover_every_type_shape_tile_and_pair() {
    use pagoda::gpu::shader::{LinearEpilogue, LinearPath, WEIGHT_DTYPES};
    use std::collections::HashSet;
    let variants = coop_variants();
    assert_eq!(variants.len(), WEIGHT_DTYPES.len() * 4 * 2 * 2);
    let mut labels: Vec<String> = variants.iter().map(KernelVariant::label).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), variants.len());
    let mut pairs = HashSet::new();
    for variant in &variants {
        let KernelVariant::Linear { path: LinearPath::Coop { shape, emulated }, prologue, epilogue, .. } =
            *variant
        else {
            panic!("{} is not a cooperative-matrix linear", variant.label());
        };
        pairs.insert((shape, emulated, prologue, epilogue));
    }
    // The 25 prologue and epilogue pairs: the plain and normed inputs with every epilogue, Gemma's
    // sandwich with the 3 of the linears it feeds.
    assert_eq!(pairs.len(), 4 * 2 * (2 * LinearEpilogue::ALL.len() + 3));
}
