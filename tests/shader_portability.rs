//! Every shader variant pagoda can build, composed exactly as at run time, must parse and
//! validate with naga and translate with its MSL, HLSL, SPIR-V and GLSL (compute) back ends.

use naga::back::{glsl, hlsl, msl, spv};
use naga::valid::{Capabilities, ModuleInfo, ShaderStages, SubgroupOperationSet, ValidationFlags, Validator};
use pagoda::gpu::shader::{KernelVariant, all_variants};

fn validate(variant: &KernelVariant) -> Result<(naga::Module, ModuleInfo), String> {
    let src = variant.source();
    let module = naga::front::wgsl::parse_str(&src).map_err(|e| e.emit_to_string(&src))?;
    // unpack2x16float/pack2x16float need SHADER_FLOAT16_IN_FLOAT32, which wgpu grants on every
    // Vulkan, Metal and DX12 device (the downlevel flag SHADER_F16_IN_F32).
    let mut caps = Capabilities::SHADER_FLOAT16_IN_FLOAT32;
    if variant.needs_f16() {
        caps |= Capabilities::SHADER_FLOAT16;
    }
    if variant.needs_subgroup() {
        caps |= Capabilities::SUBGROUP;
    }
    let mut validator = Validator::new(ValidationFlags::all(), caps);
    validator.subgroup_stages(ShaderStages::COMPUTE);
    validator.subgroup_operations(SubgroupOperationSet::all());
    let info = validator.validate(&module).map_err(|e| e.emit_to_string(&src))?;
    Ok((module, info))
}

fn translate(variant: &KernelVariant, module: &naga::Module, info: &ModuleInfo) -> Result<(), String> {
    let msl_opts = msl::Options { lang_version: (2, 4), ..Default::default() };
    msl::write_string(module, info, &msl_opts, &msl::PipelineOptions::default())
        .map_err(|e| format!("msl: {e}"))?;

    let hlsl_opts = hlsl::Options { shader_model: hlsl::ShaderModel::V6_2, ..Default::default() };
    let mut hlsl_out = String::new();
    hlsl::Writer::new(&mut hlsl_out, &hlsl_opts, &hlsl::PipelineOptions::default())
        .write(module, info, None)
        .map_err(|e| format!("hlsl: {e}"))?;

    let spv_opts = spv::Options { lang_version: (1, 3), ..Default::default() };
    spv::write_vec(module, info, &spv_opts, None).map_err(|e| format!("spir-v: {e}"))?;

    // naga's GLSL back end has no f16 scalars, and wgpu's GL backend never offers SHADER_F16,
    // so the f16-native variants are never chosen there.
    if variant.needs_f16() {
        return Ok(());
    }
    let glsl_opts = glsl::Options { version: glsl::Version::Desktop(450), ..Default::default() };
    let pipeline = glsl::PipelineOptions {
        shader_stage: naga::ShaderStage::Compute,
        entry_point: "main".into(),
        multiview: None,
    };
    let mut glsl_out = String::new();
    glsl::Writer::new(&mut glsl_out, module, info, &glsl_opts, &pipeline, Default::default())
        .and_then(|mut w| w.write())
        .map_err(|e| format!("glsl: {e}"))?;
    Ok(())
}

#[test]
fn every_variant_validates_and_translates_to_all_backends() {
    let variants = all_variants();
    let mut failures = Vec::new();
    for variant in &variants {
        let result = validate(variant).and_then(|(module, info)| translate(variant, &module, &info));
        if let Err(e) = result {
            failures.push(format!("{}: {e}", variant.label()));
        }
    }
    assert!(
        failures.is_empty(),
        "{} of {} variants failed:\n{}",
        failures.len(),
        variants.len(),
        failures.join("\n\n")
    );
    assert!(variants.len() > 80, "expected every specialisation, got {}", variants.len());
}

#[test]
fn variant_labels_are_unique() {
    let variants = all_variants();
    let mut labels: Vec<String> = variants.iter().map(KernelVariant::label).collect();
    labels.sort();
    labels.dedup();
    assert_eq!(labels.len(), variants.len());
}

#[test]
fn only_the_flagged_variants_use_optional_features() {
    for variant in all_variants() {
        let src = variant.source();
        assert_eq!(src.contains("enable f16;"), variant.needs_f16(), "{}", variant.label());
        let subgroups = ["subgroupBroadcast", "subgroupShuffle", "subgroup_invocation_id"];
        let uses_subgroups = subgroups.iter().any(|builtin| src.contains(builtin));
        assert_eq!(uses_subgroups, variant.needs_subgroup(), "{}", variant.label());
    }
}
