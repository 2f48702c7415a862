//! Storage: the GPU buffers holding a tensor's bytes. One buffer, or for tensors above the
//! context's `max_buffer_size` several in order ([`Segments`]); [`Window`]s of them are what
//! kernels bind. Knows the GPU layer only.

use crate::gpu::MemoryLease;
use crate::{Context, Result};

/// The GPU buffers of a tensor: one, or for tensors above the context's buffer size, several
/// of that size in order (the last may be shorter).
pub(crate) struct Storage {
    /// Counts the buffers' bytes against the context's memory limit while they live.
    _lease: MemoryLease,
    buffers: Vec<wgpu::Buffer>,
    segments: Segments,
    /// Filled from the host when created: its contents come from no recorded command, so a
    /// replayed Scan body that reads it would see whatever a later op wrote there.
    uploaded: bool,
}

impl Storage {
    /// New buffers for `size` bytes (a multiple of 4), holding `contents` when given (then
    /// `size` is [`alloc_size`] of `contents`). Creation failures go to the caller's scope.
    pub(crate) fn create(
        ctx: &Context,
        op: &'static str,
        size: u64,
        contents: Option<&[u8]>,
    ) -> Result<Storage> {
        Storage::create_segmented(ctx, op, size, contents, ctx.max_buffer_size())
    }

    /// As [`Storage::create`], in buffers of `segment` bytes (a multiple of 16, at most the
    /// context's buffer size) where it takes several: copies laid out in whole slices for the
    /// kernels that bind them in windows counted from each buffer's start.
    pub(crate) fn create_segmented(
        ctx: &Context,
        op: &'static str,
        size: u64,
        contents: Option<&[u8]>,
        segment: u64,
    ) -> Result<Storage> {
        debug_assert!(segment.is_multiple_of(16) && segment <= ctx.max_buffer_size());
        // Buffers of a lost device hold nothing, and their uploads do nothing, unreported.
        ctx.check_device(op)?;
        let lease = ctx.reserve_memory(op, size)?;
        let segments = Segments { segment, size };
        // Large uploads stream through the context's staging buffers (native).
        #[cfg(not(target_arch = "wasm32"))]
        let streamed =
            contents.filter(|data| data.len() as u64 >= crate::gpu::staging::STREAMED_UPLOAD);
        #[cfg(target_arch = "wasm32")]
        let streamed: Option<&[u8]> = None;
        let buffers: Vec<wgpu::Buffer> = (0..segments.count())
            .map(|i| {
                let len = segments.len(i);
                match contents.filter(|_| streamed.is_none()) {
                    Some(data) => {
                        let from = (i as u64 * segments.segment).min(data.len() as u64);
                        let to = (from + len).min(data.len() as u64);
                        ctx.buffer_sized(None, USAGE, len, &data[from as usize..to as usize])
                    }
                    None => ctx.device().create_buffer(&wgpu::BufferDescriptor {
                        label: None,
                        size: len,
                        usage: USAGE,
                        mapped_at_creation: false,
                    }),
                }
            })
            .collect();
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(data) = streamed {
            let pieces: Vec<(&wgpu::Buffer, &[u8])> = buffers
                .iter()
                .enumerate()
                .map(|(i, b)| {
                    let from = (i as u64 * segments.segment).min(data.len() as u64) as usize;
                    let to = (from as u64 + b.size()).min(data.len() as u64) as usize;
                    (b, &data[from..to])
                })
                .collect();
            ctx.upload_streamed(&pieces)?;
        }
        Ok(Storage {
            _lease: lease,
            buffers,
            segments,
            uploaded: contents.is_some(),
        })
    }

    /// Writes `data` (the storage's size less its padding) into the buffers: an upload
    /// into buffers made for an earlier one (a session's inputs). The queue orders it after
    /// the work submitted before and before the work submitted after.
    pub(crate) fn write(&self, ctx: &Context, data: &[u8]) -> Result<()> {
        debug_assert!(self.uploaded && alloc_size(data.len() as u64) == self.size());
        // Writes to a lost device do nothing, and say nothing.
        ctx.check_device("upload")?;
        let pieces: Vec<(&wgpu::Buffer, &[u8])> = self
            .buffers
            .iter()
            .enumerate()
            .map(|(i, b)| {
                let from = (i as u64 * self.segments.segment).min(data.len() as u64) as usize;
                let to = (from as u64 + b.size()).min(data.len() as u64) as usize;
                (b, &data[from..to])
            })
            .collect();
        #[cfg(not(target_arch = "wasm32"))]
        if data.len() as u64 >= crate::gpu::staging::STREAMED_UPLOAD {
            return ctx.upload_streamed(&pieces);
        }
        let ((), check) = ctx.scoped("upload", || {
            for (buffer, piece) in pieces {
                // Writes are whole words: the last one's padding is written as zeros.
                if piece.len() % 4 == 0 {
                    ctx.queue().write_buffer(buffer, 0, piece);
                } else {
                    let mut padded = piece.to_vec();
                    padded.resize(piece.len().div_ceil(4) * 4, 0);
                    ctx.queue().write_buffer(buffer, 0, &padded);
                }
            }
        });
        check.now(ctx)
    }

    pub(crate) fn uploaded(&self) -> bool {
        self.uploaded
    }

    pub(crate) fn segments(&self) -> Segments {
        self.segments
    }
    pub(crate) fn size(&self) -> u64 {
        self.segments.size
    }
    pub(crate) fn buffers(&self) -> &[wgpu::Buffer] {
        &self.buffers
    }
    /// Whether the storage is one buffer that a binding of `limit` bytes holds whole.
    pub(crate) fn fits_one_binding(&self, limit: u64) -> bool {
        self.single().is_some_and(|b| b.size() <= limit)
    }
    /// The one buffer, when the storage is a single buffer.
    pub(crate) fn single(&self) -> Option<&wgpu::Buffer> {
        match self.buffers.as_slice() {
            [b] => Some(b),
            _ => None,
        }
    }
    /// `window` bound as a binding.
    pub(crate) fn bind(&self, window: Window) -> wgpu::BindingResource<'_> {
        wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &self.buffers[window.segment],
            offset: window.offset,
            size: std::num::NonZeroU64::new(window.size),
        })
    }
    /// All of the first (for a single-buffer storage, the only) buffer.
    pub(crate) fn whole_window(&self) -> Window {
        Window {
            segment: 0,
            offset: 0,
            size: self.buffers[0].size(),
            start: 0,
        }
    }
    /// The whole single buffer as a binding.
    pub(crate) fn bind_whole(&self) -> wgpu::BindingResource<'_> {
        // Bound whole, a storage of several buffers would show its kernel the first only:
        // what lies beyond would be lost or read as zeros, silently.
        debug_assert_eq!(
            self.buffers.len(),
            1,
            "a storage of several buffers bound whole"
        );
        self.bind(self.whole_window())
    }
}

/// `bytes` rounded up to whole words, never zero: the length of a copy of that many bytes.
pub(crate) fn padded_size(bytes: u64) -> u64 {
    bytes.div_ceil(4).max(1) * 4
}

/// From this many bytes of data up, a tensor's buffer holds whole 16-byte quads.
pub(crate) const QUADS_FROM: u64 = 1 << 16;

/// Bytes of the buffer backing `bytes` bytes of data: whole words, and from [`QUADS_FROM`] up
/// whole quads, so that a large tensor of any length binds as whole quads (the 16-byte loads
/// and stores a GPU needs for its bandwidth; a window of a partial quad takes the word
/// kernels). Smaller buffers stay tight: a Scan binds an element's buffer in place inside its
/// sequence, at strides as small as the device allows.
pub(crate) fn alloc_size(bytes: u64) -> u64 {
    match padded_size(bytes) {
        // (No length a device could hold is near 2^64; none overflows here.)
        n if n >= QUADS_FROM => n.checked_next_multiple_of(16).unwrap_or(n),
        n => n,
    }
}

const USAGE: wgpu::BufferUsages = wgpu::BufferUsages::STORAGE
    .union(wgpu::BufferUsages::COPY_SRC)
    .union(wgpu::BufferUsages::COPY_DST);

/// How a tensor's bytes are laid out over GPU buffers: buffer `i` holds bytes
/// `[i * segment, (i + 1) * segment)` of `size` (the last may be shorter). One buffer when
/// `size <= segment`. `segment` is a multiple of 256, so no element or word straddles two
/// buffers and window offsets inside a buffer keep the alignment they have in the tensor (a
/// multiple of 16 in the copies laid out in whole slices, see [`Storage::create_segmented`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segments {
    pub segment: u64,
    pub size: u64,
}

/// Bytes `[offset, offset + size)` of buffer `segment`, bound as one binding; `start` is where
/// the window begins in the whole tensor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Window {
    pub segment: usize,
    pub offset: u64,
    pub size: u64,
    pub start: u64,
}

impl Segments {
    /// Buffers needed (one for an empty tensor, whose buffer is one padding word).
    pub fn count(&self) -> usize {
        self.size.div_ceil(self.segment).max(1) as usize
    }

    /// Bytes of buffer `i`.
    pub fn len(&self, i: usize) -> u64 {
        (self.size - i as u64 * self.segment).min(self.segment)
    }

    /// The window holding bytes `[first, end)`, which lie in one buffer: it starts at a
    /// multiple of `align` and ends at a whole word (or the buffer's end).
    pub fn window(&self, first: u64, end: u64, align: u64) -> Window {
        let i = (first / self.segment) as usize;
        let base = i as u64 * self.segment;
        debug_assert!(
            end <= base + self.segment,
            "[{first}, {end}) crosses a buffer"
        );
        let offset = (first - base) / align * align;
        let stop = padded_size(end - base).min(self.len(i));
        Window {
            segment: i,
            offset,
            size: stop - offset,
            start: base + offset,
        }
    }

    /// `window` (of buffer `window.segment`) ending at a whole 16-byte quad where its buffer
    /// has the bytes and the window stays within `limit`, else as it is: quad kernels need
    /// windows of whole quads, and the bytes added are only bound, never written.
    pub fn ending_on_a_quad(&self, window: Window, limit: u64) -> Window {
        let end = (window.offset + window.size)
            .next_multiple_of(16)
            .min(self.len(window.segment));
        match end - window.offset {
            size if size <= limit && size >= window.size => Window { size, ..window },
            _ => window,
        }
    }

    /// The pieces of bytes `[at, at + len)` that lie in one buffer each, in order, as
    /// (buffer, offset in it, length).
    pub fn ranges(&self, at: u64, len: u64) -> impl Iterator<Item = (usize, u64, u64)> + '_ {
        let end = at + len;
        let mut pos = at;
        std::iter::from_fn(move || {
            (pos < end).then(|| {
                let i = pos / self.segment;
                let n = ((i + 1) * self.segment).min(end) - pos;
                let piece = (i as usize, pos - i * self.segment, n);
                pos += n;
                piece
            })
        })
    }
}
