//! The model's weights, mapped into the process once and shared by all of its ONNX Runtime sessions.
//!
//! `weights.json`, written beside the graph by `scripts/minilm_to_onnx.py`, lists the weights file's size and
//! every float tensor the graph keeps in it: name, element type, dims, offset and length. Each session gets those
//! tensors as initializers over the one mapping, with one [`PrepackedWeights`] container for all: ONNX Runtime
//! keeps one packed copy of each matrix for every session instead of one per session, and the word-embedding
//! table is resident once.

use std::{
    collections::HashMap,
    ffi::CString,
    fs::File,
    path::{Path, PathBuf},
    sync::Mutex,
    time::SystemTime,
};

use half::f16;
use memmap2::{Mmap, UncheckedAdvice};
use ort::{
    AsPointer,
    session::builder::{PrepackedWeights, SessionBuilder},
    value::{DynValueRef, TensorRef},
};
use serde::Deserialize;

use super::{EmbedError, load_error};

const MANIFEST: &str = "weights.json";

#[derive(Deserialize)]
struct Manifest {
    /// The weights file, a name in the model directory.
    file: String,
    /// Its size in bytes: a manifest from another conversion is refused, not misread.
    bytes: usize,
    tensors: Vec<Entry>,
}

#[derive(Deserialize)]
struct Entry {
    name: String,
    #[serde(rename = "type")]
    element: Element,
    dims: Vec<i64>,
    offset: usize,
    length: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Element {
    Float32,
    Float16,
}

pub(super) struct SharedWeights {
    manifest: PathBuf,
    mapping: &'static Mmap,
    tensors: Vec<(CString, DynValueRef<'static>)>,
    prepacked: PrepackedWeights,
}

impl SharedWeights {
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let manifest = dir.join(MANIFEST);
        let invalid = |e: &dyn std::fmt::Display| load_error(&manifest, e);
        let text = std::fs::read_to_string(&manifest).map_err(|e| invalid(&e))?;
        let parsed: Manifest = serde_json::from_str(&text).map_err(|e| invalid(&e))?;
        if Path::new(&parsed.file).file_name() != Some(parsed.file.as_ref()) {
            return Err(invalid(&format_args!("{:?} is not a file name", parsed.file)));
        }
        let file = dir.join(&parsed.file);
        let mapping = mapping(&file).map_err(|e| load_error(&file, e))?;
        if mapping.len() != parsed.bytes {
            return Err(invalid(&format_args!(
                "written for a weights file of {} bytes, {} has {}",
                parsed.bytes,
                file.display(),
                mapping.len()
            )));
        }
        let tensors = parsed
            .tensors
            .into_iter()
            .map(|entry| {
                let view = tensor(mapping, &entry).map_err(|e| invalid(&format_args!("tensor {}: {e}", entry.name)))?;
                let name = CString::new(entry.name).map_err(|e| invalid(&e))?;
                Ok((name, view))
            })
            .collect::<Result<_, EmbedError>>()?;
        Ok(Self { manifest, mapping, tensors, prepacked: PrepackedWeights::new() })
    }

    /// `builder` with every tensor as a shared initializer and the common container for packed matrices.
    pub fn share_with(&self, builder: SessionBuilder) -> Result<SessionBuilder, EmbedError> {
        let failed = |e: &dyn std::fmt::Display| load_error(&self.manifest, e);
        let mut builder = builder.with_prepacked_weights(&self.prepacked).map_err(|e| failed(&e))?;
        for (name, tensor) in &self.tensors {
            // SAFETY: a valid C string and a live tensor value. ONNX Runtime keeps its own reference to the value
            // in each session it builds, and the value's data is the read-only mapping, never unmapped.
            unsafe {
                ort::Error::result_from_status((ort::api().AddInitializer)(
                    builder.ptr_mut(),
                    name.as_ptr(),
                    tensor.ptr(),
                ))
            }
            .map_err(|e| failed(&format_args!("tensor {}: {e}", name.to_string_lossy())))?;
        }
        Ok(builder)
    }

    /// Drops the mapping's pages from the process's resident memory once the sessions hold their packed
    /// matrices: the matrices are not read again, and what a pass does read (word-embedding rows, position
    /// embeddings, biases, norms) faults back in from the page cache.
    pub fn release_pages(&self) {
        // SAFETY: the mapping is read-only and shared with a file nobody writes while we run: a dropped page reads
        // back the same bytes on its next access.
        if let Err(e) = unsafe { self.mapping.unchecked_advise(UncheckedAdvice::DontNeed) } {
            tracing::debug!(error = %e, "could not release the weights' pages");
        }
    }
}

/// Which file a mapping shows: a file rewritten under the same path is mapped anew.
#[derive(PartialEq, Eq, Hash)]
struct FileIdentity {
    path: PathBuf,
    len: u64,
    modified: Option<SystemTime>,
    inode: u64,
}

/// One mapping per weights file per process, kept for the process's life (sessions may be built from it at any
/// time, and ONNX Runtime holds its tensors).
fn mapping(path: &Path) -> std::io::Result<&'static Mmap> {
    use std::os::unix::fs::MetadataExt;
    static MAPPINGS: Mutex<Option<HashMap<FileIdentity, &'static Mmap>>> = Mutex::new(None);
    let file = File::open(path)?;
    let metadata = file.metadata()?;
    let identity = FileIdentity {
        path: path.to_path_buf(),
        len: metadata.len(),
        modified: metadata.modified().ok(),
        inode: metadata.ino(),
    };
    let mut mappings = MAPPINGS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mappings = mappings.get_or_insert_with(HashMap::new);
    if let Some(mapping) = mappings.get(&identity) {
        return Ok(mapping);
    }
    // SAFETY: the model directory is written before the process starts and not modified while it runs.
    let mapping: &'static Mmap = Box::leak(Box::new(unsafe { Mmap::map(&file)? }));
    mappings.insert(identity, mapping);
    Ok(mapping)
}

fn tensor(mapping: &'static Mmap, entry: &Entry) -> Result<DynValueRef<'static>, String> {
    let bytes: &'static [u8] = entry
        .offset
        .checked_add(entry.length)
        .and_then(|end| mapping.get(entry.offset..end))
        .ok_or("outside the weights file")?;
    let elements = entry.dims.iter().try_fold(1usize, |n, &d| n.checked_mul(usize::try_from(d).ok()?));
    match entry.element {
        Element::Float32 => view::<f32>(bytes, elements, &entry.dims),
        Element::Float16 => view::<f16>(bytes, elements, &entry.dims),
    }
}

/// `bytes` as a tensor of `T` with `dims`, if they hold exactly `elements` of them, aligned.
fn view<T>(bytes: &'static [u8], elements: Option<usize>, dims: &[i64]) -> Result<DynValueRef<'static>, String>
where
    T: bytemuck::Pod + ort::value::PrimitiveTensorElementType + std::fmt::Debug,
{
    if elements.and_then(|n| n.checked_mul(size_of::<T>())) != Some(bytes.len()) {
        return Err(format!("{} bytes for dims {dims:?}", bytes.len()));
    }
    let values: &'static [T] = bytemuck::try_cast_slice(bytes).map_err(|e| e.to_string())?;
    Ok(TensorRef::from_array_view((dims.to_vec(), values)).map_err(|e| e.to_string())?.into_dyn())
}
