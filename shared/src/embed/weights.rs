//! The model's weights, mapped into the process once and shared by all of its ONNX Runtime sessions.
//!
//! `weights.json`, written beside the graph by `scripts/minilm_to_onnx.py`, lists every tensor the graph keeps in
//! its weights file: name, element type, dims, offset and length. Each session gets those tensors as initializers
//! over the one mapping, with one [`PrepackedWeights`] container for all: ONNX Runtime then packs each matrix once
//! for every session rather than once per session, and the word-embedding table is resident once.

use std::{
    collections::HashMap,
    ffi::CString,
    fs::File,
    path::{Path, PathBuf},
    sync::Mutex,
};

use half::f16;
use memmap2::{Mmap, UncheckedAdvice};
use ort::{
    AsPointer,
    session::builder::{PrepackedWeights, SessionBuilder},
    value::{DynValueRef, TensorRef},
};
use serde::Deserialize;

use super::EmbedError;

const MANIFEST: &str = "weights.json";

#[derive(Deserialize)]
struct Manifest {
    /// The weights file, beside the manifest.
    file: String,
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
    mapping: &'static Mmap,
    tensors: Vec<(CString, DynValueRef<'static>)>,
    prepacked: PrepackedWeights,
}

// The tensors only view the read-only mapping; ONNX Runtime reads initializers from any thread.
unsafe impl Send for SharedWeights {}
unsafe impl Sync for SharedWeights {}

impl SharedWeights {
    pub fn load(dir: &Path) -> Result<Self, EmbedError> {
        let path = dir.join(MANIFEST);
        let invalid = |e: &dyn std::fmt::Display| EmbedError::Load(format!("{}: {e}", path.display()));
        let text = std::fs::read_to_string(&path).map_err(|e| invalid(&e))?;
        let manifest: Manifest = serde_json::from_str(&text).map_err(|e| invalid(&e))?;
        let file = dir.join(&manifest.file);
        let mapping = mapping(&file).map_err(|e| EmbedError::Load(format!("{}: {e}", file.display())))?;
        let tensors = manifest
            .tensors
            .into_iter()
            .map(|entry| {
                let view = tensor(mapping, &entry).map_err(|e| invalid(&format_args!("tensor {}: {e}", entry.name)))?;
                let name = CString::new(entry.name).map_err(|e| invalid(&e))?;
                Ok((name, view))
            })
            .collect::<Result<_, EmbedError>>()?;
        Ok(Self { mapping, tensors, prepacked: PrepackedWeights::new() })
    }

    /// `builder` with every tensor as a shared initializer and the common container for packed matrices. The
    /// sessions it builds must be dropped before `self`.
    pub fn share_with(&self, builder: SessionBuilder) -> ort::Result<SessionBuilder> {
        let mut builder = builder.with_prepacked_weights(&self.prepacked)?;
        for (name, tensor) in &self.tensors {
            // SAFETY: the name is a valid C string and the value a live tensor over the 'static mapping, which
            // outlives every session (the caller drops them before `self`).
            unsafe {
                ort::Error::result_from_status((ort::api().AddInitializer)(
                    builder.ptr_mut(),
                    name.as_ptr(),
                    tensor.ptr(),
                ))?;
            }
        }
        Ok(builder)
    }

    /// Drops the mapping's pages from the process's resident memory once the sessions hold their packed
    /// matrices: those are never read again, and the word-embedding rows a query needs fault back in from the
    /// page cache.
    pub fn release_pages(&self) {
        // SAFETY: the mapping is read-only and backed by a file nobody writes while we run: a dropped page reads
        // back the same bytes on its next access.
        if let Err(e) = unsafe { self.mapping.unchecked_advise(UncheckedAdvice::DontNeed) } {
            tracing::debug!(error = %e, "could not release the weights' pages");
        }
    }
}

/// One mapping per weights file per process, kept for the process's life (sessions may be built from it at any
/// time).
fn mapping(path: &Path) -> std::io::Result<&'static Mmap> {
    static MAPPINGS: Mutex<Option<HashMap<PathBuf, &'static Mmap>>> = Mutex::new(None);
    let mut mappings = MAPPINGS.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    let mappings = mappings.get_or_insert_with(HashMap::new);
    if let Some(mapping) = mappings.get(path) {
        return Ok(mapping);
    }
    // SAFETY: the model directory is written before the process starts and not modified while it runs.
    let mapping: &'static Mmap = Box::leak(Box::new(unsafe { Mmap::map(&File::open(path)?)? }));
    mappings.insert(path.to_path_buf(), mapping);
    Ok(mapping)
}

fn tensor(mapping: &'static Mmap, entry: &Entry) -> Result<DynValueRef<'static>, String> {
    let bytes: &'static [u8] = entry
        .offset
        .checked_add(entry.length)
        .and_then(|end| mapping.get(entry.offset..end))
        .ok_or("outside the weights file")?;
    let elements: usize = entry.dims.iter().map(|&d| usize::try_from(d).unwrap_or(usize::MAX)).product();
    let check_length = |element_size: usize| -> Result<(), String> {
        if elements.checked_mul(element_size) == Some(bytes.len()) {
            Ok(())
        } else {
            Err(format!("{} bytes for dims {:?}", bytes.len(), entry.dims))
        }
    };
    let dims = entry.dims.clone();
    match entry.element {
        Element::Float32 => {
            check_length(4)?;
            let values: &'static [f32] = bytemuck::try_cast_slice(bytes).map_err(|e| e.to_string())?;
            Ok(TensorRef::from_array_view((dims, values)).map_err(|e| e.to_string())?.into_dyn())
        }
        Element::Float16 => {
            check_length(2)?;
            let values: &'static [f16] = bytemuck::try_cast_slice(bytes).map_err(|e| e.to_string())?;
            Ok(TensorRef::from_array_view((dims, values)).map_err(|e| e.to_string())?.into_dyn())
        }
    }
}
