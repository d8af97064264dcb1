//! The cooperative-matrix linear path (`shaders/linear_coop.wgsl`): what an adapter's matrix
//! configurations allow, the tiles the kernel is built with, and its workgroup memory.
//!
//! A workgroup stages a tile of activations (converted to the matrices' input type) and a tile
//! of weights (dequantized by each format's `w_group`, the function every other kernel's group
//! of eight weights comes from) in workgroup memory, and its subgroups multiply them with the
//! hardware's matrix multiply-add into f32 accumulators, one k-step of the matrix size at a
//! time in ascending order. The hardware's order inside a step is its own, so on such an
//! adapter every batch, decode rows too (padded to the tile), goes through the same steps: an
//! output's bits depend on the model's shapes and the adapter alone. The choice is per adapter
//! ([`crate::gpu::Capabilities::linear_path`]), never per batch.
//!
//! `shaders/coop_mma.wgsl` holds the multiply; `shaders/coop_mma_emu.wgsl` is the same
//! multiply in plain arithmetic over workgroup memory (one fma chain per output and step, k
//! ascending), so the tiling, dequantization, padding and epilogues are checked on adapters
//! without matrices (lavapipe in CI) with `PAGODA_LINEAR=coop-emulated`.

/// The element type of a cooperative matrix's A and B inputs (the accumulators are f32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CoopElem {
    /// Half precision (`VK_KHR_cooperative_matrix` on NVIDIA, AMD and Intel).
    F16,
    /// Single precision (Metal's 8x8 simdgroup matrices).
    F32,
}

impl CoopElem {
    /// Bytes of one input held in workgroup memory.
    pub fn bytes(self) -> u32 {
        match self {
            Self::F16 => 2,
            Self::F32 => 4,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::F16 => "f16",
            Self::F32 => "f32",
        }
    }
}

/// A cooperative-matrix configuration the linear kernel is built for: square matrices of
/// `size` (8 or 16: the sizes WGSL's `coop_mat8x8` and `coop_mat16x16` name) with inputs of
/// `elem` and f32 accumulators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopShape {
    /// Rows, columns and depth of one matrix multiply-add.
    pub size: u32,
    /// The inputs' element type.
    pub elem: CoopElem,
}

impl CoopShape {
    /// 16x16x16, f16 inputs, f32 accumulators: what NVIDIA's Vulkan drivers offer (tensor
    /// cores), and what `PAGODA_LINEAR=coop-emulated` emulates.
    pub const F16_16: Self = Self { size: 16, elem: CoopElem::F16 };
    /// 8x8x8 in f32: Metal's simdgroup matrices (`PAGODA_LINEAR=coop-emulated-f32` emulates it).
    pub const F32_8: Self = Self { size: 8, elem: CoopElem::F32 };
    /// Every configuration the kernel is built for, in the order an adapter prefers them: f32
    /// inputs where offered (the activations keep their bits), then f16 in the larger size.
    pub const ALL: [Self; 4] = [
        Self { size: 16, elem: CoopElem::F32 },
        Self::F32_8,
        Self::F16_16,
        Self { size: 8, elem: CoopElem::F16 },
    ];

    /// `16x16-f16`, `8x8-f32`, ...
    pub fn name(self) -> String {
        format!("{0}x{0}-{1}", self.size, self.elem.name())
    }

    /// The workgroup tiles the kernel is built with for this shape: decode batches of up to
    /// `size` rows take the first, larger ones the second ([`Self::tile_for`]).
    pub fn tiles(self) -> [CoopTile; 2] {
        let decode = CoopTile { rows: self.size, cols: 16, depth: 128 };
        let prefill = CoopTile { rows: 32, cols: 64, depth: 32 };
        [decode, prefill]
    }

    /// The tile a batch of `m` rows takes: the decode tile while the batch fits one matrix's
    /// rows (each weight read once a step), else the prefill tile. Both run the same k-steps
    /// for every output, so which one a batch takes never changes its bits.
    pub fn tile_for(self, m: usize) -> CoopTile {
        let [decode, prefill] = self.tiles();
        if m <= self.size as usize { decode } else { prefill }
    }

    /// The cooperative path's matrices on an adapter offering `offered` (wgpu's
    /// `Adapter::cooperative_matrix_properties`), with shader-f16 and subgroups as enabled and
    /// `workgroup_storage` bytes of workgroup memory: the first of [`Self::ALL`] offered with
    /// f32 accumulators, or why there is none.
    pub fn choose(
        offered: &[wgpu::CooperativeMatrixProperties],
        shader_f16: bool,
        subgroup: bool,
        workgroup_storage: u32,
    ) -> Result<Self, String> {
        if offered.is_empty() {
            return Err("the adapter offers no cooperative matrices".into());
        }
        if !subgroup {
            return Err("cooperative matrices need subgroups (each subgroup multiplies its own tiles)".into());
        }
        let scalar = |elem| match elem {
            CoopElem::F16 => wgpu::CooperativeScalarType::F16,
            CoopElem::F32 => wgpu::CooperativeScalarType::F32,
        };
        let fits = |shape: &Self| {
            offered.iter().any(|p| {
                [p.m_size, p.n_size, p.k_size] == [shape.size; 3]
                    && p.ab_type == scalar(shape.elem)
                    && p.cr_type == wgpu::CooperativeScalarType::F32
            })
        };
        let Some(shape) = Self::ALL.into_iter().filter(fits).find(|s| s.elem == CoopElem::F32 || shader_f16)
        else {
            let listed: Vec<String> = offered
                .iter()
                .map(|p| format!("{}x{}x{} {:?}->{:?}", p.m_size, p.n_size, p.k_size, p.ab_type, p.cr_type))
                .collect();
            return Err(format!(
                "none of the adapter's matrices ({}) is square 8 or 16 with f32 accumulators and inputs the device can hold{}",
                listed.join(", "),
                if shader_f16 { "" } else { " (no shader-f16)" }
            ));
        };
        let need =
            shape.tiles().map(|t| t.workgroup_bytes(shape.elem.bytes())).into_iter().max().unwrap_or(0);
        if need > workgroup_storage {
            return Err(format!(
                "its {} tiles need {need} bytes of workgroup memory, the device has {workgroup_storage}",
                shape.name()
            ));
        }
        Ok(shape)
    }
}

/// The cooperative matrices the linear path takes on `adapter` with shader-f16 and subgroups
/// as the device enables them and `workgroup_storage` bytes of workgroup memory, or why none
/// ([`CoopShape::choose`] over what it offers).
pub(super) fn adapter_offer(
    adapter: &wgpu::Adapter,
    shader_f16: bool,
    subgroup: bool,
    workgroup_storage: u32,
) -> Result<CoopShape, String> {
    if !adapter.features().contains(wgpu::Features::EXPERIMENTAL_COOPERATIVE_MATRIX) {
        return Err("the adapter lacks wgpu's cooperative matrices (Vulkan's VK_KHR_cooperative_matrix with the Vulkan memory model, Metal's simdgroup matrices)".into());
    }
    CoopShape::choose(&adapter.cooperative_matrix_properties(), shader_f16, subgroup, workgroup_storage)
}

/// Invocations of a cooperative linear workgroup: 4 subgroups of 32 on NVIDIA and Apple GPUs,
/// each multiplying its share of the tile's matrices.
pub const LINEAR_COOP_WG: u32 = 128;

/// The output tile of one cooperative linear workgroup: `rows` rows of x (a decode batch padded
/// to them) by `cols` weight rows (output columns, or half as many outputs of a gated weight,
/// each with a gate and an up row), staged `depth` weights of k at a time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CoopTile {
    /// Rows of x (`MT`).
    pub rows: u32,
    /// Weight rows (`NT`).
    pub cols: u32,
    /// Weights of k staged at once (`KT`, a multiple of 32 and of the matrix size).
    pub depth: u32,
}

impl CoopTile {
    /// Bytes of workgroup memory the tile takes with inputs of `elem_bytes`: the activations'
    /// and the weights' stages and the f32 accumulators.
    pub fn workgroup_bytes(self, elem_bytes: u32) -> u32 {
        (self.rows + self.cols) * self.depth * elem_bytes + 4 * self.rows * self.cols
    }
}

#[cfg(test)]
mod tests {
    use super::{CoopElem, CoopShape};
    use wgpu::CooperativeScalarType::{F16, F32};

    fn offer(
        size: u32,
        ab: wgpu::CooperativeScalarType,
        cr: wgpu::CooperativeScalarType,
    ) -> wgpu::CooperativeMatrixProperties {
        wgpu::CooperativeMatrixProperties {
            m_size: size,
            n_size: size,
            k_size: size,
            ab_type: ab,
            cr_type: cr,
            saturating_accumulation: false,
        }
    }

    #[test]
    fn adapters_take_f32_inputs_where_offered_then_the_larger_f16_matrices() {
        let nvidia = [offer(16, F16, F16), offer(16, F16, F32), offer(8, F16, F32)];
        let metal = [offer(8, F32, F32), offer(8, F16, F16), offer(8, F16, F32)];
        assert_eq!(CoopShape::choose(&nvidia, true, true, 49152), Ok(CoopShape::F16_16));
        assert_eq!(CoopShape::choose(&metal, true, true, 32768), Ok(CoopShape::F32_8));
        let metal_no_f16 = CoopShape::choose(&metal[1..], false, true, 32768);
        assert!(metal_no_f16.is_err_and(|why| why.contains("no shader-f16")));
        let f16_accumulators = CoopShape::choose(&[offer(16, F16, F16)], true, true, 49152);
        assert!(f16_accumulators.is_err_and(|why| why.contains("16x16x16 F16->F16")));
        assert!(CoopShape::choose(&[], true, true, 49152).is_err_and(|why| why.contains("no cooperative")));
        assert!(CoopShape::choose(&nvidia, true, false, 49152).is_err_and(|why| why.contains("subgroups")));
        // The prefill tile of f16 inputs fits WebGPU's 16 KiB, not 8.
        assert_eq!(CoopShape::choose(&nvidia, true, true, 16384), Ok(CoopShape::F16_16));
        assert!(CoopShape::choose(&nvidia, true, true, 8192).is_err_and(|why| why.contains("14336 bytes")));
    }

    #[test]
    fn decode_batches_take_one_matrix_of_rows_and_larger_ones_the_prefill_tile() {
        for shape in CoopShape::ALL {
            let [decode, prefill] = shape.tiles();
            assert_eq!(shape.tile_for(1), decode);
            assert_eq!(shape.tile_for(shape.size as usize), decode);
            assert_eq!(shape.tile_for(shape.size as usize + 1), prefill);
            for tile in [decode, prefill] {
                assert!(tile.depth.is_multiple_of(32) && tile.depth.is_multiple_of(shape.size));
                assert!(tile.rows.is_multiple_of(shape.size) && tile.cols.is_multiple_of(shape.size));
            }
        }
        assert_eq!(CoopShape::F16_16.tiles()[1].workgroup_bytes(CoopElem::F16.bytes()), 14336);
    }
}
