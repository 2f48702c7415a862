//! Host-visible staging buffers that uploads and downloads reuse (native). A transfer streams
//! through a few buffers of [`CHUNK`] bytes in rounds of one submission each, so it never makes
//! a host-visible buffer of its own size: making one costs more than moving the bytes (fresh
//! memory to fault in on CPU adapters, memory to pin on GPUs), and host memory stays bounded
//! however large the tensor. Two rounds are in flight: the host fills or reads one while the
//! GPU copies the other.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use super::Context;
use crate::{Error, Result};

/// Bytes of one staging buffer.
pub(crate) const CHUNK: u64 = 4 << 20;
/// Staging buffers of a round (one submission).
const ROUND: usize = 4;
/// Staging buffers per direction a context keeps between transfers, and the most one transfer
/// uses: two rounds.
const KEPT: usize = 2 * ROUND;
/// Uploads below this many bytes are written into their buffer as it is made (wgpu stages
/// them itself, with no submission of ours).
pub(crate) const STREAMED_UPLOAD: u64 = 1 << 20;

const PENDING: u8 = 0;
const MAPPED: u8 = 1;
const FAILED: u8 = 2;

/// An upload staging buffer: mapped for writing when idle, unmapped while a copy reads it.
struct WriteBuffer {
    buffer: wgpu::Buffer,
    state: Arc<AtomicU8>,
    /// The submission that last copied from it (its mapping completes after that one).
    used_by: Option<wgpu::SubmissionIndex>,
}

/// The staging buffers a context keeps: upload ones (mapped or being mapped) and download
/// ones (unmapped).
#[derive(Default)]
pub(crate) struct StagingPool {
    uploads: Mutex<Vec<WriteBuffer>>,
    downloads: Mutex<Vec<wgpu::Buffer>>,
}

/// Where a download's bytes go: appended to a vector (in order), or into the caller's memory.
pub(crate) enum Sink<'a> {
    Append(&'a mut Vec<u8>),
    Into(&'a mut [u8]),
}

impl Sink<'_> {
    fn put(&mut self, at: u64, bytes: &[u8]) {
        match self {
            Sink::Append(v) => {
                debug_assert_eq!(v.len() as u64, at, "pieces arrive in order");
                v.extend_from_slice(bytes);
            }
            Sink::Into(s) => s[at as usize..at as usize + bytes.len()].copy_from_slice(bytes),
        }
    }
}

/// Bytes `[from, from + len)` of piece `piece`, in staging buffer `slot` from `at`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Part {
    piece: usize,
    from: u64,
    len: u64,
    slot: usize,
    at: u64,
}

/// Packs pieces of `lens` bytes (multiples of 4) one after another into staging buffers of
/// `chunk` bytes, splitting those that cross a buffer's end.
fn pack(lens: &[u64], chunk: u64) -> Vec<Part> {
    let mut parts = Vec::new();
    let (mut slot, mut at) = (0usize, 0u64);
    for (piece, &len) in lens.iter().enumerate() {
        let mut from = 0;
        while from < len {
            if at == chunk {
                slot += 1;
                at = 0;
            }
            let n = (len - from).min(chunk - at);
            parts.push(Part {
                piece,
                from,
                len: n,
                slot,
                at,
            });
            from += n;
            at += n;
        }
    }
    parts
}

/// Up to `slots` (at most [`KEPT`]) of the buffers `pool` keeps, for one transfer.
fn take<T>(pool: &Mutex<Vec<T>>, slots: usize) -> Vec<T> {
    let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
    let keep = pool.len().saturating_sub(slots.min(KEPT));
    pool.split_off(keep)
}

/// Hands a transfer's buffers back to `pool`, which keeps no more than [`KEPT`].
fn give_back<T>(pool: &Mutex<Vec<T>>, buffers: Vec<T>) {
    let mut pool = pool.lock().unwrap_or_else(|e| e.into_inner());
    let room = KEPT.saturating_sub(pool.len());
    pool.extend(buffers.into_iter().take(room));
}

/// Sets `state` when the mapping requested for `buffer` completes.
fn request_map(buffer: &wgpu::Buffer, mode: wgpu::MapMode, state: &Arc<AtomicU8>) {
    state.store(PENDING, Ordering::Release);
    let done = state.clone();
    buffer.slice(..).map_async(mode, move |r| {
        done.store(if r.is_ok() { MAPPED } else { FAILED }, Ordering::Release);
    });
}

impl Context {
    fn staging(&self) -> &StagingPool {
        &self.inner.staging
    }

    /// Waits until `state`'s mapping completed after submission `index`.
    fn wait_mapped(&self, index: Option<wgpu::SubmissionIndex>, state: &AtomicU8) -> Result<()> {
        if state.load(Ordering::Acquire) == PENDING {
            match index {
                Some(index) => self.wait_for(index)?,
                None => self.wait_idle()?,
            }
        }
        // Callbacks run in whichever thread's poll finds them ready: with the context shared,
        // another thread may be about to run this one. A lost device fails the mapping.
        let start = std::time::Instant::now();
        while state.load(Ordering::Acquire) == PENDING {
            if start.elapsed() > std::time::Duration::from_secs(60) {
                return Err(Error::Readback(
                    "a staging buffer was not mapped within a minute of its copy".into(),
                ));
            }
            std::thread::yield_now();
            let _ = self.inner.device.poll(wgpu::PollType::Poll);
        }
        match state.load(Ordering::Acquire) {
            MAPPED => Ok(()),
            _ => self.check_device("transfer").and(Err(Error::Readback(
                "mapping a staging buffer for a transfer failed".into(),
            ))),
        }
    }

    /// Writes `data` into the start of `dst` through the staging buffers, zeros up to `dst`'s
    /// size (a multiple of 4 that `data` pads). Each piece is one `(dst, data)`.
    pub(crate) fn upload_streamed(&self, pieces: &[(&wgpu::Buffer, &[u8])]) -> Result<()> {
        let lens: Vec<u64> = pieces.iter().map(|(b, _)| b.size()).collect();
        let parts = pack(&lens, CHUNK);
        let slots = parts.last().map_or(0, |p| p.slot + 1);
        let mut free = take(&self.staging().uploads, slots);
        // Oldest use first.
        free.reverse();
        let outcome = (|| -> Result<()> {
            let mut in_flight: std::collections::VecDeque<WriteBuffer> = Default::default();
            let mut first = 0;
            while first < slots {
                let round: Vec<usize> = (first..slots.min(first + ROUND)).collect();
                let mut used = Vec::with_capacity(round.len());
                for _ in &round {
                    let staging = match free.pop() {
                        Some(b) => b,
                        None if in_flight.len() + used.len() < KEPT => {
                            let (buffer, check) = self.scoped("upload", || {
                                self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                                    label: Some("upload staging"),
                                    size: CHUNK,
                                    usage: wgpu::BufferUsages::MAP_WRITE
                                        | wgpu::BufferUsages::COPY_SRC,
                                    mapped_at_creation: true,
                                })
                            });
                            check.now(self)?;
                            WriteBuffer {
                                buffer,
                                state: Arc::new(AtomicU8::new(MAPPED)),
                                used_by: None,
                            }
                        }
                        None => in_flight.pop_front().expect("buffers in flight"),
                    };
                    self.wait_mapped(staging.used_by.clone(), &staging.state)?;
                    used.push(staging);
                }
                let (submitted, check) =
                    self.scoped("upload", || -> Result<_> {
                        let mut encoder = self.inner.device.create_command_encoder(
                            &wgpu::CommandEncoderDescriptor {
                                label: Some("upload"),
                            },
                        );
                        for (j, staging) in used.iter().enumerate() {
                            let slot = round[j];
                            let mut view = staging
                                .buffer
                                .slice(..)
                                .get_mapped_range_mut()
                                .map_err(|e| {
                                    Error::Readback(format!("writing a staging buffer failed: {e}"))
                                })?;
                            for p in parts.iter().filter(|p| p.slot == slot) {
                                let (dst, data) = pieces[p.piece];
                                let from = (p.from as usize).min(data.len());
                                let to = ((p.from + p.len) as usize).min(data.len());
                                let (at, end) = (p.at as usize, (p.at + p.len) as usize);
                                view.slice(at..at + to - from)
                                    .copy_from_slice(&data[from..to]);
                                view.slice(at + to - from..end).fill(0);
                                encoder.copy_buffer_to_buffer(
                                    &staging.buffer,
                                    p.at,
                                    dst,
                                    p.from,
                                    p.len,
                                );
                            }
                            drop(view);
                            staging.buffer.unmap();
                        }
                        Ok(self.submit(encoder.finish()))
                    });
                check.now(self)?;
                let index = submitted?;
                for mut staging in used {
                    request_map(&staging.buffer, wgpu::MapMode::Write, &staging.state);
                    staging.used_by = Some(index.clone());
                    in_flight.push_back(staging);
                }
                first += ROUND;
            }
            free.extend(in_flight);
            Ok(())
        })();
        // Buffers whose mapping failed are dropped.
        free.retain(|b| b.state.load(Ordering::Acquire) != FAILED);
        give_back(&self.staging().uploads, free);
        outcome
    }

    /// Reads the first `len` bytes of each piece `(src, len, j, at)` through the staging
    /// buffers into `out[j]` from byte `at`, pieces in order.
    pub(crate) fn download_streamed(
        &self,
        pieces: &[(&wgpu::Buffer, u64, usize, u64)],
        out: &mut [Sink<'_>],
    ) -> Result<()> {
        // Copies move whole words: a piece's length rounded up stays inside its buffer.
        let lens: Vec<u64> = pieces.iter().map(|p| p.1.div_ceil(4) * 4).collect();
        let parts = pack(&lens, CHUNK);
        let slots = parts.last().map_or(0, |p| p.slot + 1);
        let mut free = take(&self.staging().downloads, slots);
        let outcome = (|| -> Result<()> {
            // Rounds submitted and not read yet: their slots, buffers, map states, submission.
            type Round = (
                Vec<usize>,
                Vec<wgpu::Buffer>,
                Vec<Arc<AtomicU8>>,
                wgpu::SubmissionIndex,
            );
            let mut in_flight: std::collections::VecDeque<Round> = Default::default();
            let mut first = 0;
            while first < slots || !in_flight.is_empty() {
                if first < slots && (in_flight.len() < 2) {
                    let round: Vec<usize> = (first..slots.min(first + ROUND)).collect();
                    let ((buffers, states, index), check) = self.scoped("download", || {
                        let buffers: Vec<wgpu::Buffer> = round
                            .iter()
                            .map(|_| {
                                free.pop().unwrap_or_else(|| {
                                    self.inner.device.create_buffer(&wgpu::BufferDescriptor {
                                        label: Some("download staging"),
                                        size: CHUNK,
                                        usage: wgpu::BufferUsages::MAP_READ
                                            | wgpu::BufferUsages::COPY_DST,
                                        mapped_at_creation: false,
                                    })
                                })
                            })
                            .collect();
                        let mut encoder = self.inner.device.create_command_encoder(
                            &wgpu::CommandEncoderDescriptor {
                                label: Some("download"),
                            },
                        );
                        for (j, &slot) in round.iter().enumerate() {
                            for p in parts.iter().filter(|p| p.slot == slot) {
                                encoder.copy_buffer_to_buffer(
                                    pieces[p.piece].0,
                                    p.from,
                                    &buffers[j],
                                    p.at,
                                    p.len,
                                );
                            }
                        }
                        let index = self.submit(encoder.finish());
                        let states: Vec<Arc<AtomicU8>> = buffers
                            .iter()
                            .map(|b| {
                                let state = Arc::new(AtomicU8::new(PENDING));
                                request_map(b, wgpu::MapMode::Read, &state);
                                state
                            })
                            .collect();
                        (buffers, states, index)
                    });
                    in_flight.push_back((round, buffers, states, index));
                    check.now(self)?;
                    first += ROUND;
                    continue;
                }
                let (round, buffers, states, index) =
                    in_flight.pop_front().expect("a round in flight");
                for ((&slot, buffer), state) in round.iter().zip(&buffers).zip(&states) {
                    self.wait_mapped(Some(index.clone()), state)?;
                    let view = buffer.slice(..).get_mapped_range().map_err(|e| {
                        Error::Readback(format!("reading a result buffer failed: {e}"))
                    })?;
                    for p in parts.iter().filter(|p| p.slot == slot) {
                        let (_, len, j, base) = pieces[p.piece];
                        let want = len.saturating_sub(p.from).min(p.len);
                        out[j].put(base + p.from, &view[p.at as usize..(p.at + want) as usize]);
                    }
                    drop(view);
                    buffer.unmap();
                }
                free.extend(buffers);
            }
            Ok(())
        })();
        // `free` holds unmapped buffers only (those in flight when an error came are dropped).
        give_back(&self.staging().downloads, free);
        outcome
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_pack_into_chunks_in_order() {
        let parts = pack(&[8, 20, 4, 0, 12], 16);
        let got: Vec<(usize, u64, u64, usize, u64)> = parts
            .iter()
            .map(|p| (p.piece, p.from, p.len, p.slot, p.at))
            .collect();
        assert_eq!(
            got,
            [
                (0, 0, 8, 0, 0),
                (1, 0, 8, 0, 8),
                (1, 8, 12, 1, 0),
                (2, 0, 4, 1, 12),
                (4, 0, 12, 2, 0),
            ]
        );
        assert!(pack(&[], 16).is_empty());
    }
}
