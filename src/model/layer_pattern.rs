//! Which decoder layers attend through a sliding window: a period (transformers'
//! `sliding_window_pattern`, llama.cpp's default per family) or, in a GGUF file,
//! `{arch}.attention.sliding_window_pattern` as one flag per layer or as that period.

use super::gguf::{GgufFile, MetadataValue};

/// A GGUF layer pattern that cannot be read: its key, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidPattern {
    /// The metadata key (`{arch}.attention.sliding_window_pattern`).
    pub key: String,
    /// What is wrong with its value.
    pub reason: String,
}

/// Per layer, whether it slides: layer `i` does when `(i + 1) % period != 0` (period 0: every
/// layer), the rule of transformers and llama.cpp (`set_swa_pattern`) for Gemma 2 (period 2)
/// and Gemma 3 (period 6); without a period, every layer.
pub fn period_flags(num_layers: usize, period: Option<usize>) -> Vec<bool> {
    (0..num_layers).map(|i| period.is_none_or(|p| p == 0 || !(i + 1).is_multiple_of(p))).collect()
}

/// `window` on the layers that slide, full attention (`None`) on the others.
pub fn windows(window: Option<usize>, sliding: &[bool]) -> Vec<Option<usize>> {
    sliding.iter().map(|&slides| window.filter(|_| slides)).collect()
}

/// The sliding layers of a GGUF file of `architecture` with `num_layers` layers, read as
/// llama.cpp's `load_swa_pattern` reads them: `{arch}.attention.sliding_window_pattern` as an
/// array holds one flag per layer (bools, or integers where nonzero slides), as an integer the
/// period; without the key, the family's `default_period`. An array of another length than
/// the layer count is refused by name (llama.cpp would leave the layers past it unflagged).
pub fn gguf_sliding_layers(
    gguf: &GgufFile,
    architecture: &str,
    num_layers: usize,
    default_period: Option<usize>,
) -> Result<Vec<bool>, InvalidPattern> {
    let key = format!("{architecture}.attention.sliding_window_pattern");
    let invalid = |reason: String| InvalidPattern { key: key.clone(), reason };
    let Some(value) = gguf.get(&key) else { return Ok(period_flags(num_layers, default_period)) };
    let Some(items) = value.as_array() else {
        let period = value.as_i64().ok_or_else(|| {
            invalid(format!("a {} is neither a period nor one flag per layer", value.type_name()))
        })?;
        let period = usize::try_from(period).map_err(|_| invalid(format!("period {period} is negative")))?;
        return Ok(period_flags(num_layers, Some(period)));
    };
    if items.len() != num_layers {
        return Err(invalid(format!(
            "{} layer flags for the {num_layers} layers of {architecture}.block_count",
            items.len()
        )));
    }
    items
        .iter()
        .map(|item| match item {
            MetadataValue::Bool(slides) => Ok(*slides),
            other => other.as_i64().map(|v| v != 0).ok_or_else(|| {
                invalid(format!("an array of {} is not one flag per layer", other.type_name()))
            }),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::ModelConfig;
    use crate::model::architecture::ConfigError;
    use crate::model::gguf::GgufWriter;

    /// A metadata-only Gemma 3 GGUF of `layers` layers with a window of 8 and, when given, a
    /// `gemma3.attention.sliding_window_pattern`.
    fn gemma3(layers: u32, pattern: Option<MetadataValue>) -> GgufFile {
        let mut w = GgufWriter::new();
        w.metadata("general.architecture", MetadataValue::String("gemma3".into()));
        for (key, value) in [
            ("block_count", layers),
            ("embedding_length", 64),
            ("feed_forward_length", 128),
            ("attention.head_count", 4),
            ("attention.head_count_kv", 1),
            ("attention.key_length", 32),
            ("context_length", 256),
            ("attention.sliding_window", 8),
            ("vocab_size", 100),
        ] {
            w.metadata(&format!("gemma3.{key}"), MetadataValue::U32(value));
        }
        w.metadata("gemma3.attention.layer_norm_rms_epsilon", MetadataValue::F32(1e-6));
        if let Some(pattern) = pattern {
            w.metadata("gemma3.attention.sliding_window_pattern", pattern);
        }
        GgufFile::from_bytes(w.to_bytes()).unwrap()
    }

    fn bools(flags: &[bool]) -> MetadataValue {
        MetadataValue::Array {
            element_type: 7,
            items: flags.iter().copied().map(MetadataValue::Bool).collect(),
        }
    }

    fn windows_of(file: &GgufFile) -> Vec<Option<usize>> {
        ModelConfig::from_gguf(file).unwrap().layer_windows
    }

    #[test]
    fn the_pattern_array_sets_each_layer_and_the_period_repeats() {
        let w = Some(8);
        assert_eq!(windows_of(&gemma3(3, Some(bools(&[true, true, false])))), [w, w, None]);
        assert_eq!(windows_of(&gemma3(3, Some(bools(&[false, true, true])))), [None, w, w]);
        assert_eq!(windows_of(&gemma3(4, Some(MetadataValue::i32s([1, 0, 1, 1])))), [w, None, w, w]);
        assert_eq!(windows_of(&gemma3(6, Some(MetadataValue::U32(3)))), [w, w, None, w, w, None]);
        assert_eq!(windows_of(&gemma3(2, Some(MetadataValue::U32(0)))), [w, w]);
        // without the key, Gemma 3's 5:1
        assert_eq!(windows_of(&gemma3(7, None)), [w, w, w, w, w, None, w]);
    }

    #[test]
    fn a_pattern_that_contradicts_the_layer_count_is_refused_by_name() {
        for pattern in [bools(&[true, true, false, true]), bools(&[true, false]), MetadataValue::I32(-1)] {
            match ModelConfig::from_gguf(&gemma3(3, Some(pattern.clone()))) {
                Err(ConfigError::InvalidField { field, .. }) => {
                    assert_eq!(field, "gemma3.attention.sliding_window_pattern", "{pattern:?}")
                }
                other => panic!("{pattern:?}: {other:?}"),
            }
        }
        let strings = MetadataValue::strings(["sliding", "sliding", "full"]);
        assert!(matches!(
            ModelConfig::from_gguf(&gemma3(3, Some(strings))),
            Err(ConfigError::InvalidField { field, .. }) if field == "gemma3.attention.sliding_window_pattern"
        ));
    }
}
