//! The contract between every composed shader and its Rust caller, read from the final WGSL
//! with naga: the uniform `P` has the name, field names, offsets, types and size of the
//! variant's Rust params struct; the bindings follow the rules the reflection relies on (bind
//! group 0, one name each, numbered in declaration order, `P` a uniform); the entry point runs
//! `workgroup_size()` invocations (the `WG` the grid is sized with). Its workgroup memory has no
//! Rust side to agree with: the adapter choices read naga's layout of it
//! (`Reflection::workgroup_bytes`).

use naga::{AddressSpace, Module, ScalarKind, TypeInner};
use pagoda::gpu::shader::params::{ParamsField, ParamsLayout};
use pagoda::gpu::shader::reflect::{PARAMS, Reflection};
use pagoda::gpu::shader::{GateActivation, KernelVariant, all_variants, coop_variants};

/// What a shader must agree on with its Rust side.
struct Contract {
    params: ParamsLayout,
    workgroup_size: u32,
}

impl Contract {
    fn of(variant: &KernelVariant) -> Self {
        Self { params: variant.params(), workgroup_size: variant.workgroup_size() }
    }
}

/// WGSL's spelling of a scalar type.
fn scalar_name(inner: &TypeInner) -> String {
    match inner {
        TypeInner::Scalar(s) if s.width == 4 => match s.kind {
            ScalarKind::Uint => "u32".into(),
            ScalarKind::Sint => "i32".into(),
            ScalarKind::Float => "f32".into(),
            other => format!("{other:?}"),
        },
        other => format!("{other:?}"),
    }
}

/// A field as (name, offset, type).
type Field = (String, usize, String);

fn rust_fields(layout: &ParamsLayout) -> Vec<Field> {
    layout.fields.iter().map(|f| (f.name.to_string(), f.offset, f.ty.to_string())).collect()
}

/// The name, fields and size of the struct bound as the uniform `P`, as naga lays it out.
fn reflected_params(module: &Module) -> Result<(String, Vec<Field>, usize), String> {
    let (_, var) = module
        .global_variables
        .iter()
        .find(|(_, v)| v.binding.is_some() && v.name.as_deref() == Some(PARAMS))
        .ok_or("no params uniform `P`")?;
    if var.space != AddressSpace::Uniform {
        return Err(format!("the params slot holds a {:?} variable, not a uniform", var.space));
    }
    let ty = &module.types[var.ty];
    let TypeInner::Struct { members, span } = &ty.inner else {
        return Err("the params uniform is not a struct".into());
    };
    let fields = members
        .iter()
        .map(|m| {
            (m.name.clone().unwrap_or_default(), m.offset as usize, scalar_name(&module.types[m.ty].inner))
        })
        .collect();
    Ok((ty.name.clone().unwrap_or_default(), fields, *span as usize))
}

/// Every way `src` breaks `contract`, one line each.
fn violations(src: &str, contract: &Contract) -> Vec<String> {
    let module = match naga::front::wgsl::parse_str(src) {
        Ok(module) => module,
        Err(e) => return vec![e.emit_to_string(src)],
    };
    let mut out = Vec::new();
    let rust = contract.params;
    match reflected_params(&module) {
        Ok((name, fields, size)) => {
            if name != rust.name {
                out.push(format!("params struct is `{name}` in WGSL, `{}` in Rust", rust.name));
            }
            let expected = rust_fields(&rust);
            if fields != expected {
                out.push(format!("{name} fields differ:\n  WGSL {fields:?}\n  Rust {expected:?}"));
            }
            if size != rust.size {
                out.push(format!("{name} is {size} bytes in WGSL, {} in Rust", rust.size));
            }
        }
        Err(e) => out.push(e),
    }
    match Reflection::of(&module, "composed") {
        Ok(reflection) => {
            let numbered: Vec<u32> = (0..=reflection.bindings().len() as u32).collect();
            let mut slots: Vec<u32> = reflection.bindings().iter().map(|&(_, s)| s).collect();
            slots.push(reflection.params);
            slots.sort_unstable();
            if slots != numbered {
                out.push(format!("bindings {slots:?} are not numbered from 0"));
            }
        }
        Err(e) => out.push(e.to_string()),
    }
    match module.entry_points.as_slice() {
        [entry] if entry.workgroup_size == [contract.workgroup_size, 1, 1] => {}
        [entry] => out.push(format!(
            "workgroup size {:?} in WGSL, {} in Rust",
            entry.workgroup_size, contract.workgroup_size
        )),
        entries => out.push(format!("{} entry points", entries.len())),
    }
    out
}

#[test]
fn every_variant_matches_its_rust_params_bindings_rules_and_workgroup_size() {
    let variants = [all_variants(), coop_variants()].concat();
    let failures: Vec<String> = variants
        .iter()
        .flat_map(|v| {
            violations(&v.source(), &Contract::of(v)).into_iter().map(|e| format!("{}: {e}", v.label()))
        })
        .collect();
    assert!(failures.is_empty(), "{} contract violations:\n{}", failures.len(), failures.join("\n"));
}

#[test]
fn every_composed_shader_names_its_files_and_injected_constants() {
    for variant in [all_variants(), coop_variants()].concat() {
        let src = variant.source();
        let header: Vec<&str> =
            src.lines().take_while(|l| l.starts_with("//") || l.starts_with("enable")).collect();
        assert!(header.first().is_some_and(|l| l.contains(&variant.label())), "{src}");
        assert!(header.iter().any(|l| l.contains(".wgsl")), "{}: no file named", variant.label());
        let consts = src.lines().filter(|l| l.starts_with("const ") && l.contains("u; // "));
        let wg = format!("const WG: u32 = {}u; // shader::", variant.workgroup_size());
        assert!(consts.clone().any(|l| l.starts_with(&wg)), "{}: no WG", variant.label());
        let reflection = variant.reflect().unwrap();
        assert_eq!(consts.filter(|l| l.starts_with("const SLOT_")).count(), reflection.bindings().len() + 1);
    }
}

#[test]
fn a_params_field_moved_on_one_side_only_is_caught() {
    let variant = KernelVariant::RmsNorm;
    let contract = Contract::of(&variant);
    let src = variant.source();
    assert!(violations(&src, &contract).is_empty());

    let wgsl_moved = src.replacen("    rows: u32,\n    d: u32,\n", "    d: u32,\n    rows: u32,\n", 1);
    assert_ne!(wgsl_moved, src);
    assert!(violations(&wgsl_moved, &contract).iter().any(|e| e.contains("fields differ")));

    let fields = contract.params.fields;
    let swapped = vec![
        ParamsField { offset: fields[1].offset, ..fields[0] },
        ParamsField { offset: fields[0].offset, ..fields[1] },
        fields[2],
    ];
    let rust_moved =
        Contract { params: ParamsLayout { fields: swapped.leak(), ..contract.params }, ..contract };
    assert!(violations(&src, &rust_moved).iter().any(|e| e.contains("fields differ")));
}

#[test]
fn a_shared_binding_or_a_workgroup_size_changed_on_one_side_only_is_caught() {
    let variant = KernelVariant::GatedMul { act: GateActivation::Silu };
    let src = variant.source();
    let slot_moved = src.replacen("@binding(SLOT_UP)", "@binding(SLOT_OUT)", 1);
    assert_ne!(slot_moved, src);
    let errors = violations(&slot_moved, &Contract::of(&variant));
    assert!(errors.iter().any(|e| e.contains("share a binding")), "{errors:?}");

    let wg_fixed = src.replacen("@workgroup_size(WG)", "@workgroup_size(32)", 1);
    assert_ne!(wg_fixed, src);
    let errors = violations(&wg_fixed, &Contract::of(&variant));
    assert!(errors.iter().any(|e| e.contains("workgroup size")), "{errors:?}");
}
