//! Plain device tensors (f32 activations, u32 indices): creation, upload, row views, readback.

use super::GpuError;
use super::bind_cache::Binding;
use super::context::GpuContext;
use super::error_scopes::ErrorScopes;
use super::resource::DeviceBuffer;

/// Element type of a [`Tensor`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Elem {
    /// 32-bit float.
    F32,
    /// 32-bit unsigned integer (token ids, positions, slots, block tables).
    U32,
}

/// A dense row-major array in one storage buffer.
///
/// Cloning is cheap and shares the buffer. [`Tensor::rows`] gives a view of the first rows, so a
/// workspace sized for the largest step can serve every step.
#[derive(Debug, Clone)]
pub struct Tensor {
    pub(crate) buffer: DeviceBuffer,
    shape: Vec<usize>,
    elem: Elem,
}

impl Tensor {
    /// The dimensions, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Element type.
    pub fn elem(&self) -> Elem {
        self.elem
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.shape.iter().product()
    }

    /// True when the tensor holds no element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A view of the first `rows` rows (outermost dimension) sharing this buffer.
    pub fn rows(&self, rows: usize) -> Result<Tensor, GpuError> {
        let have = self.shape.first().copied().unwrap_or(1);
        if rows > have {
            return Err(GpuError::Shape(format!("view of {rows} rows of a tensor with {have}")));
        }
        let mut shape = self.shape.clone();
        if shape.is_empty() {
            shape.push(rows);
        } else {
            shape[0] = rows;
        }
        Ok(Tensor { buffer: self.buffer.clone(), shape, elem: self.elem })
    }

    /// A tensor of `shape` over `buffer`, which holds at least its elements.
    pub(crate) fn from_buffer(buffer: DeviceBuffer, shape: &[usize], elem: Elem) -> Tensor {
        Tensor { buffer, shape: shape.to_vec(), elem }
    }

    /// `Ok` when `bytes` are `elem` values that fit in this tensor (its shape: its buffer may
    /// hold more).
    pub(crate) fn check_write(&self, elem: Elem, bytes: &[u8]) -> Result<(), GpuError> {
        if self.elem != elem || bytes.len() as u64 > self.byte_len() {
            return Err(GpuError::Shape(format!(
                "writing {} {elem:?} values into a {:?} tensor of {:?}",
                bytes.len() / 4,
                self.elem,
                self.shape
            )));
        }
        Ok(())
    }

    pub(crate) fn byte_len(&self) -> u64 {
        4 * self.len() as u64
    }

    pub(crate) fn expect(&self, what: &str, elem: Elem, shape: &[usize]) -> Result<(), GpuError> {
        if self.elem != elem || self.shape != shape {
            return Err(GpuError::Shape(format!(
                "{what}: expected {elem:?} {shape:?}, got {:?} {:?}",
                self.elem, self.shape
            )));
        }
        Ok(())
    }
}

impl Binding {
    /// `t`'s buffer bound to `name` (kernels bound their reads by their parameters, so a row
    /// view binds the same buffer as the whole tensor).
    pub(crate) fn tensor(name: &'static str, t: &Tensor) -> Self {
        Self::buffer(name, &t.buffer)
    }
}

impl GpuContext {
    /// A zero-filled tensor, its buffer whole 16-byte units (the K-split linears read their
    /// activations as such).
    pub fn tensor(&self, elem: Elem, shape: &[usize]) -> Result<Tensor, GpuError> {
        let len: usize = shape.iter().product();
        let bytes = (4 * len.max(1) as u64).next_multiple_of(16);
        self.check_binding(|| format!("tensor {shape:?}"), bytes)?;
        let buffer = self.create_buffer(
            "tensor",
            bytes,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | wgpu::BufferUsages::COPY_DST,
        )?;
        Ok(Tensor { buffer, shape: shape.to_vec(), elem })
    }

    /// A tensor holding `data` (f32).
    pub fn upload_f32(&self, shape: &[usize], data: &[f32]) -> Result<Tensor, GpuError> {
        let t = self.tensor(Elem::F32, shape)?;
        self.write_f32(&t, data)?;
        Ok(t)
    }

    /// A tensor holding `data` (u32).
    pub fn upload_u32(&self, shape: &[usize], data: &[u32]) -> Result<Tensor, GpuError> {
        let t = self.tensor(Elem::U32, shape)?;
        self.write_u32(&t, data)?;
        Ok(t)
    }

    /// Writes `data` to the start of `t`, before the next command buffer submitted runs (not
    /// while a step that reads `t` is being recorded: it may have submitted part of itself).
    pub fn write_f32(&self, t: &Tensor, data: &[f32]) -> Result<(), GpuError> {
        self.write_words(t, Elem::F32, bytemuck::cast_slice(data))
    }

    /// Writes `data` to the start of `t`, before the next command buffer submitted runs (not
    /// while a step that reads `t` is being recorded: it may have submitted part of itself).
    pub fn write_u32(&self, t: &Tensor, data: &[u32]) -> Result<(), GpuError> {
        self.write_words(t, Elem::U32, bytemuck::cast_slice(data))
    }

    fn write_words(&self, t: &Tensor, elem: Elem, bytes: &[u8]) -> Result<(), GpuError> {
        t.check_write(elem, bytes)?;
        if !bytes.is_empty() {
            self.queue.write_buffer(&t.buffer, 0, bytes);
        }
        Ok(())
    }

    pub(crate) fn create_buffer(
        &self,
        label: &str,
        size: u64,
        usage: wgpu::BufferUsages,
    ) -> Result<DeviceBuffer, GpuError> {
        self.count().buffer_created();
        let scopes = ErrorScopes::push(&self.device);
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size,
            usage,
            mapped_at_creation: false,
        });
        scopes.pop(&format!("{label} of {size} bytes"), GpuError::Device)?;
        Ok(DeviceBuffer::new(buffer))
    }
}
