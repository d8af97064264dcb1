//! What a composed shader says of itself, read by naga: its bindings by the name of the WGSL
//! variable bound there, its entry point's workgroup size and the bytes of its
//! `var<workgroup>`s. Rust mirrors none of it: a kernel binds its resources by name
//! ([`Reflection::slot_of`]), and the adapter choices are sized by [`Reflection::workgroup_bytes`].

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use naga::{AddressSpace, Module};
use rustc_hash::FxBuildHasher;

use super::KernelVariant;
use crate::gpu::GpuError;

/// Most bindings a kernel may declare (its parameter block included): bind-group keys hold
/// one resource a slot in an array this long.
pub const MAX_BINDINGS: usize = 16;

/// The name of every kernel's parameter block, the uniform `P`.
pub const PARAMS: &str = "P";

/// A composed shader's interface, as naga reflects it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reflection {
    /// Every resource of bind group 0 but [`PARAMS`], as (WGSL name, binding), by binding.
    bindings: Vec<(String, u32)>,
    /// The binding of [`PARAMS`].
    pub params: u32,
    /// The entry point's `@workgroup_size`.
    pub workgroup_size: [u32; 3],
    /// Bytes of the module's `var<workgroup>`s, as naga's layouter sizes them.
    pub workgroup_bytes: u32,
    /// Storage buffers it binds (weight textures are not), against the per-stage limit.
    pub storage_buffers: u32,
}

/// A variant's module, parsed once, with its reflection.
pub struct Composed {
    /// The module, to hand to wgpu as it is (`ShaderSource::Naga`).
    pub module: Module,
    /// What it declares.
    pub reflection: Arc<Reflection>,
}

impl Reflection {
    /// Reflects `module` (of the kernel `label`): one entry point, every bound resource in bind
    /// group 0 under a name of its own at a binding under [`MAX_BINDINGS`], a uniform `P`.
    pub fn of(module: &Module, label: &str) -> Result<Self, GpuError> {
        let bad = |what: String| GpuError::Shader(format!("{label}: {what}"));
        let [entry] = module.entry_points.as_slice() else {
            return Err(bad(format!("{} entry points, not one", module.entry_points.len())));
        };
        let mut params = None;
        let mut bindings = Vec::new();
        let mut storage_buffers = 0;
        for (_, var) in module.global_variables.iter() {
            let Some(binding) = &var.binding else { continue };
            let name = var.name.clone().ok_or_else(|| bad("an unnamed binding".into()))?;
            if binding.group != 0 || binding.binding as usize >= MAX_BINDINGS {
                return Err(bad(format!("`{name}` at group {} binding {}", binding.group, binding.binding)));
            }
            if matches!(var.space, AddressSpace::Storage { .. }) {
                storage_buffers += 1;
            }
            match name.as_str() {
                PARAMS if var.space == AddressSpace::Uniform => params = Some(binding.binding),
                PARAMS => return Err(bad(format!("`{PARAMS}` is in {:?}, not a uniform", var.space))),
                _ => bindings.push((name, binding.binding)),
            }
        }
        let params = params.ok_or_else(|| bad(format!("no uniform `{PARAMS}`")))?;
        bindings.sort_by_key(|&(_, slot)| slot);
        let mut slots: Vec<u32> = bindings.iter().map(|&(_, slot)| slot).chain([params]).collect();
        slots.sort_unstable();
        slots.dedup();
        if slots.len() != bindings.len() + 1 {
            return Err(bad("two resources share a binding".into()));
        }
        let mut layouter = naga::proc::Layouter::default();
        layouter.update(module.to_ctx()).map_err(|e| bad(format!("layout: {e}")))?;
        let workgroup_bytes = module
            .global_variables
            .iter()
            .filter(|(_, v)| v.space == AddressSpace::WorkGroup)
            .map(|(_, v)| layouter[v.ty].size)
            .sum();
        Ok(Self { bindings, params, workgroup_size: entry.workgroup_size, workgroup_bytes, storage_buffers })
    }

    /// Every resource but [`PARAMS`], as (WGSL name, binding), by binding.
    pub fn bindings(&self) -> &[(String, u32)] {
        &self.bindings
    }

    /// The binding of the variable named `name` (not [`PARAMS`]).
    pub fn slot(&self, name: &str) -> Option<u32> {
        self.bindings.iter().find(|(n, _)| n == name).map(|&(_, slot)| slot)
    }

    /// The binding of `name` in the kernel `label`: a [`GpuError::Binding`] where the shader
    /// declares no such variable.
    pub fn slot_of(&self, label: impl Fn() -> String, name: &str) -> Result<u32, GpuError> {
        self.slot(name).ok_or_else(|| GpuError::Binding(format!("{} declares no binding `{name}`", label())))
    }

    /// Checks that `slots` (of the kernel `label`) bind every resource the shader declares once:
    /// a [`GpuError::Binding`] for one bound twice or one left out.
    pub fn check_bound(
        &self,
        label: impl Fn() -> String,
        slots: impl IntoIterator<Item = u32>,
    ) -> Result<(), GpuError> {
        let mut seen = 0u32;
        for slot in slots {
            if seen & (1 << slot) != 0 {
                let name = self.bindings.iter().find(|&&(_, s)| s == slot).map_or("?", |(n, _)| n.as_str());
                return Err(GpuError::Binding(format!("{}: `{name}` bound twice", label())));
            }
            seen |= 1 << slot;
        }
        match self.bindings.iter().find(|&&(_, slot)| seen & (1 << slot) == 0) {
            Some((missing, _)) => {
                Err(GpuError::Binding(format!("{}: nothing bound to `{missing}`", label())))
            }
            None => Ok(()),
        }
    }
}

impl KernelVariant {
    /// The variant's WGSL parsed by naga, with its reflection (also kept for [`Self::reflect`]).
    pub fn compose(&self) -> Result<Composed, GpuError> {
        let source = self.source();
        let module = naga::front::wgsl::parse_str(&source)
            .map_err(|e| GpuError::Shader(format!("{}: {}", self.label(), e.emit_to_string(&source))))?;
        let reflection = Arc::new(Reflection::of(&module, &self.label())?);
        reflections().insert(*self, reflection.clone());
        Ok(Composed { module, reflection })
    }

    /// The variant's reflection: composed and parsed on the first call in the process, then
    /// kept (the capability checks ask for it before any pipeline is built).
    pub fn reflect(&self) -> Result<Arc<Reflection>, GpuError> {
        if let Some(reflection) = reflections().get(self) {
            return Ok(reflection.clone());
        }
        Ok(self.compose()?.reflection)
    }
}

/// Every variant reflected so far in the process (a variant's source depends on nothing else).
fn reflections() -> std::sync::MutexGuard<'static, HashMap<KernelVariant, Arc<Reflection>, FxBuildHasher>> {
    static CACHE: LazyLock<Mutex<HashMap<KernelVariant, Arc<Reflection>, FxBuildHasher>>> =
        LazyLock::new(Default::default);
    CACHE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::gpu::shader::GateActivation;

    /// The gated multiply's shader binds `GATE`, `UP` and `OUT` after `P`, numbered by the
    /// composer in declaration order; binding by any other set of names is an error.
    #[test]
    fn bindings_resolve_by_name_and_a_wrong_set_is_a_typed_error() {
        let reflection = KernelVariant::GatedMul { act: GateActivation::Silu }.reflect().unwrap();
        let names: Vec<&str> = reflection.bindings().iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["GATE", "UP", "OUT"]);
        let label = || "gated_mul".to_string();
        let resolve = |names: &[&str]| -> Result<Vec<u32>, GpuError> {
            let slots = names.iter().map(|n| reflection.slot_of(label, n)).collect::<Result<Vec<_>, _>>()?;
            reflection.check_bound(label, slots.iter().copied())?;
            Ok(slots)
        };
        assert_eq!(reflection.params, 0, "P, declared first (elementwise.wgsl)");
        assert_eq!(resolve(&["OUT", "GATE", "UP"]).unwrap(), [3, 1, 2]);
        for wrong in [&["GATE", "UP"][..], &["GATE", "UP", "OUT", "X"], &["GATE", "UP", "UP"]] {
            let err = resolve(wrong).unwrap_err();
            assert!(matches!(err, GpuError::Binding(_)), "{wrong:?}: {err}");
        }
    }

    /// A shader whose bindings break the rules is refused with a typed error.
    #[test]
    fn a_module_without_its_params_uniform_or_with_shared_bindings_is_refused() {
        let parse = |src: &str| Reflection::of(&naga::front::wgsl::parse_str(src).unwrap(), "t");
        let main = "@compute @workgroup_size(4) fn main() { _ = X[0]; }";
        let no_params = format!("@group(0) @binding(0) var<storage, read_write> X: array<f32>;\n{main}");
        assert!(matches!(parse(&no_params), Err(GpuError::Shader(_))));
        let shared = format!(
            "struct Q {{ n: u32 }}\n@group(0) @binding(0) var<uniform> P: Q;\n\
             @group(0) @binding(0) var<storage, read_write> X: array<f32>;\n{main}"
        );
        assert!(matches!(parse(&shared), Err(GpuError::Shader(_))));
        let fine = shared.replacen("@binding(0) var<storage", "@binding(1) var<storage", 1);
        let reflection = parse(&fine).unwrap();
        assert_eq!(
            (reflection.params, reflection.slot("X"), reflection.workgroup_size),
            (0, Some(1), [4, 1, 1])
        );
    }
}
