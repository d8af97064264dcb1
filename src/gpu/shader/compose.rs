//! Composes a variant's WGSL: a header naming its files and its injected constants, then the
//! files of `shaders/` in order, with its family's line markers expanded. What the files and
//! constants are is its family's to say ([`KernelVariant::family`]).

use super::KernelVariant;
use super::family::{Injected, ShaderFile};

/// The name of each resource `files` declare (`@binding(SLOT_<NAME>)`), in declaration order:
/// the composer numbers the bindings so, from 0, and Rust finds them by name in naga's
/// reflection ([`super::reflect`]).
fn binding_names(files: &[ShaderFile]) -> impl Iterator<Item = &'static str> {
    let mut seen: Vec<&'static str> = Vec::new();
    for file in files {
        for (at, _) in file.text.match_indices("@binding(SLOT_") {
            let rest = &file.text[at + "@binding(SLOT_".len()..];
            let name = &rest[..rest.find(')').unwrap_or(0)];
            if !seen.contains(&name) {
                seen.push(name);
            }
        }
    }
    seen.into_iter()
}

impl KernelVariant {
    /// The complete WGSL module of this variant.
    pub fn source(&self) -> String {
        let family = self.family();
        let files = family.files(self);
        let names: Vec<&str> = files.iter().map(|f| f.name).collect();
        let mut src = format!(
            "// Kernel `{}`, composed by pagoda's src/gpu/shader/compose.rs: the constants below,\n\
             // each injected from the Rust item named in its comment, then these files of shaders/:\n\
             // {}.\n",
            self.label(),
            names.join(", ")
        );
        if self.needs_f16() {
            src.push_str("enable f16;\n");
        }
        if self.needs_coop() {
            // naga holds the matrices to workgroup-uniform control flow, as it does barriers
            // (under this rule's name); coop_mma.wgsl keeps them subgroup-uniform, as they ask.
            src.push_str("enable wgpu_cooperative_matrix;\ndiagnostic(off, derivative_uniformity);\n");
        }
        let (wg, wg_name) = family.workgroup(self);
        let wg = Injected::new("WG", wg, format!("shader::{wg_name}"));
        let slots = binding_names(&files).enumerate().map(|(slot, name)| {
            Injected::new(
                format!("SLOT_{name}"),
                slot as u32,
                format!("binding {slot} of `{name}` in declaration order"),
            )
        });
        for c in [wg].into_iter().chain(family.constants(self)).chain(slots) {
            src.push_str(&format!("const {}: u32 = {}u; // {}\n", c.name, c.value, c.from));
        }
        for file in &files {
            src.push('\n');
            src.push_str(file.text);
        }
        family.expand(self, src)
    }
}
