//! wgpu-ops: tensor operators on the GPU through WebGPU (wgpu + WGSL compute shaders).
//!
//! The host validates inputs and computes a plan (plain data, no GPU needed); a WGSL kernel
//! remaps indices. Data movement is type-agnostic: every dtype of 1, 2, 4 or 8 bytes works.
//!
//! ```no_run
//! use wgpu_ops::{Context, ContextOptions, Tensor, ops::strided_slice::StridedSlice};
//! let ctx = Context::new_blocking(ContextOptions::default())?;
//! let x = Tensor::from_array(&ctx, &ndarray::Array::from_shape_fn((2, 3, 4), |(i, j, k)| (i * 12 + j * 4 + k) as f32))?;
//! // x[1:, :, ::-1]
//! let op = StridedSlice::new([1, 0, 0], [0, 0, 0]).stride([1, 1, -1]).begin_mask([0, 1, 1]).end_mask([1, 1, 1]);
//! let y = op.run(&x)?;
//! assert_eq!(y.shape(), &[1, 3, 4]);
//! # Ok::<(), wgpu_ops::Error>(())
//! ```

// Every public item is documented: the API is what embedders read.
#![warn(missing_docs)]

// Layers, each using only those above it: plain data (dtypes, errors, host tensors, index
// values) -> `gpu` -> `storage` and `tensor` -> `recorder` -> `kernels` -> `ops` -> `graph`.
// `onnx` (the model front end) beside `graph::json`; `reference` (CPU oracles) and `npy` (file
// I/O) beside them.
pub mod dtype;
pub mod error;
pub mod host;
pub mod indices;
pub mod map;
pub mod minifloat;

pub mod gpu;
pub(crate) mod storage;
pub mod tensor;

pub mod recorder;

pub mod kernels;

pub mod ops;

pub mod graph;
pub mod onnx;

#[cfg(feature = "native")]
pub mod npy;
pub mod reference;

pub use dtype::{DType, Element};
pub use error::{Error, Result};
pub use gpu::profile::{DispatchTime, Profile};
pub use gpu::{
    default_workgroup_size, list_adapters, Context, ContextOptions, MatMulChoice, MatMulKernel,
    Stats,
};
pub use graph::{Graph, Node, Session};
pub use host::{HostTensor, MapKeys, MapSequence, StringTensor};
pub use indices::IntoIndices;
pub use map::{Map, MapType, MapValues};
pub use minifloat::{CastMode, Round};
pub use ops::batch_to_space::BatchToSpace;
pub use ops::random::RandomStream;
pub use ops::slice::Slice;
pub use ops::space_to_batch::SpaceToBatch;
pub use ops::strided_slice::StridedSlice;
pub use recorder::{Out, Recorder};
pub use tensor::{download_all, Tensor};

/// Maps and sets on the host's hot paths (planning's, keyed by value names; the pipeline
/// caches, keyed by module names): std's default SipHash took an eighth of a planned run's
/// host time.
pub(crate) type FastMap<K, V> = std::collections::HashMap<K, V, foldhash::fast::RandomState>;
pub(crate) type FastSet<K> = std::collections::HashSet<K, foldhash::fast::RandomState>;

/// The README's Rust example runs as a doctest, so it stays true.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
pub struct ReadmeDoctests;
