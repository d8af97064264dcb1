//! A borrowed view of one stored weight tensor, whatever file it came from.

use std::borrow::Cow;

use crate::dtype::DType;

/// One tensor as stored: element type, row-major shape (outermost first) and raw bytes.
///
/// For a matrix `[rows, cols]` each row is `cols` elements long; quantized rows are whole
/// GGUF blocks, so `cols` is a multiple of 32 for Q8_0/Q4_0/Q4_1.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorView<'a> {
    /// Element type of the stored bytes.
    pub dtype: DType,
    /// Row-major shape, outermost dimension first (borrowed from the file, or owned by a
    /// slice of it).
    pub shape: Cow<'a, [usize]>,
    /// The stored bytes, little-endian.
    pub data: &'a [u8],
}

impl<'a> TensorView<'a> {
    /// Number of elements.
    pub fn num_elements(&self) -> usize {
        self.shape.iter().product()
    }

    /// The same tensor over other bytes of the same size: its stored bytes reordered.
    pub fn with_data<'b>(&self, data: &'b [u8]) -> TensorView<'b>
    where
        'a: 'b,
    {
        debug_assert_eq!(data.len(), self.data.len(), "a reordering keeps the size");
        TensorView { dtype: self.dtype, shape: self.shape.clone(), data }
    }

    /// Rows `first..first + rows` of a matrix (`[rows, cols]`, the outermost dimension), sharing
    /// the stored bytes: how a fused projection (Phi-3's `qkv_proj`) is cut into its parts.
    /// `None` when the range or the row size does not fit.
    pub fn rows(&self, first: usize, rows: usize) -> Option<TensorView<'a>> {
        let (&total, inner) = self.shape.split_first()?;
        let row_bytes = self.dtype.bytes_for(inner.iter().product())?;
        if first + rows > total || row_bytes * total != self.data.len() {
            return None;
        }
        let shape = [&[rows][..], inner].concat();
        let data = &self.data[first * row_bytes..(first + rows) * row_bytes];
        Some(TensorView { dtype: self.dtype, shape: Cow::Owned(shape), data })
    }

    /// The elements decoded to f32 (dequantized for block types).
    pub fn to_f32(&self) -> Vec<f32> {
        crate::dtype::dequantize(self.dtype, self.data)
    }
}
