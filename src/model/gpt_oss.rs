//! gpt-oss's HF experts in the layout the loader reads. transformers keeps each layer's experts
//! as `mlp.experts.gate_up_proj` `[experts, hidden, 2 · ff]` (input-major, the gate's and the
//! up projection's columns interleaved: gate `2j`, up `2j + 1`, as `GptOssExperts._apply_gate`
//! takes them), its bias `[experts, 2 · ff]` interleaved the same way, and `down_proj`
//! `[experts, ff, hidden]`; llama.cpp's converter stores them as `[out, in]` matrices, the gate
//! and up apart. [`split_experts`] makes those from the HF tensors, once at load.

use super::architecture::ModelConfig;
use super::safetensors::SafetensorsFiles;
use super::weights::{WeightError, expert_name, of_shape};

/// Adds every layer's experts cut and transposed (see the module doc) to `files`.
pub fn split_experts(files: &mut SafetensorsFiles, config: &ModelConfig) -> Result<(), WeightError> {
    let Some(moe) = config.moe else { return Ok(()) };
    let (e, h, ff) = (moe.num_experts, config.hidden_size, moe.expert_intermediate_size);
    for l in 0..config.num_hidden_layers {
        let gate_up_name = expert_name(l, "gate_up_proj");
        let gate_up = checked(files, &gate_up_name, &[e, h, 2 * ff])?;
        let down = checked(files, &expert_name(l, "down_proj"), &[e, ff, h])?;
        let bias = checked(files, &expert_name(l, "gate_up_proj_bias"), &[e, 2 * ff])?;
        let width = element_bytes(&gate_up_name, gate_up.dtype)?;
        let (dtype, bias_dtype) = (gate_up.dtype, bias.dtype);
        let bias_width = element_bytes(&gate_up_name, bias_dtype)?;
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
        let pick_bias = |s: usize| -> Vec<u8> {
            (0..e * ff)
                .flat_map(|i| {
                    let at = (2 * i + s) * bias_width;
                    bias.data[at..at + bias_width].iter().copied()
                })
                .collect()
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
            ("gate_proj.bias", bias_dtype, vec![e, ff], pick_bias(0)),
            ("up_proj.bias", bias_dtype, vec![e, ff], pick_bias(1)),
        ];
        for (part, dtype, shape, data) in parts {
            files.add_derived(expert_name(l, part), dtype, shape, data);
        }
    }
    Ok(())
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
}
