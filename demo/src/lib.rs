//! The wgpu-ops image demo: StridedSlice, Slice, SpaceToBatch, BatchToSpace and Scan on a
//! picture, each checked against the crate's CPU reference. `pipeline` is shared by the native
//! program (`image-demo`, PNG files) and the browser page (`web`, wasm32 + WebGPU).

pub mod expr;
pub mod pipeline;
#[cfg(target_arch = "wasm32")]
mod web;

pub use pipeline::{Image, Outcome, Settings};
