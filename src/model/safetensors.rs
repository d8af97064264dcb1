//! Memory-mapped safetensors: one `model.safetensors` or shards listed in
//! `model.safetensors.index.json`; f32, f16 and bf16 tensors, and u8 ones as packed bytes
//! (gpt-oss's MXFP4 `_blocks` and `_scales`, which [`super::gpt_oss`] repacks at load).

use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};

use memmap2::Mmap;
use safetensors::{Dtype, SafeTensors};

use super::tensor::TensorView;
use crate::dtype::DType;

/// The dtypes a weight may have.
const WEIGHT_DTYPES: &str = "F32, F16 or BF16";

/// Name of a single-file checkpoint.
pub const SINGLE_FILE: &str = "model.safetensors";
/// Name of a sharded checkpoint's index.
pub const INDEX_FILE: &str = "model.safetensors.index.json";

/// Why safetensors could not be read.
#[derive(Debug, thiserror::Error)]
pub enum SafetensorsError {
    /// Opening or mapping a file failed.
    #[error("cannot read {path}: {source}")]
    Io {
        /// The file.
        path: PathBuf,
        /// The OS error.
        source: std::io::Error,
    },
    /// The header is malformed or the data does not match it.
    #[error("{path} is not a valid safetensors file: {reason}")]
    Invalid {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The shard index is malformed.
    #[error("{path} is not a valid safetensors index: {reason}")]
    BadIndex {
        /// The index file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// Neither a single file nor an index exists in the directory.
    #[error("no {SINGLE_FILE} or {INDEX_FILE} in {0}")]
    NotFound(PathBuf),
    /// A tensor of a type pagoda does not load.
    #[error("tensor {name:?} has dtype {dtype}, expected {expected}")]
    UnsupportedDtype {
        /// The tensor.
        name: String,
        /// Its dtype.
        dtype: String,
        /// What was expected of it.
        expected: &'static str,
    },
    /// A tensor the caller asked for is absent.
    #[error("tensor {0:?} not found in the safetensors checkpoint")]
    MissingTensor(String),
}

#[derive(Debug)]
struct Entry {
    shard: usize,
    /// `None`: u8 bytes, read only by [`SafetensorsFiles::packed`].
    dtype: Option<DType>,
    shape: Vec<usize>,
    start: usize,
    end: usize,
}

/// A checkpoint's tensors over memory maps of its files.
#[derive(Debug)]
pub struct SafetensorsFiles {
    maps: Vec<Mmap>,
    entries: HashMap<String, Entry>,
    /// Tensors made at load from the file's ones ([`Self::add_derived`]), in memory.
    derived: HashMap<String, Derived>,
}

/// A tensor made from the file's own ones (gpt-oss's experts cut and transposed, or repacked
/// from MXFP4 bytes).
#[derive(Debug)]
struct Derived {
    dtype: DType,
    shape: Vec<usize>,
    data: Vec<u8>,
    /// Listed by [`SafetensorsFiles::tensors`]: it stands for packed tensors, which are not.
    listed: bool,
}

impl SafetensorsFiles {
    /// Open the checkpoint in an HF model directory (single file or sharded index).
    pub fn open_dir(dir: impl AsRef<Path>) -> Result<Self, SafetensorsError> {
        let dir = dir.as_ref();
        let index = dir.join(INDEX_FILE);
        if index.exists() {
            return Self::open_index(&index);
        }
        let single = dir.join(SINGLE_FILE);
        if single.exists() {
            return Self::open_files(&[single]);
        }
        Err(SafetensorsError::NotFound(dir.to_owned()))
    }

    /// Open the shards named by a `model.safetensors.index.json`.
    pub fn open_index(index: &Path) -> Result<Self, SafetensorsError> {
        let bad = |reason: String| SafetensorsError::BadIndex { path: index.to_owned(), reason };
        let text = std::fs::read_to_string(index)
            .map_err(|source| SafetensorsError::Io { path: index.to_owned(), source })?;
        let json: serde_json::Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        let map = json
            .get("weight_map")
            .and_then(|m| m.as_object())
            .ok_or_else(|| bad("no \"weight_map\" object".into()))?;
        let mut shards: Vec<String> = Vec::new();
        for (name, file) in map {
            let file = file.as_str().ok_or_else(|| bad(format!("shard of {name:?} is not a string")))?;
            if file.contains('/') || file.contains('\\') {
                return Err(bad(format!("shard {file:?} is not a plain file name")));
            }
            if !shards.iter().any(|s| s == file) {
                shards.push(file.to_owned());
            }
        }
        shards.sort();
        let dir = index.parent().unwrap_or(Path::new("."));
        let paths: Vec<PathBuf> = shards.iter().map(|s| dir.join(s)).collect();
        let files = Self::open_files(&paths)?;
        for name in map.keys() {
            if !files.entries.contains_key(name) {
                return Err(bad(format!("tensor {name:?} is listed but no shard holds it")));
            }
        }
        Ok(files)
    }

    /// Open one or more safetensors files as one checkpoint.
    pub fn open_files(paths: &[PathBuf]) -> Result<Self, SafetensorsError> {
        let mut maps = Vec::with_capacity(paths.len());
        let mut entries = HashMap::new();
        for (shard, path) in paths.iter().enumerate() {
            let io = |source| SafetensorsError::Io { path: path.clone(), source };
            let file = File::open(path).map_err(io)?;
            // SAFETY: the map is read-only; pagoda never writes model files while they are open.
            let map = unsafe { Mmap::map(&file) }.map_err(io)?;
            let invalid = |reason: String| SafetensorsError::Invalid { path: path.clone(), reason };
            let (header_len, metadata) =
                SafeTensors::read_metadata(&map).map_err(|e| invalid(e.to_string()))?;
            let data_start = 8 + header_len;
            for (name, info) in metadata.tensors() {
                let dtype = match info.dtype {
                    Dtype::F32 => Some(DType::F32),
                    Dtype::F16 => Some(DType::F16),
                    Dtype::BF16 => Some(DType::BF16),
                    Dtype::U8 => None,
                    other => {
                        return Err(SafetensorsError::UnsupportedDtype {
                            name,
                            dtype: format!("{other:?}"),
                            expected: WEIGHT_DTYPES,
                        });
                    }
                };
                let (start, end) = info.data_offsets;
                if entries.contains_key(&name) {
                    return Err(invalid(format!("tensor {name:?} appears in two shards")));
                }
                let entry = Entry {
                    shard,
                    dtype,
                    shape: info.shape.clone(),
                    start: data_start + start,
                    end: data_start + end,
                };
                entries.insert(name, entry);
            }
            maps.push(map);
        }
        Ok(Self { maps, entries, derived: HashMap::new() })
    }

    /// Names of every tensor.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.entries.keys().map(String::as_str)
    }

    /// True when a tensor of that name exists.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.entries.contains_key(name) || self.derived.contains_key(name)
    }

    /// Adds a tensor made from the file's own (`data` in `dtype`, row-major `shape`): found by
    /// [`Self::tensor`] and [`Self::has_tensor`], not listed by [`Self::tensors`] or
    /// [`Self::names`] (which list what the files hold).
    pub fn add_derived(&mut self, name: String, dtype: DType, shape: Vec<usize>, data: Vec<u8>) {
        self.derived.insert(name, Derived { dtype, shape, data, listed: false });
    }

    /// [`Self::add_derived`] for a tensor made from packed (u8) ones, which it stands for in
    /// [`Self::tensors`].
    pub fn add_repacked(&mut self, name: String, dtype: DType, shape: Vec<usize>, data: Vec<u8>) {
        self.derived.insert(name, Derived { dtype, shape, data, listed: true });
    }

    /// Every weight of the checkpoint, in no particular order: the files' typed tensors and
    /// what packed ones were repacked into.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        let stored = self.entries.values().filter_map(|e| {
            Some(TensorView {
                dtype: e.dtype?,
                shape: Cow::Borrowed(&e.shape),
                data: &self.maps[e.shard][e.start..e.end],
            })
        });
        let repacked = self.derived.values().filter(|d| d.listed).map(|d| TensorView {
            dtype: d.dtype,
            shape: Cow::Borrowed(&d.shape),
            data: &d.data,
        });
        stored.chain(repacked)
    }

    /// A u8 tensor's shape and bytes (gpt-oss's MXFP4 blocks and scales).
    pub fn packed(&self, name: &str) -> Result<(&[usize], &[u8]), SafetensorsError> {
        let e = self.entries.get(name).ok_or_else(|| SafetensorsError::MissingTensor(name.to_owned()))?;
        match e.dtype {
            None => Ok((&e.shape, &self.maps[e.shard][e.start..e.end])),
            Some(dtype) => Err(SafetensorsError::UnsupportedDtype {
                name: name.to_owned(),
                dtype: dtype.name().to_uppercase(),
                expected: "U8 (packed MXFP4 blocks or scales)",
            }),
        }
    }

    /// The named tensor, or `MissingTensor`.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, SafetensorsError> {
        if let Some(d) = self.derived.get(name) {
            return Ok(TensorView { dtype: d.dtype, shape: Cow::Borrowed(&d.shape), data: &d.data });
        }
        let e = self.entries.get(name).ok_or_else(|| SafetensorsError::MissingTensor(name.to_owned()))?;
        let dtype = e.dtype.ok_or_else(|| SafetensorsError::UnsupportedDtype {
            name: name.to_owned(),
            dtype: "U8".into(),
            expected: WEIGHT_DTYPES,
        })?;
        Ok(TensorView { dtype, shape: Cow::Borrowed(&e.shape), data: &self.maps[e.shard][e.start..e.end] })
    }
}

/// Serialize named tensors (f32/f16/bf16 only) to safetensors bytes; used to write test models.
pub fn serialize(tensors: &[(String, TensorView<'_>)]) -> Result<Vec<u8>, SafetensorsError> {
    let invalid = |reason: String| SafetensorsError::Invalid { path: PathBuf::from("<memory>"), reason };
    let views = tensors
        .iter()
        .map(|(name, t)| {
            let dtype = match t.dtype {
                DType::F32 => Dtype::F32,
                DType::F16 => Dtype::F16,
                DType::BF16 => Dtype::BF16,
                other => {
                    return Err(SafetensorsError::UnsupportedDtype {
                        name: name.clone(),
                        dtype: other.name().into(),
                        expected: WEIGHT_DTYPES,
                    });
                }
            };
            let view = safetensors::tensor::TensorView::new(dtype, t.shape.to_vec(), t.data)
                .map_err(|e| invalid(format!("{name}: {e}")))?;
            Ok((name.clone(), view))
        })
        .collect::<Result<Vec<_>, _>>()?;
    safetensors::serialize(views, None).map_err(|e| invalid(e.to_string()))
}
