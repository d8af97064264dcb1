//! pagoda's CPU dequantization of every quantized GGUF type it reads is bit-identical to the
//! `gguf` package's `gguf.quants.dequantize` on random blocks (assets/dequant_reference.json,
//! made by scripts/make-dequant-reference.py).

use pagoda::dtype::{DType, dequantize, quantize};
use pagoda::gpu::shader::WEIGHT_DTYPES;
use serde_json::Value;

/// Every quantized type pagoda reads: those the GPU kernels read, and MXFP4 (CPU only so far).
fn quantized_types() -> impl Iterator<Item = DType> {
    DType::QUANTIZED.into_iter()
}

#[test]
fn every_quantized_type_the_kernels_read_is_checked() {
    for dtype in WEIGHT_DTYPES.into_iter().filter(|dtype| dtype.is_quantized()) {
        assert!(DType::QUANTIZED.contains(&dtype), "{}", dtype.name());
    }
}

fn reference() -> Value {
    let text = include_str!("../assets/dequant_reference.json");
    serde_json::from_str(text).unwrap()
}

fn hex_bytes(hex: &str) -> Vec<u8> {
    (0..hex.len()).step_by(2).map(|i| u8::from_str_radix(&hex[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn dequantize_is_bit_identical_to_the_gguf_package() {
    let reference = reference();
    for dtype in quantized_types() {
        let entry = &reference[dtype.name()];
        let bytes = hex_bytes(entry["bytes"].as_str().unwrap());
        let expected: Vec<u32> =
            entry["f32_bits"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
        let got: Vec<u32> = dequantize(dtype, &bytes).iter().map(|v| v.to_bits()).collect();
        assert_eq!(got.len(), expected.len(), "{}", dtype.name());
        let first_diff = got.iter().zip(&expected).position(|(a, b)| a != b);
        assert_eq!(first_diff, None, "{}: first differing weight", dtype.name());
    }
}

#[test]
fn quantize_round_trips_within_a_step_of_each_block() {
    for dtype in quantized_types() {
        let n = dtype.block_len() * 3;
        let values: Vec<f32> = (0..n).map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0).collect();
        let bytes = quantize(dtype, &values);
        assert_eq!(bytes.len(), dtype.bytes_for(n).unwrap(), "{}", dtype.name());
        let back = dequantize(dtype, &bytes);
        // Half a step of the value range 2.5 at the type's levels, plus slack for the
        // quantized scales: 2 bits (4 levels) 0.45, 4 bits and more 0.25; Q3_K spans
        // [-4 d, 3 d], so the extreme of the opposite sign clips by up to a whole step.
        let bound = match dtype {
            DType::Q2K => 0.45,
            DType::Q3K => 0.35,
            _ => 0.25,
        };
        let worst = values.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(worst <= bound, "{}: worst error {worst}", dtype.name());
    }
}
