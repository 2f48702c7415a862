//! GPU tensors: a dtype, a shape and a storage buffer.

use std::sync::Arc;

#[cfg(feature = "native")]
use ndarray::ArrayD;
use ndarray::{ArrayBase, Data, Dimension};

#[cfg(not(target_arch = "wasm32"))]
use crate::gpu::staging::Sink;
use crate::host::checked_numel;
use crate::storage::{alloc_size, Storage};
use crate::{Context, DType, Element, Error, HostTensor, Result};

/// A tensor in GPU memory, C order. The storage is padded to whole 32-bit words (at least
/// one), so kernels can move 1- and 2-byte elements as words; padding bytes carry no meaning.
/// A tensor larger than the context's [`Context::max_buffer_size`] is held in several
/// buffers (see [`Tensor::buffers`]); every op accepts such tensors.
#[derive(Clone)]
pub struct Tensor {
    ctx: Context,
    dtype: DType,
    shape: Vec<usize>,
    storage: Arc<Storage>,
}

impl std::fmt::Debug for Tensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tensor({} {:?})", self.dtype, self.shape)
    }
}

fn byte_len(op: &'static str, dtype: DType, shape: &[usize]) -> Result<u64> {
    checked_numel(shape)
        .and_then(|n| n.checked_mul(dtype.size()))
        .map(|b| b as u64)
        .ok_or_else(|| {
            Error::invalid(
                op,
                "shape",
                format!("shape {shape:?} of {dtype} has more bytes than this host can address"),
            )
        })
}

impl Tensor {
    /// Allocates an uninitialized tensor (contents unspecified until a kernel writes it).
    pub fn uninit(ctx: &Context, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        Tensor::uninit_segmented(ctx, dtype, shape, ctx.max_buffer_size())
    }

    /// As [`Tensor::uninit`], in buffers of `segment` bytes where it takes several (see
    /// [`Storage::create_segmented`]).
    pub(crate) fn uninit_segmented(
        ctx: &Context,
        dtype: DType,
        shape: &[usize],
        segment: u64,
    ) -> Result<Tensor> {
        let size = alloc_size(byte_len("Tensor", dtype, shape)?);
        let (storage, check) = ctx.scoped("allocate", || {
            Storage::create_segmented(ctx, "Tensor", size, None, segment)
        });
        check.now(ctx)?;
        let storage = storage?;
        ctx.count_buffers(storage.buffers().len());
        Ok(Tensor {
            ctx: ctx.clone(),
            dtype,
            shape: shape.to_vec(),
            storage: Arc::new(storage),
        })
    }

    /// Uploads a host tensor.
    pub fn from_host(ctx: &Context, host: &HostTensor) -> Result<Tensor> {
        host.check()?;
        Tensor::from_bytes(ctx, host.dtype, &host.shape, &host.data)
    }

    /// Uploads `data`, the bytes of a `dtype` tensor of `shape` in C order, little endian,
    /// straight from the caller's memory (no [`HostTensor`] to build): a typed slice of a
    /// plain type can be given as `bytemuck::cast_slice(values)`.
    pub fn from_bytes(ctx: &Context, dtype: DType, shape: &[usize], data: &[u8]) -> Result<Tensor> {
        crate::host::check_bytes("upload", dtype, shape, data.len())?;
        let size = alloc_size(data.len() as u64);
        let (storage, check) = ctx.scoped("upload", || {
            Storage::create(ctx, "upload", size, Some(data))
        });
        check.now(ctx)?;
        let storage = storage?;
        ctx.count_buffers(storage.buffers().len());
        Ok(Tensor {
            ctx: ctx.clone(),
            dtype,
            shape: shape.to_vec(),
            storage: Arc::new(storage),
        })
    }

    /// Uploads `host` into `storage`, buffers an earlier upload of the same padded size made
    /// and nothing else holds (a session's input of its last run).
    pub(crate) fn upload_into(
        ctx: &Context,
        host: &HostTensor,
        storage: Arc<Storage>,
    ) -> Result<Tensor> {
        host.check()?;
        storage.write(ctx, &host.data)?;
        Ok(Tensor {
            ctx: ctx.clone(),
            dtype: host.dtype,
            shape: host.shape.clone(),
            storage,
        })
    }

    /// Uploads an `ndarray` array (any layout; it is copied in C order).
    pub fn from_array<T: Element, S: Data<Elem = T>, D: Dimension>(
        ctx: &Context,
        array: &ArrayBase<S, D>,
    ) -> Result<Tensor> {
        Tensor::from_host(ctx, &HostTensor::from_array(array))
    }

    pub(crate) fn from_parts(
        ctx: &Context,
        dtype: DType,
        shape: Vec<usize>,
        storage: Arc<Storage>,
    ) -> Tensor {
        Tensor {
            ctx: ctx.clone(),
            dtype,
            shape,
            storage,
        }
    }

    /// True when no other tensor (nor anything else) holds this one's buffer.
    pub(crate) fn is_sole_handle(&self) -> bool {
        Arc::strong_count(&self.storage) == 1
    }

    /// The storage, if this is its only handle (so it may be reused).
    pub(crate) fn into_unique_storage(self) -> Option<Arc<Storage>> {
        self.is_sole_handle().then_some(self.storage)
    }

    /// True when both tensors are views of one storage (no copy was made).
    pub fn shares_buffer(&self, other: &Tensor) -> bool {
        Arc::ptr_eq(&self.storage, &other.storage)
    }

    pub(crate) fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }
    /// The dimensions, outermost first.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }
    /// The number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }
    /// The number of elements.
    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }
    /// Bytes of data (without the buffer's padding).
    pub fn byte_len(&self) -> u64 {
        (self.numel() * self.dtype.size()) as u64
    }
    /// The GPU buffers holding the data, in order: one, unless the tensor is larger than
    /// [`Context::max_buffer_size`]; then buffer `i` holds bytes `[i * max, (i + 1) * max)`.
    pub fn buffers(&self) -> &[wgpu::Buffer] {
        self.storage.buffers()
    }
    /// The context whose device holds the tensor.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// The same bytes read as `dtype`, which must be as wide as this tensor's (ONNX BitCast;
    /// no copy).
    pub fn bitcast(&self, dtype: DType) -> Result<Tensor> {
        if dtype.size() != self.dtype.size() {
            return Err(Error::invalid(
                "BitCast",
                "to",
                format!(
                    "{} is {} bytes wide, the input's {} is {}",
                    dtype.name(),
                    dtype.size(),
                    self.dtype.name(),
                    self.dtype.size()
                ),
            ));
        }
        if dtype.packed_bits() != self.dtype.packed_bits() {
            return Err(Error::invalid(
                "BitCast",
                "to",
                format!(
                    "{} is {} bits wide, the input's {} is {}",
                    dtype.name(),
                    dtype.packed_bits().unwrap_or(8 * dtype.size()),
                    self.dtype.name(),
                    self.dtype.packed_bits().unwrap_or(8 * self.dtype.size())
                ),
            ));
        }
        if dtype == DType::Bool && self.dtype != DType::Bool {
            return Err(Error::invalid(
                "BitCast",
                "to",
                format!(
                    "bool from {} is not supported: its bytes may hold values other than 0 and 1",
                    self.dtype.name()
                ),
            ));
        }
        Ok(Tensor {
            dtype,
            ..self.clone()
        })
    }

    /// The same data under another shape with the same number of elements (no copy).
    pub fn reshaped(&self, shape: &[usize]) -> Result<Tensor> {
        if checked_numel(shape) != Some(self.numel()) {
            return Err(Error::invalid(
                "Reshape",
                "shape",
                format!(
                    "shape {shape:?} does not hold the {} elements of {:?}",
                    self.numel(),
                    self.shape
                ),
            ));
        }
        Ok(Tensor {
            shape: shape.to_vec(),
            ..self.clone()
        })
    }

    /// Downloads the tensor. Awaitable in the browser; see [`download_all`].
    pub async fn to_host(&self) -> Result<HostTensor> {
        Ok(download_all(&self.ctx, &[self]).await?.remove(0))
    }

    /// Blocking download for native callers.
    #[cfg(feature = "native")]
    pub fn to_host_blocking(&self) -> Result<HostTensor> {
        pollster::block_on(self.to_host())
    }

    /// Downloads the tensor's bytes (C order, little endian) into `out`, which must hold
    /// exactly [`Tensor::byte_len`] bytes: for callers that reuse their host memory between
    /// runs (writing memory the host has written before is several times faster than filling
    /// new memory, which [`Tensor::to_host`] returns).
    pub async fn read_into(&self, out: &mut [u8]) -> Result<()> {
        if out.len() as u64 != self.byte_len() {
            return Err(Error::invalid(
                "download",
                "out",
                format!(
                    "{} bytes given for the {} bytes of {} {:?}",
                    out.len(),
                    self.byte_len(),
                    self.dtype,
                    self.shape
                ),
            ));
        }
        #[cfg(not(target_arch = "wasm32"))]
        {
            let mut sinks = [Sink::Into(out)];
            self.ctx.download_streamed(&pieces_of(&[self]), &mut sinks)
        }
        #[cfg(target_arch = "wasm32")]
        {
            let host = download_mapped(&self.ctx, &[self]).await?.remove(0);
            out.copy_from_slice(&host.data);
            Ok(())
        }
    }

    /// Blocking [`Tensor::read_into`] for native callers.
    #[cfg(feature = "native")]
    pub fn read_into_blocking(&self, out: &mut [u8]) -> Result<()> {
        pollster::block_on(self.read_into(out))
    }

    /// Blocking download into an `ndarray` array; fails if `T` is not the tensor's dtype.
    #[cfg(feature = "native")]
    pub fn to_array<T: Element>(&self) -> Result<ArrayD<T>> {
        self.to_host_blocking()?.to_array()
    }
}

/// Downloads several tensors: natively through the context's reused staging buffers, with one
/// submission and one wait up to 16 MiB in all and rounds of 16 MiB beyond (two in flight);
/// in the browser through staging buffers of their own size.
pub async fn download_all(ctx: &Context, tensors: &[&Tensor]) -> Result<Vec<HostTensor>> {
    // The results must fit in the host's memory: refused before any staging buffer is made
    // (a GPU can hold more than the host has left).
    let total: u64 = tensors.iter().map(|t| t.byte_len()).sum();
    check_download(total, crate::gpu::host_memory_available())?;
    ctx.check_device("download")?;
    #[cfg(not(target_arch = "wasm32"))]
    let results = download_staged(ctx, tensors);
    #[cfg(target_arch = "wasm32")]
    let results = download_mapped(ctx, tensors).await;
    // A mapping on a lost device fails: say why.
    if results.is_err() {
        ctx.check_device("download")?;
    }
    results
}

/// Downloads through the context's staging buffers (native).
#[cfg(not(target_arch = "wasm32"))]
fn download_staged(ctx: &Context, tensors: &[&Tensor]) -> Result<Vec<HostTensor>> {
    let mut data = Vec::with_capacity(tensors.len());
    for t in tensors {
        let len = t.byte_len();
        let mut v = Vec::new();
        v.try_reserve_exact(len as usize)
            .map_err(|e| Error::OutOfMemory {
                op: "download".into(),
                message: format!("{len} bytes of a result on the host: {e}"),
            })?;
        crate::host::advise_huge_pages(&mut v);
        data.push(v);
    }
    let mut sinks: Vec<Sink> = data.iter_mut().map(Sink::Append).collect();
    ctx.download_streamed(&pieces_of(tensors), &mut sinks)?;
    tensors
        .iter()
        .zip(data)
        .map(|(t, d)| HostTensor::from_bytes(t.dtype, t.shape.clone(), d))
        .collect()
}

/// The GPU buffers of `tensors` as download pieces: (buffer, bytes of it, tensor, offset in
/// the tensor). A tensor above the buffer size is in several.
#[cfg(not(target_arch = "wasm32"))]
fn pieces_of<'a>(tensors: &[&'a Tensor]) -> Vec<(&'a wgpu::Buffer, u64, usize, u64)> {
    let mut pieces = Vec::new();
    for (j, t) in tensors.iter().enumerate() {
        let len = t.byte_len();
        let mut at = 0;
        for b in t.buffers().iter().take_while(|_| len > 0) {
            let n = (len - at).min(b.size());
            pieces.push((b, n, j, at));
            at += n;
        }
    }
    pieces
}

/// Downloads through one staging buffer per GPU buffer, mapped asynchronously (the browser,
/// where a wait cannot block).
#[cfg(target_arch = "wasm32")]
async fn download_mapped(ctx: &Context, tensors: &[&Tensor]) -> Result<Vec<HostTensor>> {
    let device = ctx.device();
    let mut encoder = device.create_command_encoder(&wgpu::CommandEncoderDescriptor {
        label: Some("download"),
    });
    // One staging buffer per GPU buffer of each tensor (none for empty tensors).
    let ((staging, receivers), check) = ctx.scoped("download", || {
        let staging: Vec<Vec<wgpu::Buffer>> = tensors
            .iter()
            .map(|t| {
                let buffers = if t.byte_len() > 0 { t.buffers() } else { &[] };
                buffers
                    .iter()
                    .map(|b| {
                        let s = device.create_buffer(&wgpu::BufferDescriptor {
                            label: Some("staging"),
                            size: b.size(),
                            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                            mapped_at_creation: false,
                        });
                        encoder.copy_buffer_to_buffer(b, 0, &s, 0, b.size());
                        s
                    })
                    .collect()
            })
            .collect();
        ctx.submit(encoder.finish());
        let receivers: Vec<Vec<_>> = staging
            .iter()
            .map(|buffers| {
                buffers
                    .iter()
                    .map(|s| {
                        let (tx, rx) = futures_channel::oneshot::channel();
                        s.slice(..).map_async(wgpu::MapMode::Read, move |r| {
                            let _ = tx.send(r);
                        });
                        rx
                    })
                    .collect()
            })
            .collect();
        (staging, receivers)
    });
    check.now(ctx)?;
    if staging.iter().any(|s| !s.is_empty()) {
        #[cfg(not(target_arch = "wasm32"))]
        ctx.wait_idle()?;
    }
    let mut out = Vec::with_capacity(tensors.len());
    for ((t, buffers), rxs) in tensors.iter().zip(&staging).zip(receivers) {
        let len = t.byte_len() as usize;
        let mut data = Vec::new();
        data.try_reserve_exact(len)
            .map_err(|e| Error::OutOfMemory {
                op: "download".into(),
                message: format!("{len} bytes of a result on the host: {e}"),
            })?;
        for (s, rx) in buffers.iter().zip(rxs) {
            rx.await
                .map_err(|_| Error::Readback("the GPU device was lost during a download".into()))?
                .map_err(|e| Error::Readback(format!("mapping a result buffer failed: {e}")))?;
            let view = s
                .slice(..)
                .get_mapped_range()
                .map_err(|e| Error::Readback(format!("reading a result buffer failed: {e}")))?;
            let take = view.len().min(len - data.len());
            data.extend_from_slice(&view[..take]);
            drop(view);
            s.unmap();
        }
        out.push(HostTensor::from_bytes(t.dtype, t.shape.clone(), data)?);
    }
    Ok(out)
}

/// Refuses a download of `bytes` when the host has less memory available than that.
fn check_download(bytes: u64, available: Option<u64>) -> Result<()> {
    match available {
        Some(max) if bytes > max => Err(Error::LimitExceeded {
            op: "download",
            what: "the results read back to the host".into(),
            limit: "host memory available (MemAvailable plus free swap)",
            needed: bytes,
            max,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn downloads_beyond_the_hosts_free_memory_are_refused() {
        assert!(check_download(100, Some(100)).is_ok());
        assert!(check_download(100, None).is_ok());
        let e = check_download(101, Some(100)).unwrap_err();
        assert!(
            matches!(
                e,
                Error::LimitExceeded {
                    op: "download",
                    needed: 101,
                    max: 100,
                    ..
                }
            ),
            "{e}"
        );
        assert!(e.to_string().contains("host memory available"), "{e}");
        // This machine reports some memory available (Linux), less than the total.
        #[cfg(target_os = "linux")]
        {
            let free = crate::gpu::host_memory_available().expect("/proc/meminfo");
            assert!(free > 0);
        }
    }
}
