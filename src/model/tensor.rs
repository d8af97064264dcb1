//! A borrowed view of one stored weight tensor, whatever file it came from.

use crate::dtype::DType;

/// One tensor as stored: element type, row-major shape (outermost first) and raw bytes.
///
/// For a matrix `[rows, cols]` each row is `cols` elements long; quantized rows are whole
/// GGUF blocks, so `cols` is a multiple of 32 for Q8_0/Q4_0/Q4_1.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct TensorView<'a> {
    /// Element type of the stored bytes.
    pub dtype: DType,
    /// Row-major shape, outermost dimension first.
    pub shape: &'a [usize],
    /// The stored bytes, little-endian.
    pub data: &'a [u8],
}

impl TensorView<'_> {
    /// Number of elements.
    pub fn num_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The elements decoded to f32 (dequantized for block types).
    pub fn to_f32(&self) -> Vec<f32> {
        crate::dtype::dequantize(self.dtype, self.data)
    }
}
