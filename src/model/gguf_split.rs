//! A GGUF model in one file, or split by llama.cpp's `gguf-split` into parts named
//! `PREFIX-00001-of-0000N.gguf` … `PREFIX-0000N-of-0000N.gguf`: every part memory-mapped,
//! the metadata from the first, the tensors from all of them.
//!
//! Each part carries `split.no` (0-based), `split.count` and `split.tensors.count` (the
//! tensors of the whole model); the first also carries every other metadata key. Any part
//! opens the whole model (llama.cpp takes the first only); the parts are checked as
//! llama.cpp's loader checks them: every one present, each naming itself the part its file
//! name says of a split of the same count, no tensor twice, and as many tensors in all as
//! `split.tensors.count` says.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::path::{Path, PathBuf};

use super::gguf::{GgufError, GgufFile};
use super::tensor::TensorView;

/// Metadata key of a part's 0-based number.
pub const SPLIT_NO: &str = "split.no";
/// Metadata key of the number of parts.
pub const SPLIT_COUNT: &str = "split.count";
/// Metadata key of the number of tensors in all the parts.
pub const SPLIT_TENSORS_COUNT: &str = "split.tensors.count";

/// Why a split GGUF model could not be opened. Part numbers count from 1, as in the file names.
#[derive(Debug, thiserror::Error)]
pub enum GgufSplitError {
    /// The file opened is not a readable GGUF file.
    #[error(transparent)]
    Gguf(#[from] GgufError),
    /// Another part is not a readable GGUF file, or lacks its `split.*` keys.
    #[error("cannot read {path}, part {no} of {count} of the split model: {source}")]
    Part {
        /// The part's file.
        path: PathBuf,
        /// Its number.
        no: u32,
        /// The number of parts.
        count: u32,
        /// What is wrong with it.
        source: GgufError,
    },
    /// A part's file does not exist.
    #[error("part {no} of {count} of the split model is missing: {path} does not exist")]
    MissingPart {
        /// Where the part should be.
        path: PathBuf,
        /// Its number.
        no: u32,
        /// The number of parts.
        count: u32,
    },
    /// `split.no` and `split.count` name no part of a split.
    #[error("{path}: split.no {no} and split.count {count} name no part of a split")]
    InvalidSplit {
        /// The file.
        path: PathBuf,
        /// Its `split.no` (0-based).
        no: i64,
        /// Its `split.count`.
        count: i64,
    },
    /// A part's file name does not end as `gguf-split` names that part.
    #[error(
        "{path} is part {no} of {count} of a split model, so its name must end with -{no:05}-of-{count:05}.gguf"
    )]
    UnexpectedName {
        /// The file.
        path: PathBuf,
        /// Its number (from `split.no`).
        no: u32,
        /// The number of parts.
        count: u32,
    },
    /// A part's `split.count` differs from the first file's: it belongs to another split.
    #[error("{path} belongs to a split model of {found} parts, not {expected}")]
    CountMismatch {
        /// The part's file.
        path: PathBuf,
        /// The number of parts of the file opened.
        expected: u32,
        /// The part's `split.count`.
        found: i64,
    },
    /// A part's `split.no` differs from the number in its file name.
    #[error("{path} is named part {expected}, but its split.no makes it part {found}")]
    WrongPart {
        /// The part's file.
        path: PathBuf,
        /// The number its name gives.
        expected: u32,
        /// The number its `split.no` gives (1-based).
        found: i64,
    },
    /// Two parts hold a tensor of one name.
    #[error("tensor {name:?} is in both {first} and {second}")]
    DuplicateTensor {
        /// The tensor.
        name: String,
        /// The part it was found in first.
        first: PathBuf,
        /// The part it was found in again.
        second: PathBuf,
    },
    /// The parts hold another number of tensors than `split.tensors.count`.
    #[error("the parts of {path} hold {found} tensors, but its split.tensors.count says {expected}")]
    TensorCount {
        /// The first part.
        path: PathBuf,
        /// Its `split.tensors.count`.
        expected: i64,
        /// Tensors found in all the parts.
        found: usize,
    },
}

/// A GGUF model: one file, or every part of a split one.
#[derive(Debug)]
pub struct GgufModel {
    /// The parts in order; the first holds the model's metadata.
    parts: Vec<GgufFile>,
    /// Which part holds each tensor.
    part_of: HashMap<String, usize>,
}

impl From<GgufFile> for GgufModel {
    /// A model of one file.
    fn from(file: GgufFile) -> Self {
        let part_of = file.tensor_infos().iter().map(|t| (t.name.clone(), 0)).collect();
        Self { parts: vec![file], part_of }
    }
}

impl GgufModel {
    /// Opens the GGUF file at `path` and, when it is a part of a split model, every other part
    /// of it, found by name next to it.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, GgufSplitError> {
        let path = path.as_ref();
        let file = GgufFile::open(path)?;
        let Some(Split { no, count }) = Split::of(&file, path)? else { return Ok(file.into()) };
        let prefix = split_prefix(path, no, count).ok_or_else(|| GgufSplitError::UnexpectedName {
            path: path.to_owned(),
            no,
            count,
        })?;
        let others = |numbers: RangeInclusive<u32>| {
            numbers
                .map(|n| open_part(&split_path(&prefix, n, count), n, count))
                .collect::<Result<Vec<_>, _>>()
        };
        let mut parts = others(1..=no - 1)?;
        parts.push(file);
        parts.extend(others(no + 1..=count)?);
        let paths: Vec<PathBuf> = (1..=count).map(|n| split_path(&prefix, n, count)).collect();
        Self::from_parts(parts, &paths)
    }

    /// Indexes the tensors of the parts and checks them against `split.tensors.count`.
    fn from_parts(parts: Vec<GgufFile>, paths: &[PathBuf]) -> Result<Self, GgufSplitError> {
        let mut part_of: HashMap<String, usize> = HashMap::new();
        for (i, part) in parts.iter().enumerate() {
            for info in part.tensor_infos() {
                if let Some(&first) = part_of.get(&info.name) {
                    return Err(GgufSplitError::DuplicateTensor {
                        name: info.name.clone(),
                        first: paths[first].clone(),
                        second: paths[i].clone(),
                    });
                }
                part_of.insert(info.name.clone(), i);
            }
        }
        let count = parts.len() as u32;
        let first_part = |source| GgufSplitError::Part { path: paths[0].clone(), no: 1, count, source };
        let expected = parts[0]
            .get_int(SPLIT_TENSORS_COUNT)
            .map_err(first_part)?
            .ok_or_else(|| first_part(GgufError::MissingKey(SPLIT_TENSORS_COUNT.into())))?;
        if i64::try_from(part_of.len()) != Ok(expected) {
            return Err(GgufSplitError::TensorCount {
                path: paths[0].clone(),
                expected,
                found: part_of.len(),
            });
        }
        Ok(Self { parts, part_of })
    }

    /// The file holding the model's metadata (the first part).
    pub fn metadata(&self) -> &GgufFile {
        &self.parts[0]
    }

    /// How many files the model is in.
    pub fn num_parts(&self) -> usize {
        self.parts.len()
    }

    /// True when a tensor of that name exists in some part.
    pub fn has_tensor(&self, name: &str) -> bool {
        self.part_of.contains_key(name)
    }

    /// The named tensor, from whichever part holds it, or `MissingTensor`.
    pub fn tensor(&self, name: &str) -> Result<TensorView<'_>, GgufError> {
        let &part = self.part_of.get(name).ok_or_else(|| GgufError::MissingTensor(name.to_owned()))?;
        self.parts[part].tensor(name)
    }

    /// Every tensor of the model: the parts in order, each part's in file order.
    pub fn tensors(&self) -> impl Iterator<Item = TensorView<'_>> {
        self.parts.iter().flat_map(GgufFile::tensors)
    }
}

/// Where a file lies in its split: its 1-based number and the number of parts.
struct Split {
    no: u32,
    count: u32,
}

impl Split {
    /// The place of `file` in its split; `None` when it is a whole model (no `split.count`,
    /// or a count of 0 or 1, as llama.cpp reads it).
    fn of(file: &GgufFile, path: &Path) -> Result<Option<Self>, GgufSplitError> {
        let count = file.get_int(SPLIT_COUNT)?.unwrap_or(1);
        if count == 0 || count == 1 {
            return Ok(None);
        }
        let no = file.get_int(SPLIT_NO)?.ok_or_else(|| GgufError::MissingKey(SPLIT_NO.into()))?;
        let invalid = || GgufSplitError::InvalidSplit { path: path.to_owned(), no, count };
        let count_u32 = u32::try_from(count).map_err(|_| invalid())?;
        if !(0..count).contains(&no) {
            return Err(invalid());
        }
        Ok(Some(Self { no: no as u32 + 1, count: count_u32 }))
    }
}

/// `gguf-split`'s name of part `no` (1-based) of `count`: `PREFIX-0000no-of-0000count.gguf`
/// (llama.cpp's `llama_split_path`).
pub fn split_path(prefix: &str, no: u32, count: u32) -> PathBuf {
    PathBuf::from(format!("{prefix}-{no:05}-of-{count:05}.gguf"))
}

/// The prefix of `path` when it is named as part `no` (1-based) of `count`, else `None`
/// (llama.cpp's `llama_split_prefix`).
pub fn split_prefix(path: &Path, no: u32, count: u32) -> Option<String> {
    let path = path.to_str()?;
    let prefix = path.strip_suffix(&format!("-{no:05}-of-{count:05}.gguf"))?;
    (!prefix.is_empty()).then(|| prefix.to_owned())
}

/// Opens part `no` of `count` at `path` and checks that it says it is that part.
fn open_part(path: &Path, no: u32, count: u32) -> Result<GgufFile, GgufSplitError> {
    let part_error = |source| GgufSplitError::Part { path: path.to_owned(), no, count, source };
    let file = GgufFile::open(path).map_err(|e| match e {
        GgufError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
            GgufSplitError::MissingPart { path: path.to_owned(), no, count }
        }
        other => part_error(other),
    })?;
    let required = |key: &str| {
        file.get_int(key).map_err(part_error)?.ok_or_else(|| part_error(GgufError::MissingKey(key.into())))
    };
    let found_count = required(SPLIT_COUNT)?;
    if found_count != i64::from(count) {
        return Err(GgufSplitError::CountMismatch {
            path: path.to_owned(),
            expected: count,
            found: found_count,
        });
    }
    let found_no = required(SPLIT_NO)?;
    if found_no != i64::from(no) - 1 {
        return Err(GgufSplitError::WrongPart { path: path.to_owned(), expected: no, found: found_no + 1 });
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dtype::DType;
    use crate::model::gguf::{GgufWriter, MetadataValue};

    #[test]
    fn part_names_are_llama_cpps() {
        assert_eq!(split_path("/m/x-Q4_1", 2, 3), PathBuf::from("/m/x-Q4_1-00002-of-00003.gguf"));
        let part = Path::new("/m/x-Q4_1-00002-of-00003.gguf");
        assert_eq!(split_prefix(part, 2, 3).as_deref(), Some("/m/x-Q4_1"));
        assert_eq!(split_prefix(part, 1, 3), None);
        assert_eq!(split_prefix(part, 2, 4), None);
        assert_eq!(split_prefix(Path::new("-00001-of-00002.gguf"), 1, 2), None);
    }

    /// Part `no` (0-based) of `count`, holding one F32 tensor per name.
    fn part(no: u16, count: u16, total: i32, names: &[&str]) -> GgufWriter {
        let mut w = GgufWriter::new();
        w.metadata(SPLIT_NO, MetadataValue::U16(no))
            .metadata(SPLIT_COUNT, MetadataValue::U16(count))
            .metadata(SPLIT_TENSORS_COUNT, MetadataValue::I32(total));
        for name in names {
            w.tensor(name, DType::F32, &[8], vec![0; 32]).unwrap();
        }
        w
    }

    #[test]
    fn any_part_opens_every_part() {
        let dir = tempfile::tempdir().unwrap();
        let prefix = dir.path().join("m").to_str().unwrap().to_owned();
        part(0, 3, 3, &["a"]).write(split_path(&prefix, 1, 3)).unwrap();
        part(1, 3, 3, &[]).write(split_path(&prefix, 2, 3)).unwrap();
        part(2, 3, 3, &["b", "c"]).write(split_path(&prefix, 3, 3)).unwrap();
        for no in 1..=3 {
            let model = GgufModel::open(split_path(&prefix, no, 3)).unwrap();
            assert_eq!(model.num_parts(), 3);
            assert_eq!(model.tensors().count(), 3);
            assert!(model.has_tensor("c") && model.tensor("a").is_ok());
            assert!(matches!(model.tensor("d"), Err(GgufError::MissingTensor(_))));
        }
    }

    #[test]
    fn a_part_named_unlike_its_number_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("m.gguf");
        part(0, 2, 1, &["a"]).write(&path).unwrap();
        let err = GgufModel::open(&path).unwrap_err();
        assert!(matches!(err, GgufSplitError::UnexpectedName { no: 1, count: 2, .. }), "{err}");
        part(2, 2, 1, &["a"]).write(&path).unwrap();
        let err = GgufModel::open(&path).unwrap_err();
        assert!(matches!(err, GgufSplitError::InvalidSplit { no: 2, count: 2, .. }), "{err}");
    }
}
