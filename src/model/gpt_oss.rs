//! gpt-oss's HF experts in the layout the loader reads. transformers keeps each layer's experts
//! as `mlp.experts.gate_up_proj` `[experts, hidden, 2 · ff]` (input-major, the gate's and the
//! up projection's columns interleaved: gate `2j`, up `2j + 1`, as `GptOssExperts._apply_gate`
//! takes them), its bias `[experts, 2 · ff]` interleaved the same way, and `down_proj`
//! `[experts, ff, hidden]`; llama.cpp's converter stores them as `[out, in]` matrices, the gate
//! and up apart. [`split_experts`] makes those from the HF tensors, once at load.
//!
//! The hub's checkpoints (quantization_config `quant_method: mxfp4`) hold the experts in MXFP4
//! instead: `gate_up_proj_blocks` `[experts, 2 · ff, hidden / 32, 16]` (output-major, gate and
//! up rows interleaved), `gate_up_proj_scales` `[experts, 2 · ff, hidden / 32]`, and
//! `down_proj_blocks` / `_scales` `[experts, hidden, ff / 32, …]`; element `2j` of a block in
//! byte `j`'s low nibble, `2j + 1` in its high one, the scale an E8M0 byte. They are repacked
//! into ggml's MXFP4 blocks (the scale byte, then byte `j` holding elements `j` and `j + 16`),
//! as llama.cpp's converter does, and stay MXFP4 on the GPU.

use super::architecture::ModelConfig;
use super::safetensors::SafetensorsFiles;
use super::weights::{WeightError, expert_name, of_shape};
use crate::dtype::DType;

/// Adds every layer's experts cut and transposed, or repacked from MXFP4 (see the module doc),
/// to `files`.
pub fn split_experts(files: &mut SafetensorsFiles, config: &ModelConfig) -> Result<(), WeightError> {
    let Some(moe) = config.moe else { return Ok(()) };
    let (e, h, ff) = (moe.num_experts, config.hidden_size, moe.expert_intermediate_size);
    for l in 0..config.num_hidden_layers {
        split_biases(files, l, e, ff)?;
        if files.has_tensor(&expert_name(l, "gate_up_proj_blocks")) {
            repack_mxfp4(files, l, [e, h, ff])?;
        } else {
            split_weights(files, l, [e, h, ff])?;
        }
    }
    Ok(())
}

/// Layer `l`'s gate and up biases, de-interleaved.
fn split_biases(files: &mut SafetensorsFiles, l: usize, e: usize, ff: usize) -> Result<(), WeightError> {
    let name = expert_name(l, "gate_up_proj_bias");
    let bias = checked(files, &name, &[e, 2 * ff])?;
    let (dtype, width) = (bias.dtype, element_bytes(&name, bias.dtype)?);
    let pick = |s: usize| -> Vec<u8> {
        (0..e * ff)
            .flat_map(|i| {
                let at = (2 * i + s) * width;
                bias.data[at..at + width].iter().copied()
            })
            .collect()
    };
    let (gate, up) = (pick(0), pick(1));
    files.add_derived(expert_name(l, "gate_proj.bias"), dtype, vec![e, ff], gate);
    files.add_derived(expert_name(l, "up_proj.bias"), dtype, vec![e, ff], up);
    Ok(())
}

/// Layer `l`'s float experts cut and transposed.
fn split_weights(files: &mut SafetensorsFiles, l: usize, [e, h, ff]: [usize; 3]) -> Result<(), WeightError> {
    let gate_up_name = expert_name(l, "gate_up_proj");
    let gate_up = checked(files, &gate_up_name, &[e, h, 2 * ff])?;
    let down = checked(files, &expert_name(l, "down_proj"), &[e, ff, h])?;
    let width = element_bytes(&gate_up_name, gate_up.dtype)?;
    let dtype = gate_up.dtype;
    // out[x][r][c] = in[x][c][2r + s]: rows of gate (s = 0) or up (s = 1), `h` columns each
    let pick = |s: usize| -> Vec<u8> {
        let mut out = Vec::with_capacity(e * ff * h * width);
        for x in 0..e {
            for r in 0..ff {
                for c in 0..h {
                    let at = ((x * h + c) * 2 * ff + 2 * r + s) * width;
                    out.extend_from_slice(&gate_up.data[at..at + width]);
                }
            }
        }
        out
    };
    let mut down_t = Vec::with_capacity(e * ff * h * width);
    let down_width = element_bytes(&gate_up_name, down.dtype)?;
    for x in 0..e {
        for r in 0..h {
            for c in 0..ff {
                let at = ((x * ff + c) * h + r) * down_width;
                down_t.extend_from_slice(&down.data[at..at + down_width]);
            }
        }
    }
    let down_dtype = down.dtype;
    let parts = [
        ("gate_proj.weight", dtype, vec![e, ff, h], pick(0)),
        ("up_proj.weight", dtype, vec![e, ff, h], pick(1)),
        ("down_proj.weight", down_dtype, vec![e, h, ff], down_t),
    ];
    for (part, dtype, shape, data) in parts {
        files.add_derived(expert_name(l, part), dtype, shape, data);
    }
    Ok(())
}

/// Layer `l`'s MXFP4 experts in ggml's blocks: gate and up (the checkpoint's even and odd
/// rows) `[e, ff, h]`, down `[e, h, ff]`.
fn repack_mxfp4(files: &mut SafetensorsFiles, l: usize, [e, h, ff]: [usize; 3]) -> Result<(), WeightError> {
    let gate_up = mxfp4_rows(files, l, "gate_up_proj", [e, 2 * ff, h])?;
    let down = mxfp4_rows(files, l, "down_proj", [e, h, ff])?;
    // whole blocks of 32 (mxfp4_rows checked), 17 bytes each
    let gate_row = h / 32 * 17;
    let rows = |s: usize| -> Vec<u8> {
        gate_up.chunks_exact(gate_row).skip(s).step_by(2).flatten().copied().collect()
    };
    let (gate, up) = (rows(0), rows(1));
    files.add_repacked(expert_name(l, "gate_proj.weight"), DType::MXFP4, vec![e, ff, h], gate);
    files.add_repacked(expert_name(l, "up_proj.weight"), DType::MXFP4, vec![e, ff, h], up);
    files.add_repacked(expert_name(l, "down_proj.weight"), DType::MXFP4, vec![e, h, ff], down);
    Ok(())
}

/// The checkpoint's `{part}_blocks` / `{part}_scales` of layer `l` (`[e, rows, cols]` weights)
/// as ggml MXFP4 rows, one after another.
fn mxfp4_rows(
    files: &SafetensorsFiles,
    l: usize,
    part: &str,
    [e, rows, cols]: [usize; 3],
) -> Result<Vec<u8>, WeightError> {
    let (blocks_name, scales_name) =
        (expert_name(l, &format!("{part}_blocks")), expert_name(l, &format!("{part}_scales")));
    if cols % 32 != 0 {
        return Err(not_blocks(&blocks_name, cols));
    }
    let n = cols / 32;
    let (shape, blocks) = files.packed(&blocks_name)?;
    same_shape(&blocks_name, shape, &[e, rows, n, 16])?;
    let (shape, scales) = files.packed(&scales_name)?;
    same_shape(&scales_name, shape, &[e, rows, n])?;
    let mut out = Vec::with_capacity(scales.len() * 17);
    for (block, &scale) in blocks.chunks_exact(16).zip(scales) {
        out.push(scale);
        out.extend(ggml_nibbles(block.try_into().expect("16-byte chunks")));
    }
    Ok(out)
}

/// One block's 32 codes in ggml's order (byte `j`: element `j` low, `j + 16` high) from the
/// checkpoint's (byte `j`: element `2j` low, `2j + 1` high).
fn ggml_nibbles(block: &[u8; 16]) -> [u8; 16] {
    let code = |k: usize| (block[k / 2] >> (4 * (k % 2))) & 0x0F;
    std::array::from_fn(|j| code(j) | (code(j + 16) << 4))
}

fn same_shape(name: &str, found: &[usize], expected: &[usize]) -> Result<(), WeightError> {
    if found != expected {
        return Err(WeightError::ShapeMismatch {
            name: name.to_owned(),
            expected: expected.to_vec(),
            found: found.to_vec(),
        });
    }
    Ok(())
}

/// A width that is no whole number of MXFP4 blocks.
fn not_blocks(name: &str, cols: usize) -> WeightError {
    WeightError::ShapeMismatch {
        name: format!("{name} (MXFP4 rows of 32)"),
        expected: vec![32],
        found: vec![cols],
    }
}

fn checked<'a>(
    files: &'a SafetensorsFiles,
    name: &str,
    expected: &[usize],
) -> Result<super::TensorView<'a>, WeightError> {
    of_shape(name, files.tensor(name)?, expected)
}

/// Bytes of one element of `dtype` (safetensors' f32, f16 and bf16 only).
fn element_bytes(name: &str, dtype: crate::dtype::DType) -> Result<usize, WeightError> {
    dtype.bytes_for(1).filter(|_| dtype.block_len() == 1).ok_or_else(|| WeightError::ShapeMismatch {
        name: format!("{name} ({})", dtype.name()),
        expected: vec![1],
        found: vec![dtype.block_len()],
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::model::TensorView;
    use crate::model::safetensors::serialize;
    use std::borrow::Cow;

    /// One layer of 1 expert, hidden 2, ff 2: the interleaved columns go to gate and up rows,
    /// down is transposed.
    #[test]
    fn experts_are_deinterleaved_and_transposed() {
        let f = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>();
        // gate_up[0] = [[g00 u00 g10 u10], [g01 u01 g11 u11]] (row c = input, col 2r + s)
        let gate_up = f(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
        let down = f(&[1.0, 2.0, 3.0, 4.0]); // [ff = 2, hidden = 2]
        let bias = f(&[10.0, 20.0, 30.0, 40.0]);
        fn view(shape: Vec<usize>, data: &[u8]) -> TensorView<'_> {
            TensorView { dtype: DType::F32, shape: Cow::Owned(shape), data }
        }
        let bytes = serialize(&[
            (expert_name(0, "gate_up_proj"), view(vec![1, 2, 4], &gate_up)),
            (expert_name(0, "down_proj"), view(vec![1, 2, 2], &down)),
            (expert_name(0, "gate_up_proj_bias"), view(vec![1, 4], &bias)),
        ])
        .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        std::fs::write(&path, bytes).unwrap();
        let mut files = SafetensorsFiles::open_files(&[path]).unwrap();
        let mut config = crate::model::testing::TinyLlama::new(0).config;
        config.num_hidden_layers = 1;
        config.hidden_size = 2;
        config.moe = Some(crate::model::moe::MoeConfig {
            num_experts: 1,
            experts_per_token: 1,
            expert_intermediate_size: 2,
            rule: crate::model::moe::RouterRule::TopKSoftmax,
            shared_expert_intermediate_size: None,
        });
        split_experts(&mut files, &config).unwrap();
        let get = |part: &str| files.tensor(&expert_name(0, part)).unwrap().to_f32();
        assert_eq!(get("gate_proj.weight"), [1.0, 5.0, 3.0, 7.0]);
        assert_eq!(get("up_proj.weight"), [2.0, 6.0, 4.0, 8.0]);
        assert_eq!(get("down_proj.weight"), [1.0, 3.0, 2.0, 4.0]);
        assert_eq!(get("gate_proj.bias"), [10.0, 30.0]);
        assert_eq!(get("up_proj.bias"), [20.0, 40.0]);
        assert_eq!(files.names().count(), 3, "derived tensors are not the file's");
    }

    /// One layer of 1 expert, hidden 32, ff 32, in the checkpoint's MXFP4 form: code `(r + k)
    /// % 16` at element `k` of row `r`, scale byte `100 + r`. The repacked rows hold ggml's
    /// blocks (gate the even rows, up the odd ones) and dequantize as transformers reads the
    /// checkpoint: `FP4_VALUES[code] · 2^(scale - 127)` (ggml's `-0` is `+0`).
    #[test]
    fn mxfp4_experts_are_repacked_into_ggml_blocks() {
        use safetensors::tensor::{Dtype, TensorView as View};
        const FP4_VALUES: [f32; 16] =
            [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, -0.0, -0.5, -1.0, -1.5, -2.0, -3.0, -4.0, -6.0];
        let code = |r: usize, k: usize| ((r + k) % 16) as u8;
        // the checkpoint's bytes: element 2j low, 2j + 1 high
        let blocks = |rows: usize| -> Vec<u8> {
            (0..rows).flat_map(|r| (0..16).map(move |j| code(r, 2 * j) | (code(r, 2 * j + 1) << 4))).collect()
        };
        let scales = |rows: usize| -> Vec<u8> { (0..rows).map(|r| 100 + r as u8).collect() };
        let (gate_up, gate_up_scales, down, down_scales) = (blocks(64), scales(64), blocks(32), scales(32));
        let bias = vec![0u8; 4 * 64];
        let views = [
            ("gate_up_proj_blocks", View::new(Dtype::U8, vec![1, 64, 1, 16], &gate_up).unwrap()),
            ("gate_up_proj_scales", View::new(Dtype::U8, vec![1, 64, 1], &gate_up_scales).unwrap()),
            ("down_proj_blocks", View::new(Dtype::U8, vec![1, 32, 1, 16], &down).unwrap()),
            ("down_proj_scales", View::new(Dtype::U8, vec![1, 32, 1], &down_scales).unwrap()),
            ("gate_up_proj_bias", View::new(Dtype::F32, vec![1, 64], &bias).unwrap()),
        ];
        let named = views.into_iter().map(|(part, view)| (expert_name(0, part), view));
        let bytes = safetensors::tensor::serialize(named, None).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        std::fs::write(&path, bytes).unwrap();
        let mut files = SafetensorsFiles::open_files(&[path]).unwrap();
        assert!(files.tensor(&expert_name(0, "gate_up_proj_blocks")).is_err(), "packed bytes are no weight");
        let mut config = crate::model::testing::TinyLlama::new(0).config;
        (config.num_hidden_layers, config.hidden_size) = (1, 32);
        config.moe = Some(crate::model::moe::MoeConfig {
            num_experts: 1,
            experts_per_token: 1,
            expert_intermediate_size: 32,
            rule: crate::model::moe::RouterRule::TopKSoftmax,
            shared_expert_intermediate_size: None,
        });
        split_experts(&mut files, &config).unwrap();
        for (part, source_row) in [("gate_proj", 0), ("up_proj", 1), ("down_proj", 2)] {
            let t = files.tensor(&expert_name(0, &format!("{part}.weight"))).unwrap();
            assert_eq!((t.dtype, &*t.shape), (DType::MXFP4, &[1, 32, 32][..]), "{part}");
            for (row, block) in t.data.chunks_exact(17).enumerate() {
                // gate: checkpoint row 2r, up: 2r + 1, down: r
                let r = if source_row == 2 { row } else { 2 * row + source_row };
                assert_eq!(block[0], 100 + r as u8, "{part} row {row}: the scale byte first");
                for j in 0..16 {
                    assert_eq!(
                        block[1 + j],
                        code(r, j) | (code(r, j + 16) << 4),
                        "{part} row {row} byte {j}"
                    );
                }
            }
            let values = t.to_f32();
            for (i, v) in values.iter().enumerate() {
                let (row, k) = (i / 32, i % 32);
                let r = if source_row == 2 { row } else { 2 * row + source_row };
                let want = FP4_VALUES[code(r, k) as usize] * 2f32.powi(100 + r as i32 - 127);
                // equal as numbers: ggml's table has one zero where the checkpoint's code 8 is -0
                assert_eq!(*v, want, "{part} [{row}, {k}]");
            }
        }
        // they stand for the packed tensors in the weight listing
        let listed: Vec<DType> = files.tensors().map(|t| t.dtype).collect();
        assert_eq!(listed.iter().filter(|&&d| d == DType::MXFP4).count(), 3);
        assert_eq!(listed.len(), 4, "the bias and the three repacked experts");
    }
}
