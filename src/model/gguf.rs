//! GGUF (versions 2 and 3) over a memory map: metadata, tensor infos and tensor bytes,
//! and a small writer used to make test models.
//!
//! Layout, little-endian: magic `GGUF`, `version: u32`, `tensor_count: u64`,
//! `metadata_kv_count: u64`, the key/value pairs, the tensor infos (name, `n_dims: u32`,
//! `dims: [u64]` innermost first, `type: u32`, `offset: u64`), then padding to
//! `general.alignment` (32 by default) and the tensor data, each tensor at its offset from
//! the start of the data section.

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;

use super::tensor::TensorView;
use crate::dtype::DType;

const MAGIC: &[u8; 4] = b"GGUF";
/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;
const ALIGNMENT_KEY: &str = "general.alignment";
/// Longest metadata string or name the reader accepts, in bytes.
pub const MAX_STRING_BYTES: u64 = 64 << 20;
/// Most elements of one metadata array the reader accepts.
pub const MAX_ARRAY_LEN: u64 = 1 << 24;
/// Deepest nesting of metadata arrays the reader accepts.
pub const MAX_ARRAY_DEPTH: usize = 4;
/// Most tensors or metadata pairs the reader accepts.
pub const MAX_ENTRIES: u64 = 1 << 20;

/// Why a GGUF file could not be read.
#[derive(Debug, thiserror::Error)]
pub enum GgufError {
    /// Opening or mapping the file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The file does not start with `GGUF`.
    #[error("not a GGUF file: magic is {found:02x?}, expected \"GGUF\"")]
    BadMagic {
        /// The first bytes found.
        found: Vec<u8>,
    },
    /// A GGUF version this reader does not know.
    #[error("unsupported GGUF version {0} (supported: 2, 3)")]
    UnsupportedVersion(u32),
    /// The file ends inside the header.
    #[error("truncated GGUF file: it ends at byte {file_len} while reading {what} at byte {offset}")]
    Truncated {
        /// What was being read.
        what: String,
        /// Where it starts.
        offset: usize,
        /// The file's length.
        file_len: usize,
    },
    /// A count or length beyond what the reader accepts (checked before allocating).
    #[error("{what} claims {len}, more than the limit of {limit}")]
    TooLarge {
        /// What claimed it.
        what: String,
        /// The claimed count or length.
        len: u64,
        /// The limit.
        limit: u64,
    },
    /// Metadata arrays nested deeper than [`MAX_ARRAY_DEPTH`].
    #[error("metadata key {0:?} nests arrays deeper than {MAX_ARRAY_DEPTH} levels")]
    NestingTooDeep(String),
    /// A metadata value of a type id outside the GGUF spec.
    #[error("metadata key {key:?} has unknown value type {type_id}")]
    UnknownValueType {
        /// The key.
        key: String,
        /// The type id found.
        type_id: u32,
    },
    /// A string that is not UTF-8.
    #[error("invalid UTF-8 in {what}")]
    InvalidUtf8 {
        /// Where.
        what: String,
    },
    /// `general.alignment` is zero or not a power of two.
    #[error("invalid general.alignment {0}: must be a power of two")]
    BadAlignment(u64),
    /// A tensor type id that ggml does not define.
    #[error("tensor {name:?} has unknown ggml type id {type_id}")]
    UnknownTensorType {
        /// The tensor.
        name: String,
        /// The type id found.
        type_id: u32,
    },
    /// A ggml tensor type that exists but pagoda does not load.
    #[error(
        "tensor {name:?} has type {type_name}, which pagoda does not support (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS, MXFP4)"
    )]
    UnsupportedTensorType {
        /// The tensor.
        name: String,
        /// The ggml type name.
        type_name: &'static str,
    },
    /// A tensor whose dimensions do not make whole blocks, or overflow.
    #[error("tensor {name:?} has invalid dims {dims:?} for type {dtype}")]
    BadTensorDims {
        /// The tensor.
        name: String,
        /// Its dims, innermost first as stored.
        dims: Vec<u64>,
        /// Its type.
        dtype: &'static str,
    },
    /// A tensor offset not a multiple of the alignment.
    #[error("tensor {name:?} offset {offset} is not a multiple of the alignment {alignment}")]
    MisalignedTensor {
        /// The tensor.
        name: String,
        /// Its offset in the data section.
        offset: u64,
        /// The file's alignment.
        alignment: usize,
    },
    /// A tensor whose bytes run past the end of the file.
    #[error(
        "tensor {name:?} runs past the end of the file: its data ends at byte {end}, the file has {file_len}"
    )]
    TensorPastEnd {
        /// The tensor.
        name: String,
        /// Absolute end offset of its data.
        end: u64,
        /// The file's length.
        file_len: usize,
    },
    /// Two tensors with one name.
    #[error("tensor {0:?} appears twice")]
    DuplicateTensor(String),
    /// A tensor the caller asked for is absent.
    #[error("tensor {0:?} not found in the GGUF file")]
    MissingTensor(String),
    /// A metadata key the caller asked for is absent.
    #[error("metadata key {0:?} not found in the GGUF file")]
    MissingKey(String),
    /// A metadata value of another type than the caller needs.
    #[error("metadata key {key:?} is {found}, expected {expected}")]
    WrongType {
        /// The key.
        key: String,
        /// What was expected.
        expected: &'static str,
        /// What was found.
        found: &'static str,
    },
}

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum MetadataValue {
    /// `u8`.
    U8(u8),
    /// `i8`.
    I8(i8),
    /// `u16`.
    U16(u16),
    /// `i16`.
    I16(i16),
    /// `u32`.
    U32(u32),
    /// `i32`.
    I32(i32),
    /// `f32`.
    F32(f32),
    /// `bool`.
    Bool(bool),
    /// UTF-8 string.
    String(String),
    /// Array of values of one type (`element_type` is its GGUF type id).
    Array {
        /// GGUF type id of the elements.
        element_type: u32,
        /// The elements.
        items: Vec<MetadataValue>,
    },
    /// `u64`.
    U64(u64),
    /// `i64`.
    I64(i64),
    /// `f64`.
    F64(f64),
}

impl MetadataValue {
    /// The GGUF type id of this value.
    pub fn type_id(&self) -> u32 {
        match self {
            Self::U8(_) => 0,
            Self::I8(_) => 1,
            Self::U16(_) => 2,
            Self::I16(_) => 3,
            Self::U32(_) => 4,
            Self::I32(_) => 5,
            Self::F32(_) => 6,
            Self::Bool(_) => 7,
            Self::String(_) => 8,
            Self::Array { .. } => 9,
            Self::U64(_) => 10,
            Self::I64(_) => 11,
            Self::F64(_) => 12,
        }
    }

    /// A short name of the value's type, for error messages.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::U8(_) => "u8",
            Self::I8(_) => "i8",
            Self::U16(_) => "u16",
            Self::I16(_) => "i16",
            Self::U32(_) => "u32",
            Self::I32(_) => "i32",
            Self::F32(_) => "f32",
            Self::Bool(_) => "bool",
            Self::String(_) => "string",
            Self::Array { .. } => "array",
            Self::U64(_) => "u64",
            Self::I64(_) => "i64",
            Self::F64(_) => "f64",
        }
    }

    /// The value as an integer, for every integer type.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Self::U8(v) => Some(v.into()),
            Self::I8(v) => Some(v.into()),
            Self::U16(v) => Some(v.into()),
            Self::I16(v) => Some(v.into()),
            Self::U32(v) => Some(v.into()),
            Self::I32(v) => Some(v.into()),
            Self::U64(v) => i64::try_from(v).ok(),
            Self::I64(v) => Some(v),
            _ => None,
        }
    }

    /// The value as a float, for float and integer types.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Self::F32(v) => Some(v.into()),
            Self::F64(v) => Some(v),
            _ => self.as_i64().map(|v| v as f64),
        }
    }

    /// The string, for a string value.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Self::String(s) => Some(s),
            _ => None,
        }
    }

    /// The elements, for an array value.
    pub fn as_array(&self) -> Option<&[MetadataValue]> {
        match self {
            Self::Array { items, .. } => Some(items),
            _ => None,
        }
    }
}

/// ggml type ids and names, as in ggml.h; `None` for the ids ggml has retired.
fn ggml_type_name(type_id: u32) -> Option<&'static str> {
    const NAMES: [&str; 40] = [
        "F32", "F16", "Q4_0", "Q4_1", "", "", "Q5_0", "Q5_1", "Q8_0", "Q8_1", "Q2_K", "Q3_K", "Q4_K", "Q5_K",
        "Q6_K", "Q8_K", "IQ2_XXS", "IQ2_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ2_S", "IQ4_XS", "I8",
        "I16", "I32", "I64", "F64", "IQ1_M", "BF16", "", "", "", "TQ1_0", "TQ2_0", "", "", "", "MXFP4",
    ];
    NAMES.get(type_id as usize).copied().filter(|n| !n.is_empty())
}

/// The ggml type id of a pagoda dtype.
pub fn ggml_type_id(dtype: DType) -> u32 {
    match dtype {
        DType::F32 => 0,
        DType::F16 => 1,
        DType::Q4_0 => 2,
        DType::Q4_1 => 3,
        DType::Q5_0 => 6,
        DType::Q5_1 => 7,
        DType::Q8_0 => 8,
        DType::Q2K => 10,
        DType::Q3K => 11,
        DType::Q4K => 12,
        DType::Q5K => 13,
        DType::Q6K => 14,
        DType::IQ4NL => 20,
        DType::IQ4XS => 23,
        DType::MXFP4 => 39,
        DType::BF16 => 30,
    }
}

fn dtype_of(type_id: u32) -> Option<DType> {
    match type_id {
        0 => Some(DType::F32),
        1 => Some(DType::F16),
        2 => Some(DType::Q4_0),
        3 => Some(DType::Q4_1),
        6 => Some(DType::Q5_0),
        7 => Some(DType::Q5_1),
        8 => Some(DType::Q8_0),
        10 => Some(DType::Q2K),
        11 => Some(DType::Q3K),
        12 => Some(DType::Q4K),
        13 => Some(DType::Q5K),
        14 => Some(DType::Q6K),
        20 => Some(DType::IQ4NL),
        23 => Some(DType::IQ4XS),
        39 => Some(DType::MXFP4),
        30 => Some(DType::BF16),
        _ => None,
    }
}

/// Where one tensor lies in the file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorInfo {
    /// Its name.
    pub name: String,
    /// Its element type.
    pub dtype: DType,
    /// Row-major shape, outermost first (GGUF's dims reversed).
    pub shape: Vec<usize>,
    /// Offset of its bytes from the start of the file.
    pub file_offset: usize,
    /// Length of its bytes.
    pub num_bytes: usize,
}

/// An open GGUF file: parsed metadata and tensor infos over a memory map of the file.
#[derive(Debug)]
pub struct GgufFile {
    version: u32,
    metadata: HashMap<String, MetadataValue>,
    metadata_keys: Vec<String>,
    tensors: Vec<TensorInfo>,
    tensor_index: HashMap<String, usize>,
    data_offset: usize,
    map: FileBytes,
}

/// The file's bytes: a memory map of a file on disk, or bytes already in memory.
#[derive(Debug)]
enum FileBytes {
    Mapped(Mmap),
    Owned(Vec<u8>),
}

impl std::ops::Deref for FileBytes {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            Self::Mapped(map) => map,
            Self::Owned(bytes) => bytes,
        }
    }
}

impl GgufFile {
    /// Map and parse the file at `path`.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufError> {
        let path = path.as_ref();
        let io = |source| GgufError::Io { path: path.to_owned(), source };
        let file = File::open(path).map_err(io)?;
        let len = file.metadata().map_err(io)?.len();
        if len < 8 {
            let mut found = std::fs::read(path).map_err(io)?;
            found.truncate(4);
            if found.len() == 4 && found != MAGIC {
                return Err(GgufError::BadMagic { found });
            }
            return Err(GgufError::Truncated { what: "header".into(), offset: 0, file_len: len as usize });
        }
        // SAFETY: the map is read-only; pagoda never writes model files while they are open.
        let map = unsafe { Mmap::map(&file) }.map_err(io)?;
        Self::parse(FileBytes::Mapped(map))
    }

    /// Parse a GGUF file held in memory.
    pub fn from_bytes(bytes: Vec<u8>) -> Result<Self, GgufError> {
        Self::parse(FileBytes::Owned(bytes))
    }

    fn parse(map: FileBytes) -> Result<Self, GgufError> {
        let mut r = Reader { buf: &map, pos: 0 };
        let magic = r.take(4, "magic")?;
        if magic != MAGIC {
            return Err(GgufError::BadMagic { found: magic.to_vec() });
        }
        let version = r.u32("version")?;
        if !(2..=3).contains(&version) {
            return Err(GgufError::UnsupportedVersion(version));
        }
        let tensor_count = r.count("tensor count", MAX_ENTRIES)?;
        let kv_count = r.count("metadata count", MAX_ENTRIES)?;
        let mut metadata = HashMap::new();
        let mut metadata_keys = Vec::new();
        for i in 0..kv_count {
            let key = r.string(&format!("metadata key #{i}"))?;
            let type_id = r.u32(&format!("type of metadata {key:?}"))?;
            let value = r.value(type_id, &key, 0)?;
            if metadata.insert(key.clone(), value).is_none() {
                metadata_keys.push(key);
            }
        }
        let alignment = match metadata.get(ALIGNMENT_KEY) {
            None => DEFAULT_ALIGNMENT as u64,
            Some(v) => {
                let a = v.as_i64().ok_or_else(|| GgufError::WrongType {
                    key: ALIGNMENT_KEY.into(),
                    expected: "an integer",
                    found: v.type_name(),
                })?;
                u64::try_from(a).map_err(|_| GgufError::BadAlignment(0))?
            }
        };
        if alignment == 0 || !alignment.is_power_of_two() || alignment > 1 << 20 {
            return Err(GgufError::BadAlignment(alignment));
        }
        let alignment = alignment as usize;
        let mut raw = Vec::new();
        for i in 0..tensor_count {
            let name = r.string(&format!("tensor info #{i}"))?;
            let n_dims = r.u32(&format!("dims of tensor {name:?}"))?;
            if n_dims > 8 {
                return Err(GgufError::BadTensorDims { name, dims: vec![], dtype: "any" });
            }
            let dims = (0..n_dims)
                .map(|_| r.u64(&format!("dims of tensor {name:?}")))
                .collect::<Result<Vec<_>, _>>()?;
            let type_id = r.u32(&format!("type of tensor {name:?}"))?;
            let offset = r.u64(&format!("offset of tensor {name:?}"))?;
            raw.push((name, dims, type_id, offset));
        }
        let data_offset = r.pos.next_multiple_of(alignment);
        let file_len = map.len();
        let mut tensors = Vec::with_capacity(raw.len());
        let mut tensor_index = HashMap::new();
        for (name, dims, type_id, offset) in raw {
            let dtype = dtype_of(type_id).ok_or_else(|| match ggml_type_name(type_id) {
                Some(type_name) => GgufError::UnsupportedTensorType { name: name.clone(), type_name },
                None => GgufError::UnknownTensorType { name: name.clone(), type_id },
            })?;
            let bad_dims =
                || GgufError::BadTensorDims { name: name.clone(), dims: dims.clone(), dtype: dtype.name() };
            let count = dims.iter().try_fold(1usize, |acc, &d| acc.checked_mul(usize::try_from(d).ok()?));
            let count = count.ok_or_else(bad_dims)?;
            if dims.first().is_some_and(|&d| !(d as usize).is_multiple_of(dtype.block_len())) {
                return Err(bad_dims());
            }
            let num_bytes = dtype.bytes_for(count).ok_or_else(bad_dims)?;
            if offset % alignment as u64 != 0 {
                return Err(GgufError::MisalignedTensor { name, offset, alignment });
            }
            let end = (data_offset as u64).saturating_add(offset).saturating_add(num_bytes as u64);
            if end > file_len as u64 {
                return Err(GgufError::TensorPastEnd { name, end, file_len });
            }
            if tensor_index.insert(name.clone(), tensors.len()).is_some() {
                return Err(GgufError::DuplicateTensor(name));
            }
            tensors.push(TensorInfo {
                shape: dims.iter().rev().map(|&d| d as usize).collect(),
                name,
                dtype,
                file_offset: data_offset + offset as usize,
                num_bytes,
            });
        }
        Ok(Self { version, metadata, metadata_keys, tensors, tensor_index, data_offset, map })
    }

    /// The file's GGUF version.
    pub fn version(&self) -> u32 {
        self.version
    }

    /// Offset of the data section from the start of the file.
    pub fn data_offset(&self) -> usize {
        self.data_offset
    }

    /// Metadata keys in file order.
    pub fn metadata_keys(&self) -> &[String] {
        &self.metadata_keys
    }

    /// The value of a metadata key, if present.
    pub fn get(&self, key: &str) -> Option<&MetadataValue> {
        self.metadata.get(key)
    }

    /// The value of a metadata key, or `MissingKey`.
    pub fn require(&self, key: &str) -> Result<&MetadataValue, GgufError> {
        self.get(key).ok_or_else(|| GgufError::MissingKey(key.to_owned()))
    }

    /// An integer metadata value, if present; an error if present with another type.
    pub fn get_int(&self, key: &str) -> Result<Option<i64>, GgufError> {
        self.get(key).map(|v| v.as_i64().ok_or_else(|| wrong_type(key, "an integer", v))).transpose()
    }

    /// A float (or integer) metadata value, if present.
    pub fn get_float(&self, key: &str) -> Result<Option<f64>, GgufError> {
        self.get(key).map(|v| v.as_f64().ok_or_else(|| wrong_type(key, "a number", v))).transpose()
    }

    /// A string metadata value, if present.
    pub fn get_str(&self, key: &str) -> Result<Option<&str>, GgufError> {
        self.get(key).map(|v| v.as_str().ok_or_else(|| wrong_type(key, "a string", v))).transpose()
    }

    /// A bool metadata value, if present.
    pub fn get_bool(&self, key: &str) -> Result<Option<bool>, GgufError> {
        self.get(key)
            .map(|v| match v {
                MetadataValue::Bool(b) => Ok(*b),
                _ => Err(wrong_type(key, "a bool", v)),
            })
            .transpose()
    }

    /// An array-of-strings metadata value, if present.
    pub fn get_str_array(&self, key: &str) -> Result<Option<Vec<&str>>, GgufError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let items = v.as_array().ok_or_else(|| wrong_type(key, "an array of strings", v))?;
        items
            .iter()
            .map(|i| i.as_str().ok_or_else(|| wrong_type(key, "an array of strings", i)))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// An array-of-integers metadata value, if present.
    pub fn get_int_array(&self, key: &str) -> Result<Option<Vec<i64>>, GgufError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let items = v.as_array().ok_or_else(|| wrong_type(key, "an array of integers", v))?;
        items
            .iter()
            .map(|i| i.as_i64().ok_or_else(|| wrong_type(key, "an array of integers", i)))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// A float array (`tokenizer.ggml.scores`, ...), `None` when absent.
    pub fn get_float_array(&self, key: &str) -> Result<Option<Vec<f64>>, GgufError> {
        let Some(v) = self.get(key) else { return Ok(None) };
        let items = v.as_array().ok_or_else(|| wrong_type(key, "an array of numbers", v))?;
        items
            .iter()
            .map(|i| i.as_f64().ok_or_else(|| wrong_type(key, "an array of numbers", i)))
            .collect::<Result<_, _>>()
            .map(Some)
    }

    /// Every tensor's info, in file order.
    pub fn tensor_infos(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// True when a tensor of that name exists.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.tensor_index.contains_key(name)
    }

    /// The named tensor, or `MissingTensor`.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, GgufError> {
        let &i = self.tensor_index.get(name).ok_or_else(|| GgufError::MissingTensor(name.to_owned()))?;
        let info = &self.tensors[i];
        Ok(TensorView {
            dtype: info.dtype,
            shape: Cow::Borrowed(&info.shape),
            data: &self.map[info.file_offset..info.file_offset + info.num_bytes],
        })
    }

    /// Every tensor of the file, in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.tensors.iter().map(|t| TensorView {
            dtype: t.dtype,
            shape: Cow::Borrowed(&t.shape),
            data: &self.map[t.file_offset..t.file_offset + t.num_bytes],
        })
    }
}

fn wrong_type(key: &str, expected: &'static str, found: &MetadataValue) -> GgufError {
    GgufError::WrongType { key: key.to_owned(), expected, found: found.type_name() }
}

/// A bounds-checked cursor over the file's bytes.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], GgufError> {
        let end = self.pos.checked_add(n).filter(|&e| e <= self.buf.len());
        let end = end.ok_or_else(|| GgufError::Truncated {
            what: what.to_owned(),
            offset: self.pos,
            file_len: self.buf.len(),
        })?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self, what: &str) -> Result<[u8; N], GgufError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N, what)?);
        Ok(out)
    }

    fn u32(&mut self, what: &str) -> Result<u32, GgufError> {
        self.array(what).map(u32::from_le_bytes)
    }

    fn u64(&mut self, what: &str) -> Result<u64, GgufError> {
        self.array(what).map(u64::from_le_bytes)
    }

    /// A count that may not exceed `limit`.
    fn count(&mut self, what: &str, limit: u64) -> Result<u64, GgufError> {
        let n = self.u64(what)?;
        if n > limit {
            return Err(GgufError::TooLarge { what: what.to_owned(), len: n, limit });
        }
        Ok(n)
    }

    /// A length of items of at least `min_item_bytes` each that may not exceed `limit`
    /// nor run past the end of the file.
    fn len(&mut self, what: &str, min_item_bytes: usize, limit: u64) -> Result<usize, GgufError> {
        let start = self.pos;
        let n = self.count(what, limit)?;
        let remaining = (self.buf.len() - self.pos) as u64;
        if n.saturating_mul(min_item_bytes as u64) > remaining {
            return Err(GgufError::Truncated {
                what: what.to_owned(),
                offset: start,
                file_len: self.buf.len(),
            });
        }
        Ok(n as usize)
    }

    fn string(&mut self, what: &str) -> Result<String, GgufError> {
        let n = self.len(what, 1, MAX_STRING_BYTES)?;
        let bytes = self.take(n, what)?;
        String::from_utf8(bytes.to_vec()).map_err(|_| GgufError::InvalidUtf8 { what: what.to_owned() })
    }

    fn value(&mut self, type_id: u32, key: &str, depth: usize) -> Result<MetadataValue, GgufError> {
        let what = format!("value of metadata {key:?}");
        Ok(match type_id {
            0 => MetadataValue::U8(u8::from_le_bytes(self.array(&what)?)),
            1 => MetadataValue::I8(i8::from_le_bytes(self.array(&what)?)),
            2 => MetadataValue::U16(u16::from_le_bytes(self.array(&what)?)),
            3 => MetadataValue::I16(i16::from_le_bytes(self.array(&what)?)),
            4 => MetadataValue::U32(u32::from_le_bytes(self.array(&what)?)),
            5 => MetadataValue::I32(i32::from_le_bytes(self.array(&what)?)),
            6 => MetadataValue::F32(f32::from_le_bytes(self.array(&what)?)),
            7 => MetadataValue::Bool(self.take(1, &what)?[0] != 0),
            8 => MetadataValue::String(self.string(&what)?),
            9 => {
                if depth >= MAX_ARRAY_DEPTH {
                    return Err(GgufError::NestingTooDeep(key.to_owned()));
                }
                let element_type = self.u32(&what)?;
                let min_bytes = match element_type {
                    0 | 1 | 7 => 1,
                    2 | 3 => 2,
                    4..=6 => 4,
                    8 | 10..=12 => 8,
                    9 => 12,
                    _ => {
                        return Err(GgufError::UnknownValueType {
                            key: key.to_owned(),
                            type_id: element_type,
                        });
                    }
                };
                let n = self.len(&what, min_bytes, MAX_ARRAY_LEN)?;
                let items =
                    (0..n).map(|_| self.value(element_type, key, depth + 1)).collect::<Result<_, _>>()?;
                MetadataValue::Array { element_type, items }
            }
            10 => MetadataValue::U64(u64::from_le_bytes(self.array(&what)?)),
            11 => MetadataValue::I64(i64::from_le_bytes(self.array(&what)?)),
            12 => MetadataValue::F64(f64::from_le_bytes(self.array(&what)?)),
            _ => return Err(GgufError::UnknownValueType { key: key.to_owned(), type_id }),
        })
    }
}

/// Builds a GGUF v3 file in memory: metadata in insertion order, tensors aligned to 32 bytes.
#[derive(Debug, Default)]
pub struct GgufWriter {
    metadata: Vec<(String, MetadataValue)>,
    tensors: Vec<(String, DType, Vec<usize>, Vec<u8>)>,
}

/// Why a tensor could not be added to a `GgufWriter`.
#[derive(Debug, thiserror::Error)]
#[error("tensor {name:?}: {bytes} bytes do not hold shape {shape:?} of {dtype}")]
pub struct GgufWriteError {
    /// The tensor.
    pub name: String,
    /// Its shape.
    pub shape: Vec<usize>,
    /// Its type.
    pub dtype: &'static str,
    /// The bytes given.
    pub bytes: usize,
}

impl GgufWriter {
    /// An empty file.
    pub fn new() -> Self {
        Self::default()
    }

    /// Add a metadata key/value.
    pub fn metadata(&mut self, key: &str, value: MetadataValue) -> &mut Self {
        self.metadata.push((key.to_owned(), value));
        self
    }

    /// Add a tensor with its row-major `shape` and stored `data` of type `dtype`.
    pub fn tensor(
        &mut self,
        name: &str,
        dtype: DType,
        shape: &[usize],
        data: Vec<u8>,
    ) -> Result<&mut Self, GgufWriteError> {
        let count: usize = shape.iter().product();
        let row_ok = shape.last().is_none_or(|&c| c % dtype.block_len() == 0);
        if !row_ok || dtype.bytes_for(count) != Some(data.len()) {
            return Err(GgufWriteError {
                name: name.to_owned(),
                shape: shape.to_vec(),
                dtype: dtype.name(),
                bytes: data.len(),
            });
        }
        self.tensors.push((name.to_owned(), dtype, shape.to_vec(), data));
        Ok(self)
    }

    /// The file's bytes.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = Vec::new();
        self.write_to(&mut out).expect("writing to memory cannot fail");
        out
    }

    /// Write the file to `path`.
    pub fn write(&self, path: impl AsRef<Path>) -> std::io::Result<()> {
        let mut file = std::io::BufWriter::new(std::fs::File::create(path)?);
        self.write_to(&mut file)?;
        std::io::Write::flush(&mut file)
    }

    /// Streams the file into `sink`: the header, then each tensor's data at its alignment.
    fn write_to(&self, sink: &mut impl std::io::Write) -> std::io::Result<()> {
        let mut out = Vec::new();
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&3u32.to_le_bytes());
        out.extend_from_slice(&(self.tensors.len() as u64).to_le_bytes());
        out.extend_from_slice(&(self.metadata.len() as u64).to_le_bytes());
        for (key, value) in &self.metadata {
            write_string(&mut out, key);
            out.extend_from_slice(&value.type_id().to_le_bytes());
            write_value(&mut out, value);
        }
        let mut offset = 0usize;
        for (name, dtype, shape, data) in &self.tensors {
            write_string(&mut out, name);
            out.extend_from_slice(&(shape.len() as u32).to_le_bytes());
            for &d in shape.iter().rev() {
                out.extend_from_slice(&(d as u64).to_le_bytes());
            }
            out.extend_from_slice(&ggml_type_id(*dtype).to_le_bytes());
            out.extend_from_slice(&(offset as u64).to_le_bytes());
            offset = (offset + data.len()).next_multiple_of(DEFAULT_ALIGNMENT);
        }
        let mut written = out.len();
        sink.write_all(&out)?;
        for (_, _, _, data) in &self.tensors {
            let pad = written.next_multiple_of(DEFAULT_ALIGNMENT) - written;
            sink.write_all(&[0; DEFAULT_ALIGNMENT][..pad])?;
            sink.write_all(data)?;
            written += pad + data.len();
        }
        Ok(())
    }
}

fn write_string(out: &mut Vec<u8>, s: &str) {
    out.extend_from_slice(&(s.len() as u64).to_le_bytes());
    out.extend_from_slice(s.as_bytes());
}

fn write_value(out: &mut Vec<u8>, value: &MetadataValue) {
    match value {
        MetadataValue::U8(v) => out.push(*v),
        MetadataValue::I8(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::U16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I16(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::U32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::F32(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::Bool(v) => out.push(u8::from(*v)),
        MetadataValue::String(s) => write_string(out, s),
        MetadataValue::Array { element_type, items } => {
            out.extend_from_slice(&element_type.to_le_bytes());
            out.extend_from_slice(&(items.len() as u64).to_le_bytes());
            for item in items {
                write_value(out, item);
            }
        }
        MetadataValue::U64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::I64(v) => out.extend_from_slice(&v.to_le_bytes()),
        MetadataValue::F64(v) => out.extend_from_slice(&v.to_le_bytes()),
    }
}

impl MetadataValue {
    /// An array of strings.
    pub fn strings<S: AsRef<str>>(items: impl IntoIterator<Item = S>) -> Self {
        Self::Array {
            element_type: 8,
            items: items.into_iter().map(|s| Self::String(s.as_ref().to_owned())).collect(),
        }
    }

    /// An array of i32.
    pub fn i32s(items: impl IntoIterator<Item = i32>) -> Self {
        Self::Array { element_type: 5, items: items.into_iter().map(Self::I32).collect() }
    }
}
