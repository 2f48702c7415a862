//! The recorder: kernels of one or more ops recorded into a command buffer and submitted at
//! once (long loops in submissions of 4096 commands), with their error scopes, a pool of
//! reusable buffers, and capture/replay of recorded commands (a Scan body is captured once and
//! replayed per iteration).

use std::collections::HashMap;
use std::sync::Arc;

use crate::gpu::profile::Stamped;
use crate::gpu::{Pipeline, ScopeCheck};
use crate::host::checked_numel;
use crate::storage::Storage;
use crate::storage::{alloc_size, padded_size};
use crate::{Context, DType, Error, Result, Tensor};

mod faults;
pub(crate) use faults::{value_message, IndexFaults, IndexRule};
mod logged;
pub(crate) use logged::{used_buffers, written_buffers, Logged, Swap};
mod slide;
pub(crate) use slide::{step_buffers, uses, writes, Slide};
use slide::{Bound, Moving};

impl Context {
    /// Starts recording GPU work; see [`Recorder`].
    pub fn recorder(&self) -> Recorder {
        Recorder::new(self.clone())
    }

    /// Records with `f` and submits (once, or in chunks for long loops), waiting for
    /// validation results (native).
    #[cfg(feature = "native")]
    pub fn run<T>(&self, f: impl FnOnce(&mut Recorder) -> Result<T>) -> Result<T> {
        let mut rec = self.recorder();
        let value = f(&mut rec)?;
        pollster::block_on(rec.finish())?;
        Ok(value)
    }
}

/// One recorded GPU command, kept for replay (a Scan body is captured once and replayed for
/// every iteration).
#[derive(Clone)]
pub(crate) enum Step {
    Dispatch {
        pipeline: Arc<Pipeline>,
        bind_group: wgpu::BindGroup,
        grid: [u32; 3],
        /// The buffers bound, in binding order (to rebind them, see [`Slide`]).
        bound: Arc<[Bound]>,
        /// The offsets of the pipeline's moving bindings, in binding order, as functions of
        /// the iteration (empty for most dispatches).
        moving: Arc<[Moving]>,
    },
    Copy {
        src: Arc<Storage>,
        src_offset: u64,
        dst: Arc<Storage>,
        dst_offset: u64,
        size: u64,
    },
    Clear {
        buffer: Arc<Storage>,
        offset: u64,
        size: u64,
    },
    /// A loop (a Scan's iterations) kept as one step: replaying it runs the loop, which encodes
    /// its iterations then (and submits them in chunks). A nested Scan is thus captured once,
    /// not unrolled into its enclosing body's steps.
    Loop {
        run: LoopFn,
        /// The commands the loop encodes when run (for the work estimate).
        commands: u64,
        /// Every buffer its commands may bind, copy or clear (an enclosing Scan may read its
        /// own elements in place where the loop uses none of their buffers).
        buffers: Arc<[wgpu::Buffer]>,
    },
}

/// The body of a [`Step::Loop`] (`Send + Sync` on native, like everything a recording holds, so
/// that recordings and their futures can move between threads; browser types are neither).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) type LoopFn = Arc<dyn Fn(&mut Recorder) -> Result<()> + Send + Sync>;
#[cfg(target_arch = "wasm32")]
pub(crate) type LoopFn = Arc<dyn Fn(&mut Recorder) -> Result<()>>;

impl Step {
    /// Commands this step encodes when replayed (a loop's whole work).
    pub(crate) fn commands(&self) -> u64 {
        match self {
            Step::Loop { commands, .. } => *commands,
            _ => 1,
        }
    }
}

/// Commands encoded into one command buffer before the recorder submits it and starts the
/// next (long Scans): wgpu holds host memory for every encoded command until its submission
/// completes, so a recording of millions of commands is cut into submissions of this many.
const COMMANDS_PER_SUBMISSION: u64 = 4096;

/// Uploads of one recording by [`Recorder::upload`] it holds for the next run at most, beyond
/// those still in use: memory must not grow with a loop that is run unrolled.
const UPLOADS_KEPT: usize = 1024;

/// Uploaded constants of Scan bodies, by the address of their host values.
pub(crate) type BodyConstants = HashMap<usize, (std::sync::Arc<crate::HostTensor>, crate::Tensor)>;

/// Buffers of dead values by size, for reuse by later ops of the same sizes; and apart, those
/// of dead uploads, which only a later run's uploads of the same sizes reuse (see
/// [`Recorder::reserve_upload`]).
#[derive(Default)]
pub(crate) struct SparePool {
    by_size: HashMap<Layout, Vec<Arc<Storage>>>,
    uploads: HashMap<Layout, Vec<Arc<Storage>>>,
}

/// A storage's bytes and, where it takes several buffers, their size: buffers are reused only
/// in the layout they were made in (copies laid out in whole slices use smaller buffers than
/// the context's, see `Recorder::relaid_in_whole_slices`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Debug)]
struct Layout {
    bytes: u64,
    /// 0 where one buffer holds it all.
    segment: u64,
}

impl Layout {
    fn new(bytes: u64, segment: u64) -> Layout {
        Layout {
            bytes,
            segment: if bytes > segment { segment } else { 0 },
        }
    }

    fn of(storage: &Storage) -> Layout {
        Layout::new(storage.size(), storage.segments().segment)
    }
}

impl SparePool {
    /// Keeps `t`'s buffer when no other handle to it exists.
    pub(crate) fn keep(&mut self, t: Tensor) {
        if let Some(storage) = t.into_unique_storage() {
            self.keep_storage(storage);
        }
    }

    /// Keeps `storage`, which nothing else holds.
    pub(crate) fn keep_storage(&mut self, storage: Arc<Storage>) {
        let pool = match storage.uploaded() {
            true => &mut self.uploads,
            false => &mut self.by_size,
        };
        pool.entry(Layout::of(&storage)).or_default().push(storage);
    }

    fn take(&mut self, layout: Layout) -> Option<Arc<Storage>> {
        self.by_size.get_mut(&layout).and_then(Vec::pop)
    }

    fn is_empty(&self) -> bool {
        self.by_size
            .values()
            .chain(self.uploads.values())
            .all(Vec::is_empty)
    }

    pub(crate) fn merge(&mut self, other: SparePool) {
        for (mine, theirs) in [
            (&mut self.by_size, other.by_size),
            (&mut self.uploads, other.uploads),
        ] {
            for (size, mut buffers) in theirs {
                mine.entry(size).or_default().append(&mut buffers);
            }
        }
    }

    /// Every storage kept.
    pub(crate) fn storages(&self) -> impl Iterator<Item = &Arc<Storage>> {
        self.by_size.values().chain(self.uploads.values()).flatten()
    }

    /// Keeps only the storages `keep` says.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&Arc<Storage>) -> bool) {
        for list in self.by_size.values_mut().chain(self.uploads.values_mut()) {
            list.retain(&mut keep);
        }
    }

    /// Takes `storage` out of the pool, if it holds it.
    pub(crate) fn remove(&mut self, storage: &Arc<Storage>) {
        self.retain(|s| !Arc::ptr_eq(s, storage));
    }

    /// Bytes of the buffers kept.
    pub(crate) fn bytes(&self) -> u64 {
        self.by_size
            .iter()
            .chain(&self.uploads)
            .map(|(layout, buffers)| layout.bytes * buffers.len() as u64)
            .sum()
    }
}

/// Where an op writes its result: a new (or pooled) buffer, or a given tensor (a Scan body
/// writes its states straight into the buffer the next iteration reads). Every op records
/// through one function taking an `Out`; the Rust API passes [`Out::NEW`].
#[derive(Clone, Copy, Debug)]
pub struct Out<'a> {
    /// The value's name (for errors) and the tensor it must be written to.
    into: Option<(&'a str, &'a Tensor)>,
}

/// The rule a Scan body breaks whose states change shape (a Loop runs unrolled then).
pub(crate) const STATES_KEEP_SHAPE: &str = "states must keep their shape across iterations";

impl<'a> Out<'a> {
    /// A new buffer (or a pooled one of a dead value).
    pub const NEW: Out<'static> = Out { into: None };

    /// Into `tensor`, which must have the result's dtype and shape; `name` names the value in
    /// the error when it does not.
    pub fn into(name: &'a str, tensor: &'a Tensor) -> Out<'a> {
        Out {
            into: Some((name, tensor)),
        }
    }

    /// The tensor to write a result of `dtype` and `shape` to.
    pub fn tensor(self, rec: &mut Recorder, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        match self.into {
            None => rec.alloc(dtype, shape),
            Some((_, t)) if t.dtype() == dtype && t.shape() == shape => Ok(t.clone()),
            Some((name, t)) => Err(Error::Graph(format!(
                "'{}' is {dtype} {shape:?} but was {} {:?} in the iteration before; {STATES_KEEP_SHAPE}",
                name,
                t.dtype(),
                t.shape()
            ))),
        }
    }

    /// The tensor given to write into, if any.
    pub(crate) fn placed(&self) -> Option<&'a Tensor> {
        self.into.map(|(_, t)| t)
    }

    /// `value` itself when no tensor is given (a view, no copy), else `value` copied into it.
    pub fn view(self, rec: &mut Recorder, value: Tensor) -> Result<Tensor> {
        if self.into.is_none() {
            return Ok(value);
        }
        let out = self.tensor(rec, value.dtype(), value.shape())?;
        let size = padded_size(value.byte_len());
        rec.copy(
            value.storage(),
            0,
            out.storage(),
            0,
            size.min(out.storage().size()),
        )?;
        Ok(out)
    }
}

/// Records kernels of one or more ops into a single command buffer; [`Recorder::finish`]
/// submits them at once. Host-side validation errors come back from each op call; GPU
/// validation errors from the call (native) or from `finish` (browser).
pub struct Recorder {
    ctx: Context,
    encoder: wgpu::CommandEncoder,
    /// The compute pass that consecutive dispatches share (wgpu orders dispatches within a pass
    /// by their resource use, as between passes); ended before any other encoder command.
    /// One pass per dispatch cost tens of microseconds of host time each.
    pass: Option<wgpu::ComputePass<'static>>,
    /// The timestamps this command buffer writes for a profile (see
    /// [`Context::start_profile`]), resolved before it is submitted.
    stamped: Option<Stamped>,
    pending: Vec<ScopeCheck>,
    dispatches: u64,
    /// While capturing, commands are collected here instead of being encoded.
    capture: Option<Vec<Step>>,
    /// Buffers of dead values, by size, for reuse within this recording (and, through a
    /// session, by its later runs: see [`Recorder::adopt_spare`]).
    pool: SparePool,
    /// Buffers a session kept from its earlier runs that no command of this recording has
    /// used yet: safe to hand out at any point, also while a Scan body is captured (see
    /// [`Recorder::alloc_unused`]).
    carried: SparePool,
    /// Tensors released while another handle to their buffer was still alive (a view the op
    /// still held): pooled once theirs is the only one left (see [`Recorder::release`]). One
    /// per buffer.
    held_back: Vec<Tensor>,
    /// Scan bodies' constants uploaded so far, by the address of their host value (which the
    /// entry holds, so the address is not reused): each body's captures (one per iteration
    /// parity) and a session's later runs read them without uploading them again.
    pub(crate) body_constants: BodyConstants,
    /// The random streams of a graph's random nodes, by node (see `graph::registry`): one
    /// per node for the recording, and through a session for its later runs, so that each
    /// execution draws anew.
    pub(crate) streams: HashMap<String, crate::RandomStream>,
    /// Commands encoded since the last submission.
    unsubmitted: u64,
    /// The last chunk submitted before `finish` (native: waited for before the next one is
    /// submitted, so at most two chunks hold memory; the browser cannot block, and its
    /// WebGPU implementation paces submissions itself).
    #[cfg_attr(target_arch = "wasm32", allow(dead_code))]
    in_flight: Option<wgpu::SubmissionIndex>,
    /// True while replaying captured commands under one error scope (see [`Self::replay`]):
    /// commands then skip scopes of their own.
    in_replay: bool,
    /// Commands this recording has committed to encode (loops counted whole before they run),
    /// checked against the context's limit.
    planned: u64,
    /// The MatMul kernel every product of this recording uses where it can (the timing runs
    /// of [`crate::MatMulChoice::Measure`]).
    pub(crate) matmul_kernel: Option<crate::MatMulKernel>,
    /// The graph nodes being recorded and the index kernels that report indices out of range
    /// (see [`IndexFaults`]).
    pub(crate) index_checks: faults::IndexChecks,
    /// Whether a command of this recording writes over an input tensor the caller handed over
    /// (see `Session::run_tensors`), and whether such a command was submitted: a session
    /// runs a failed recording once more only while the caller's inputs are unchanged.
    caller_input: CallerInput,
    /// What [`Self::upload`] uploaded: those no value holds by the end go back to the pool
    /// for a session's next run to upload into.
    uploads: Vec<Tensor>,
    /// Every command encoded so far, while a session logs its run to encode it again (see
    /// [`Logged`]); `None` when not logging, or once the run did something a replay cannot
    /// repeat (read values back, submitted early, wrote a timestamp, grew past
    /// [`logged::MAX_LOGGED`] commands).
    log: Option<Vec<Logged>>,
    /// The kernels' parameters, packed into uniform buffers of this recording's own.
    params: Params,
}

/// The kernels' parameters of a recording, packed at aligned offsets into shared uniform
/// buffers: a buffer made per dispatch (mapped at creation, so wgpu adds a staging buffer and a
/// copy) cost a planned run more host time than encoding its dispatch. Each range is written
/// once, before the commands reading it are submitted, and never again: captured and logged
/// bind groups read it in later iterations and runs.
#[derive(Default)]
struct Params {
    chunk: Option<wgpu::Buffer>,
    /// Bytes of `chunk` taken so far; those from `written` on are still in `pending`.
    used: u64,
    written: u64,
    pending: Vec<u8>,
    /// The size of the next chunk (doubling from [`Params::FIRST_CHUNK`]).
    next_size: u64,
}

impl Params {
    const FIRST_CHUNK: u64 = 4 << 10;
    const MAX_CHUNK: u64 = 1 << 20;
}

/// What a recording did to the input tensors a caller handed over.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum CallerInput {
    #[default]
    Untouched,
    /// A recorded command writes over one; nothing of it is submitted yet.
    Overwritten,
    /// Such a command was submitted.
    Changed,
}

impl Recorder {
    fn new(ctx: Context) -> Recorder {
        let encoder = ctx
            .device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                label: Some("wgpu-ops"),
            });
        Recorder {
            ctx,
            encoder,
            pass: None,
            stamped: None,
            pending: Vec::new(),
            dispatches: 0,
            capture: None,
            pool: SparePool::default(),
            carried: SparePool::default(),
            held_back: Vec::new(),
            body_constants: BodyConstants::default(),
            streams: HashMap::new(),
            unsubmitted: 0,
            in_flight: None,
            in_replay: false,
            planned: 0,
            matmul_kernel: None,
            index_checks: Default::default(),
            caller_input: CallerInput::Untouched,
            uploads: Vec::new(),
            log: None,
            params: Params::default(),
        }
    }

    /// Notes that the command recorded next writes over an input tensor the caller handed over.
    pub(crate) fn overwrites_caller_input(&mut self) {
        if self.caller_input == CallerInput::Untouched {
            self.caller_input = CallerInput::Overwritten;
        }
    }

    /// What this recording did to the input tensors the caller handed over.
    pub(crate) fn caller_input(&self) -> CallerInput {
        self.caller_input
    }

    /// Records `f` with the index kernels it records checking the indices they read (the
    /// graph's index ops, whose indices out of range are the user's error; see
    /// [`IndexFaults`]); `input` names the op's input that holds them. Public for the
    /// benchmark's cost of the check (`examples/bench.rs`).
    #[doc(hidden)]
    pub fn checking_indices<T>(
        &mut self,
        input: &'static str,
        f: impl FnOnce(&mut Recorder) -> Result<T>,
    ) -> Result<T> {
        let was = self.index_checks.set_checking(Some(input));
        let result = f(self);
        self.index_checks.set_checking(was);
        result
    }

    /// The site number an index kernel reporting by `rule` writes (0: it does not report)
    /// and the fault buffer it binds.
    pub(crate) fn index_site(
        &mut self,
        op: &'static str,
        rule: IndexRule,
    ) -> Result<(u32, Tensor)> {
        let ctx = self.ctx.clone();
        self.index_checks.site(&ctx, op, rule)
    }

    /// Runs `run`, a loop encoding `commands` commands: now, after checking them against the
    /// context's work limit, or when the enclosing capture is replayed.
    /// `buffers`: every buffer the loop's commands may use (see [`Step::Loop`]).
    pub(crate) fn run_loop(
        &mut self,
        op: &'static str,
        run: LoopFn,
        commands: u64,
        buffers: Vec<wgpu::Buffer>,
    ) -> Result<()> {
        if let Some(steps) = &mut self.capture {
            steps.push(Step::Loop {
                run,
                commands,
                buffers: buffers.into(),
            });
            return Ok(());
        }
        self.plan_commands(op, commands)?;
        if self.in_replay {
            return run(self);
        }
        // One pair of error scopes around the whole loop: its commands skip their own.
        let ctx = self.ctx.clone();
        self.in_replay = true;
        let (result, check) = ctx.scoped(op, || run(self));
        self.in_replay = false;
        self.keep(check)?;
        result
    }

    /// Counts `commands` more commands against the context's limit on one recording.
    fn plan_commands(&mut self, op: &'static str, commands: u64) -> Result<()> {
        let max = self.ctx.max_commands();
        let planned = self.planned.saturating_add(commands);
        if planned > max {
            return Err(Error::LimitExceeded {
                op,
                what: "this run's GPU commands (dispatches and copies)".into(),
                limit: "limit on commands per run (ContextOptions::max_commands)",
                needed: planned,
                max,
            });
        }
        self.planned = planned;
        Ok(())
    }

    /// Submits the commands encoded so far (ending the compute pass) and starts a new command
    /// buffer.
    fn submit_encoded(&mut self) -> Result<wgpu::SubmissionIndex> {
        self.flush_params()?;
        let ctx = self.ctx.clone();
        let encoder = std::mem::replace(
            &mut self.encoder,
            ctx.device()
                .create_command_encoder(&wgpu::CommandEncoderDescriptor {
                    label: Some("wgpu-ops"),
                }),
        );
        let (pass, stamped) = (&mut self.pass, self.stamped.take());
        let (index, check) = ctx.scoped("submit", || {
            *pass = None;
            let mut encoder = encoder;
            if let Some(stamped) = stamped {
                stamped.resolve(&mut encoder);
            }
            ctx.submit(encoder.finish())
        });
        if self.caller_input == CallerInput::Overwritten {
            self.caller_input = CallerInput::Changed;
        }
        self.keep(check)?;
        ctx.check_device("submit")?;
        self.unsubmitted = 0;
        // A run submitted in parts (a long one, or one that reads values back to plan what it
        // records next) is not kept to be encoded again.
        self.log = None;
        Ok(index)
    }

    /// Called between iterations of a loop: once enough commands are encoded, submits them and
    /// starts a new command buffer (native: after the previous submission has completed), so
    /// host and driver memory stay bounded however long the loop.
    pub(crate) fn end_of_iteration(&mut self) -> Result<()> {
        if self.capture.is_some() || self.unsubmitted < COMMANDS_PER_SUBMISSION {
            return Ok(());
        }
        let index = self.submit_encoded()?;
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(previous) = self.in_flight.replace(index) {
            self.ctx.wait_for(previous)?;
        }
        #[cfg(target_arch = "wasm32")]
        let _ = index;
        Ok(())
    }

    /// The context the recorder records on.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    /// Whether [`Recorder::read_back`] can read values in the middle of this recording: on
    /// native builds, outside a captured Scan body (whose commands are replayed per
    /// iteration without the host) and outside a replay.
    #[cfg(feature = "native")]
    pub(crate) fn can_read_back(&self) -> bool {
        self.ctx.read_back() && self.capture.is_none() && !self.in_replay
    }

    /// The values of `tensors` on the host in the middle of the recording: what is encoded so
    /// far is submitted, waited for and the tensors read back (one round trip, for an op whose
    /// plan needs values computed on the GPU). Native builds only (see
    /// [`Recorder::can_read_back`]).
    #[cfg(feature = "native")]
    pub(crate) fn read_back(
        &mut self,
        op: &str,
        tensors: &[&Tensor],
    ) -> Result<Vec<crate::HostTensor>> {
        if !self.can_read_back() {
            return Err(Error::Graph(format!(
                "internal: {} read back inside a captured body",
                crate::error::escape(op)
            )));
        }
        let ctx = self.ctx.clone();
        let index = self.submit_encoded()?;
        self.in_flight = None;
        ctx.wait_for(index)?;
        ctx.count_read_back();
        // An index out of range found so far is the error to report: the values read back
        // may have been computed from the zeros it read.
        let faults = self.index_checks.so_far();
        let mut all = tensors.to_vec();
        all.extend(faults.as_ref().map(IndexFaults::buffer));
        let mut values = pollster::block_on(crate::download_all(&ctx, &all))?;
        if let Some(faults) = &faults {
            let words = values.pop().expect("the fault words were downloaded last");
            faults.check(&words)?;
        }
        Ok(values)
    }

    /// Number of compute dispatches recorded so far (replays included).
    pub fn dispatches(&self) -> u64 {
        self.dispatches
    }

    /// Checks that every input of `op` lives on this recorder's device (wgpu panics on a
    /// buffer of another device) and that no storage-only input reaches an op that computes;
    /// each op's recording function calls it once.
    pub fn check_inputs(&self, op: &'static str, inputs: &[(&str, &Tensor)]) -> Result<()> {
        self.check_devices(op, inputs)?;
        for (name, t) in inputs {
            if t.dtype().is_storage_only()
                && !crate::dtype::STORAGE_ONLY_OPS.contains(&op)
                && !op.starts_with("Cast")
            {
                return Err(Error::invalid(
                    op,
                    *name,
                    format!(
                        "{name} is {}, which only casts and data movement take: cast it to a type {op} computes on first",
                        t.dtype()
                    ),
                ));
            }
        }
        Ok(())
    }

    /// [`Recorder::check_inputs`] for an op that only moves elements (any dtype).
    pub fn check_devices(&self, op: &'static str, inputs: &[(&str, &Tensor)]) -> Result<()> {
        for (name, t) in inputs {
            if !self.ctx.same_device(t.context()) {
                return Err(Error::invalid(
                    op,
                    *name,
                    format!(
                        "{name} was created on another Context; tensors cannot be used across devices"
                    ),
                ));
            }
        }
        Ok(())
    }

    /// Runs `f` on the encoder inside error scopes attributed to `op`.
    pub(crate) fn record<T>(
        &mut self,
        op: &str,
        f: impl FnOnce(&Context, &mut wgpu::CommandEncoder) -> T,
    ) -> Result<T> {
        let ctx = self.ctx.clone();
        let encoder = &mut self.encoder;
        let pass = &mut self.pass;
        if self.in_replay {
            *pass = None;
            return Ok(f(&ctx, encoder));
        }
        let (value, check) = ctx.scoped(op, || {
            // Ending the pass reports its dispatches' errors, under this scope.
            *pass = None;
            f(&ctx, encoder)
        });
        self.keep(check)?;
        Ok(value)
    }

    /// Runs `f` (device calls only: buffers, bind groups) inside error scopes attributed to
    /// `op`, leaving an open compute pass open.
    fn on_device<T>(&mut self, op: &str, f: impl FnOnce(&Context) -> T) -> Result<T> {
        let ctx = self.ctx.clone();
        if self.in_replay {
            return Ok(f(&ctx));
        }
        let (value, check) = ctx.scoped(op, || f(&ctx));
        self.keep(check)?;
        Ok(value)
    }

    /// Reports `check` now if its errors are known, or keeps it for `finish`.
    fn keep(&mut self, mut check: ScopeCheck) -> Result<()> {
        if let Err(e) = check.poll_now() {
            return Err(self.ctx.explain_loss(check.op(), e));
        }
        if !check.is_settled() {
            self.pending.push(check);
        }
        Ok(())
    }

    /// A tensor for an op's output: a pooled buffer of a dead value when one fits exactly,
    /// else a new one. Where the memory limit refuses a new one, the pooled buffers are freed
    /// and it is tried once more (buffers a session kept from an earlier run must not make a
    /// run of other shapes fail).
    pub(crate) fn alloc(&mut self, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        self.alloc_in(dtype, shape, self.ctx.max_buffer_size())
    }

    /// As [`Self::alloc`], in buffers of `segment` bytes where it takes several.
    fn alloc_in(&mut self, dtype: DType, shape: &[usize], segment: u64) -> Result<Tensor> {
        self.pool_held_back();
        let layout = checked_numel(shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .map(|b| Layout::new(alloc_size(b as u64), segment));
        if let Some(storage) = layout.and_then(|l| self.pool.take(l)) {
            return Ok(Tensor::from_parts(
                &self.ctx,
                dtype,
                shape.to_vec(),
                storage,
            ));
        }
        self.alloc_unused_in(dtype, shape, segment)
    }

    /// A tensor in a buffer no command of this recording has used: one a session kept from
    /// an earlier run when one fits exactly, else a new one. A Scan takes its loop's buffers
    /// this way: the recorder's own pool may hold values its body's captured commands write
    /// on every iteration. Where the memory limit refuses a new buffer, the pooled ones are
    /// freed and it is tried once more.
    pub(crate) fn alloc_unused(&mut self, dtype: DType, shape: &[usize]) -> Result<Tensor> {
        self.alloc_unused_in(dtype, shape, self.ctx.max_buffer_size())
    }

    fn alloc_unused_in(&mut self, dtype: DType, shape: &[usize], segment: u64) -> Result<Tensor> {
        let layout = checked_numel(shape)
            .and_then(|n| n.checked_mul(dtype.size()))
            .map(|b| Layout::new(alloc_size(b as u64), segment));
        if let Some(storage) = layout.and_then(|l| self.carried.take(l)) {
            return Ok(Tensor::from_parts(
                &self.ctx,
                dtype,
                shape.to_vec(),
                storage,
            ));
        }
        match Tensor::uninit_segmented(&self.ctx, dtype, shape, segment) {
            Err(Error::LimitExceeded { .. })
                if !self.pool.is_empty() || !self.carried.is_empty() =>
            {
                self.pool = SparePool::default();
                self.carried = SparePool::default();
                self.held_back.clear();
                Tensor::uninit_segmented(&self.ctx, dtype, shape, segment)
            }
            result => result,
        }
    }

    /// A tensor an op uses while it records (a copy of an input laid out for its kernel, a
    /// piece staged for a binding), in buffers of `segment` bytes where it takes several:
    /// pooled once the op drops its handle (and the commands it captured theirs), so that
    /// later ops and a session's later runs reuse it instead of creating buffers.
    pub(crate) fn scratch(
        &mut self,
        dtype: DType,
        shape: &[usize],
        segment: u64,
    ) -> Result<Tensor> {
        let t = self.alloc_in(dtype, shape, segment)?;
        self.release(t.clone());
        Ok(t)
    }

    /// Uploads `host` for this recording's commands (an op's table, an attribute as a scalar):
    /// into a buffer of its size that an earlier run of a session uploaded into, where one is
    /// kept (see [`Self::reserve_upload`]), else into a new one, so that a session's later runs
    /// create none.
    pub(crate) fn upload(&mut self, host: &crate::HostTensor) -> Result<Tensor> {
        let t = match self.reserve_upload(alloc_size(host.data.len() as u64)) {
            Some(storage) => Tensor::upload_into(&self.ctx, host, storage)?,
            None => Tensor::from_host(&self.ctx, host)?,
        };
        if self.uploads.len() >= UPLOADS_KEPT {
            // A recording that uploads this often (a loop run unrolled) keeps no more of them
            // for the next run than it holds: those nothing holds are freed, not kept.
            self.uploads.retain(|t| Arc::strong_count(t.storage()) > 1);
        }
        self.uploads.push(t.clone());
        Ok(t)
    }

    /// Buffers of `bytes` that an upload of an earlier run of a session filled, for an upload
    /// of this run to write into (`Tensor::upload_into`) instead of creating buffers. Only
    /// those kept from earlier runs: no command of this recording has used them, so the
    /// write, which the queue orders before this recording's next submission, overwrites
    /// nothing it still reads.
    pub(crate) fn reserve_upload(&mut self, bytes: u64) -> Option<Arc<Storage>> {
        let layout = Layout::new(bytes, self.ctx.max_buffer_size());
        self.carried.uploads.get_mut(&layout).and_then(Vec::pop)
    }

    /// Gives back buffers [`Self::reserve_upload`] handed out that were not used, for a later run.
    pub(crate) fn unreserve_upload(&mut self, storage: Arc<Storage>) {
        self.pool.keep_storage(storage);
    }

    /// Gives back a buffer [`Self::reserve_upload`] handed out for a value that its reader
    /// did not upload after all (a constant it took as a literal), for this run's later
    /// uploads: no command has used it yet.
    pub(crate) fn return_reserved_upload(&mut self, storage: Arc<Storage>) {
        self.carried
            .uploads
            .entry(Layout::of(&storage))
            .or_default()
            .push(storage);
    }

    /// Handles to `storage` that read nothing more: those of tensors released while another
    /// handle was alive (see [`Self::release`]), and those the commands captured so far keep
    /// (copies and clears hold their buffers' storage; dispatches bind the GPU buffers only),
    /// which run before anything recorded later.
    pub(crate) fn idle_handles(&self, storage: &Arc<Storage>) -> usize {
        let is = |s: &Arc<Storage>| usize::from(Arc::ptr_eq(s, storage));
        let released: usize = self.held_back.iter().map(|t| is(t.storage())).sum();
        let captured: usize = self
            .capture
            .iter()
            .flatten()
            .map(|step| match step {
                Step::Copy { src, dst, .. } => is(src) + is(dst),
                Step::Clear { buffer, .. } => is(buffer),
                Step::Dispatch { .. } | Step::Loop { .. } => 0,
            })
            .sum();
        released + captured
    }

    /// True while commands are captured (a Scan body), not encoded.
    pub(crate) fn capturing(&self) -> bool {
        self.capture.is_some()
    }

    /// Hands back the buffer of a tensor nobody will read again, for reuse by ops recorded
    /// later in this recording (only if no other handle to the buffer exists). Uploaded
    /// buffers are not reused by this recording: a captured Scan body reads them again on
    /// every replay, and their contents are written once, not by a command the replay
    /// repeats; a session's later runs upload into them (see `Recorder::reserve_upload`).
    /// A buffer that another handle still holds (a view of `t` the op has not dropped yet,
    /// another value's) is pooled once that handle is gone.
    pub fn release(&mut self, t: Tensor) {
        if t.is_sole_handle() {
            self.pool.keep(t);
        } else if !self.held_back.iter().any(|h| h.shares_buffer(&t)) {
            self.held_back.push(t);
        }
    }

    /// Pools the held-back buffers that nothing else holds any more.
    fn pool_held_back(&mut self) {
        // In place: values held by others (views of constants) may stay here all run.
        let pool = &mut self.pool;
        for t in self.held_back.extract_if(.., |t| t.is_sole_handle()) {
            pool.keep(t);
        }
    }

    /// Takes `spare` (buffers a session kept from its earlier runs) into this recording's pool.
    pub(crate) fn adopt_spare(&mut self, spare: SparePool) {
        self.carried.merge(spare);
    }

    /// The buffers this recording pooled and did not reuse. Those a session kept from its
    /// earlier runs that this one did not use are dropped: a session keeps what its last run
    /// used, and a run that uploads something new each time (an op's table) would otherwise
    /// add to what it keeps on every run.
    pub(crate) fn take_spare(&mut self) -> SparePool {
        self.carried = SparePool::default();
        self.pool_held_back();
        // Those still held elsewhere (a value the caller gets) are not the run's to keep.
        self.held_back.clear();
        for t in std::mem::take(&mut self.uploads) {
            self.pool.keep(t);
        }
        std::mem::take(&mut self.pool)
    }

    /// Runs `f` with commands collected instead of encoded; returns them for [`Self::replay`].
    pub(crate) fn capture<T>(
        &mut self,
        f: impl FnOnce(&mut Recorder) -> Result<T>,
    ) -> Result<(T, Vec<Step>)> {
        let outer = self.capture.replace(Vec::new());
        let result = f(self);
        let steps = std::mem::replace(&mut self.capture, outer).unwrap_or_default();
        Ok((result?, steps))
    }

    /// Encodes captured commands again (or appends them to an enclosing capture).
    pub(crate) fn replay(&mut self, steps: &[Step]) -> Result<()> {
        self.replay_iteration(steps, None)
    }

    /// [`Self::replay`] as iteration `t` of a loop: bindings that move with the iteration (see
    /// [`Slide`]) are bound at `t`'s offsets.
    pub(crate) fn replay_at(&mut self, steps: &[Step], t: u32) -> Result<()> {
        self.replay_iteration(steps, Some(t))
    }

    fn replay_iteration(&mut self, steps: &[Step], t: Option<u32>) -> Result<()> {
        if self.capture.is_some() || self.in_replay {
            return self.replay_steps(steps, t);
        }
        // One pair of error scopes around the whole replay instead of one per command: the
        // commands were validated when captured, and scopes cost more than encoding a dispatch.
        let ctx = self.ctx.clone();
        self.in_replay = true;
        let (result, check) = ctx.scoped("Scan body", || self.replay_steps(steps, t));
        self.in_replay = false;
        self.keep(check)?;
        result
    }

    fn replay_steps(&mut self, steps: &[Step], t: Option<u32>) -> Result<()> {
        for step in steps {
            if let Some(captured) = &mut self.capture {
                // Into an enclosing capture as they are (moving offsets are chosen when that
                // capture is replayed).
                if matches!(step, Step::Dispatch { .. }) {
                    self.dispatches += 1;
                }
                captured.push(step.clone());
                continue;
            }
            match step {
                Step::Dispatch {
                    pipeline,
                    bind_group,
                    grid,
                    moving,
                    bound,
                } => {
                    let mut offsets = [0u32; slide::MAX_MOVING];
                    for (o, m) in offsets.iter_mut().zip(moving.iter()) {
                        *o = match t {
                            Some(t) => m.offset(t),
                            None => {
                                return Err(Error::Validation {
                                    op: "Scan body".into(),
                                    message: "a binding that moves with the iteration was replayed outside its loop".into(),
                                })
                            }
                        };
                    }
                    let offsets = &offsets[..moving.len()];
                    self.log_step(|| Logged::dispatch(pipeline, bind_group, *grid, offsets, bound));
                    self.encode_dispatch(pipeline, bind_group, *grid, offsets)?
                }
                Step::Copy {
                    src,
                    src_offset,
                    dst,
                    dst_offset,
                    size,
                } => self.copy_buffer(src, *src_offset, dst, *dst_offset, *size)?,
                Step::Clear {
                    buffer,
                    offset,
                    size,
                } => self.clear(buffer, *offset, *size)?,
                Step::Loop { run, .. } => run(self)?,
            }
        }
        Ok(())
    }

    /// Records a copy of `size` bytes from `src` at `src_offset` to `dst` at `dst_offset`
    /// (offsets and size multiples of 4, within both buffers).
    pub fn copy_bytes(
        &mut self,
        src: &Tensor,
        src_offset: u64,
        dst: &Tensor,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        self.check_inputs("copy", &[("src", src), ("dst", dst)])?;
        let fits = |t: &Tensor, offset: u64| {
            offset
                .checked_add(size)
                .is_some_and(|end| end <= t.storage().size())
        };
        if !(src_offset | dst_offset | size).is_multiple_of(4)
            || !fits(src, src_offset)
            || !fits(dst, dst_offset)
        {
            return Err(Error::invalid(
                "copy",
                "size",
                format!("copying {size} bytes from offset {src_offset} to offset {dst_offset} needs multiples of 4 within both buffers"),
            ));
        }
        self.copy(src.storage(), src_offset, dst.storage(), dst_offset, size)
    }

    /// Records a copy between storages (offsets and size multiples of 4) as buffer copies:
    /// one per stretch that stays inside one buffer of each. Ops call [`Recorder::copy`], which
    /// uses a compute kernel instead on GPUs.
    pub(crate) fn copy_buffer(
        &mut self,
        src: &Arc<Storage>,
        src_offset: u64,
        dst: &Arc<Storage>,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        if let Some(steps) = &mut self.capture {
            steps.push(Step::Copy {
                src: src.clone(),
                src_offset,
                dst: dst.clone(),
                dst_offset,
                size,
            });
            return Ok(());
        }
        self.unsubmitted += 1;
        self.ctx.count_copy();
        self.log_step(|| Logged::Copy {
            src: Arc::downgrade(src),
            src_offset,
            dst: Arc::downgrade(dst),
            dst_offset,
            size,
        });
        self.record("copy", |_, encoder| {
            for (i, offset, len) in src.segments().ranges(src_offset, size) {
                let at = dst_offset + (i as u64 * src.segments().segment + offset - src_offset);
                for (j, dst_at, n) in dst.segments().ranges(at, len) {
                    let from = offset + (j as u64 * dst.segments().segment + dst_at - at);
                    encoder.copy_buffer_to_buffer(
                        &src.buffers()[i],
                        from,
                        &dst.buffers()[j],
                        dst_at,
                        n,
                    );
                }
            }
        })
    }

    /// Records zeroing `size` bytes of `buffer` from `offset` (both multiples of 4).
    pub(crate) fn clear(&mut self, buffer: &Arc<Storage>, offset: u64, size: u64) -> Result<()> {
        if size == 0 {
            return Ok(());
        }
        if let Some(steps) = &mut self.capture {
            steps.push(Step::Clear {
                buffer: buffer.clone(),
                offset,
                size,
            });
            return Ok(());
        }
        self.unsubmitted += 1;
        self.ctx.count_copy();
        self.log_step(|| Logged::Clear {
            buffer: Arc::downgrade(buffer),
            offset,
            size,
        });
        self.record("clear", |_, encoder| {
            for (i, at, n) in buffer.segments().ranges(offset, size) {
                encoder.clear_buffer(&buffer.buffers()[i], at, Some(n));
            }
        })
    }

    /// A range of this recording's parameter buffers holding `bytes` (see [`Params`]):
    /// the buffer, the offset and the size bound.
    fn uniform(&mut self, op: &str, bytes: &[u8]) -> Result<(wgpu::Buffer, u64, u64)> {
        let align = u64::from(self.ctx.limits().min_uniform_buffer_offset_alignment).max(4);
        let size = (bytes.len() as u64).next_multiple_of(4).max(4);
        let p = &self.params;
        let fits = p.chunk.as_ref().and_then(|chunk| {
            let offset = p.used.next_multiple_of(align);
            (offset + size <= chunk.size()).then(|| (chunk.clone(), offset))
        });
        let (chunk, offset) = match fits {
            Some(fit) => fit,
            None => {
                self.flush_params()?;
                let chunk_size = size.max(self.params.next_size.max(Params::FIRST_CHUNK));
                let chunk = self.on_device(op, |ctx| {
                    ctx.device().create_buffer(&wgpu::BufferDescriptor {
                        label: Some("params"),
                        size: chunk_size,
                        usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                        mapped_at_creation: false,
                    })
                })?;
                let p = &mut self.params;
                p.next_size = (chunk_size * 2).min(Params::MAX_CHUNK);
                p.chunk = Some(chunk.clone());
                p.used = 0;
                p.written = 0;
                (chunk, 0)
            }
        };
        let p = &mut self.params;
        let start = (offset - p.written) as usize;
        p.pending.resize(start, 0);
        p.pending.extend_from_slice(bytes);
        p.pending.resize(start + size as usize, 0);
        p.used = offset + size;
        Ok((chunk, offset, size))
    }

    /// Writes the parameters taken since the last flush into their buffer: before any
    /// submission of the commands that read them.
    fn flush_params(&mut self) -> Result<()> {
        let p = &mut self.params;
        let Some(chunk) = p.chunk.clone().filter(|_| !p.pending.is_empty()) else {
            return Ok(());
        };
        let (offset, bytes) = (p.written, std::mem::take(&mut p.pending));
        p.written = p.used;
        self.on_device("params", |ctx| {
            ctx.queue().write_buffer(&chunk, offset, &bytes)
        })
    }

    /// Records one dispatch of `pipeline` over `grid` workgroups: `params` (the kernel's
    /// parameters) as a uniform at binding 0, then `buffers` bound in order.
    pub(crate) fn dispatch(
        &mut self,
        op: &str,
        pipeline: &Arc<Pipeline>,
        params: &[u8],
        buffers: &[wgpu::BindingResource<'_>],
        grid: [u32; 3],
    ) -> Result<()> {
        let (uniform, offset, size) = self.uniform(op, params)?;
        let params = wgpu::BindingResource::Buffer(wgpu::BufferBinding {
            buffer: &uniform,
            offset,
            size: std::num::NonZeroU64::new(size),
        });
        let bindings: Vec<wgpu::BindingResource<'_>> = std::iter::once(params)
            .chain(buffers.iter().cloned())
            .collect();
        self.dispatch_with(op, pipeline, &bindings, grid)
    }

    /// A bind group of `pipeline`'s layout with `bindings` in order.
    fn bind_group(
        &mut self,
        op: &str,
        pipeline: &Pipeline,
        bindings: &[wgpu::BindingResource<'_>],
    ) -> Result<wgpu::BindGroup> {
        self.on_device(op, |ctx| {
            let entries: Vec<wgpu::BindGroupEntry> = bindings
                .iter()
                .cloned()
                .enumerate()
                .map(|(i, resource)| wgpu::BindGroupEntry {
                    binding: i as u32,
                    resource,
                })
                .collect();
            ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &pipeline.layout,
                entries: &entries,
            })
        })
    }

    /// Records one dispatch of `pipeline` over `grid` workgroups with `bindings` in order (no
    /// parameters of its own).
    pub(crate) fn dispatch_with(
        &mut self,
        op: &str,
        pipeline: &Arc<Pipeline>,
        bindings: &[wgpu::BindingResource<'_>],
        grid: [u32; 3],
    ) -> Result<()> {
        let bind_group = self.bind_group(op, pipeline, bindings)?;
        if let Some(steps) = &mut self.capture {
            self.dispatches += 1;
            steps.push(Step::Dispatch {
                pipeline: pipeline.clone(),
                bind_group,
                grid,
                bound: bindings.iter().map(Bound::of).collect(),
                moving: Arc::new([]),
            });
            return Ok(());
        }
        if self.log.is_some() {
            let bound: Arc<[Bound]> = bindings.iter().map(Bound::of).collect();
            self.log_step(|| Logged::dispatch(pipeline, &bind_group, grid, &[], &bound));
        }
        self.encode_dispatch(pipeline, &bind_group, grid, &[])
    }

    /// Encodes one dispatch into the open compute pass (opening one if needed); `offsets` are
    /// those of the pipeline's moving bindings.
    fn encode_dispatch(
        &mut self,
        pipeline: &Arc<Pipeline>,
        bind_group: &wgpu::BindGroup,
        grid: [u32; 3],
        offsets: &[u32],
    ) -> Result<()> {
        self.dispatches += 1;
        self.ctx.count_dispatch();
        self.unsubmitted += 1;
        let timed = self.ctx.profile_pair(pipeline);
        if let Some(pair) = &timed {
            Stamped::extend(&mut self.stamped, pair);
        }
        let (encoder, pass) = (&mut self.encoder, &mut self.pass);
        let mut encode = || {
            if let Some(pair) = &timed {
                // A pass of its own, stamped at its start and end.
                *pass = None;
                let mut own = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                    label: None,
                    timestamp_writes: Some(wgpu::ComputePassTimestampWrites {
                        query_set: &pair.set,
                        beginning_of_pass_write_index: Some(2 * pair.index),
                        end_of_pass_write_index: Some(2 * pair.index + 1),
                    }),
                });
                own.set_pipeline(&pipeline.pipeline);
                own.set_bind_group(0, bind_group, offsets);
                own.dispatch_workgroups(grid[0], grid[1], grid[2]);
                return;
            }
            let pass = pass.get_or_insert_with(|| {
                encoder
                    .begin_compute_pass(&wgpu::ComputePassDescriptor {
                        label: None,
                        timestamp_writes: None,
                    })
                    .forget_lifetime()
            });
            pass.set_pipeline(&pipeline.pipeline);
            pass.set_bind_group(0, bind_group, offsets);
            pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
        };
        if self.in_replay {
            encode();
            return Ok(());
        }
        let ctx = self.ctx.clone();
        let ((), check) = ctx.scoped("dispatch", encode);
        self.keep(check)
    }

    /// Writes a GPU timestamp into `set` at `index` (for benchmarks; needs the adapter's
    /// `TIMESTAMP_QUERY_INSIDE_ENCODERS`, which the context requests when available).
    pub fn timestamp(&mut self, set: &wgpu::QuerySet, index: u32) -> Result<()> {
        self.log = None;
        self.record("timestamp", |_, encoder| {
            encoder.write_timestamp(set, index)
        })
    }

    /// Submits everything recorded, then reports any GPU error the recording raised.
    pub async fn finish(mut self) -> Result<()> {
        self.flush_params()?;
        let Recorder {
            ctx,
            mut encoder,
            pass,
            stamped,
            mut pending,
            ..
        } = self;
        let ((), check) = ctx.scoped("submit", || {
            drop(pass);
            if let Some(stamped) = stamped {
                stamped.resolve(&mut encoder);
            }
            ctx.submit(encoder.finish());
        });
        pending.push(check);
        let checked = async {
            ctx.await_deferred_checks().await?;
            for check in pending {
                check.wait().await?;
            }
            Ok(())
        };
        checked.await.map_err(|e| ctx.explain_loss("submit", e))?;
        // Commands on a lost device do nothing and raise no error.
        ctx.check_device("submit")
    }
}

/// For the encoding benchmark (`examples/encode_cost.rs`): host nanoseconds per dispatch of a
/// captured body of `body` element-wise dispatches replayed `times` times in a loop as a Scan
/// does, of the same dispatches each under error scopes of its own (how replays were encoded
/// before), and of the same pipelines and bind groups encoded with bare wgpu into one compute
/// pass; then the same body reading a 256-byte element that moves with the iteration (bound
/// with a dynamic offset, as a Scan binds its elements in place, see [`Slide`]) replayed, and
/// bare wgpu encoding it with the same offsets. Measured in the same process (interleaved,
/// best of `rounds`), each up to its finished command buffer (where wgpu does most of its
/// work). Nothing is submitted.
#[doc(hidden)]
#[cfg(feature = "native")]
pub fn replay_cost(ctx: &Context, body: usize, times: usize, rounds: usize) -> Result<ReplayCost> {
    use std::time::Instant;
    let host = crate::HostTensor::from_vec(vec![64], &[1.0f32; 64])?;
    let a = Tensor::from_host(ctx, &host)?;
    let b = Tensor::uninit(ctx, DType::F32, &[64])?;
    let c = Tensor::uninit(ctx, DType::F32, &[64])?;
    // The elements `a` stands for when it moves: one per replay.
    let sequence = Tensor::uninit(ctx, DType::F32, &[times.max(1), 64])?;
    let mut rec = ctx.recorder();
    let ((), steps) = rec.capture(|rec| {
        for k in 0..body {
            let (from, to) = if k % 2 == 0 { (&a, &b) } else { (&b, &a) };
            rec.elementwise_to("Relu", from, None, Out::into("b", to))?;
        }
        Ok(())
    })?;
    // Reading the element and writing one buffer of the body's own per dispatch.
    let ((), reading) = rec.capture(|rec| {
        for k in 0..body {
            let to = if k % 2 == 0 { &b } else { &c };
            rec.elementwise_to("Relu", &a, None, Out::into("b", to))?;
        }
        Ok(())
    })?;
    let slide = Slide::along(
        a.storage().buffers()[0].clone(),
        sequence.storage().buffers()[0].clone(),
        256,
        times.max(1) as u32,
        false,
    );
    let moving = match rec.slide("benchmark", &reading, &[slide])? {
        Ok(steps) => steps,
        Err(_) => {
            return Err(Error::invalid(
                "benchmark",
                "body",
                "the element cannot be bound at a moving offset on this device",
            ))
        }
    };
    type Bare = (Arc<Pipeline>, wgpu::BindGroup, [u32; 3], Vec<Moving>);
    let bare_of = |steps: &[Step]| -> Vec<Bare> {
        steps
            .iter()
            .filter_map(|s| match s {
                Step::Dispatch {
                    pipeline,
                    bind_group,
                    grid,
                    moving,
                    ..
                } => Some((pipeline.clone(), bind_group.clone(), *grid, moving.to_vec())),
                _ => None,
            })
            .collect()
    };
    let (dispatches, moving_dispatches) = (bare_of(&steps), bare_of(&moving));
    let n = (times * dispatches.len()) as f64;
    let (steps, moving) = (Arc::new(steps), Arc::new(moving));
    let mut cost = ReplayCost {
        replay: f64::MAX,
        scoped: f64::MAX,
        bare: f64::MAX,
        moving_replay: f64::MAX,
        moving_bare: f64::MAX,
    };
    let finished = |rec: Recorder| {
        let Recorder { encoder, pass, .. } = rec;
        drop(pass);
        encoder.finish()
    };
    let bare = |dispatches: &[Bare]| -> f64 {
        let mut encoder = ctx
            .device()
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let start = Instant::now();
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor {
                label: None,
                timestamp_writes: None,
            });
            let mut offsets = [0u32; slide::MAX_MOVING];
            for t in 0..times as u32 {
                for (pipeline, bind_group, grid, moving) in dispatches {
                    for (o, m) in offsets.iter_mut().zip(moving) {
                        *o = m.offset(t);
                    }
                    pass.set_pipeline(&pipeline.pipeline);
                    pass.set_bind_group(0, bind_group, &offsets[..moving.len()]);
                    pass.dispatch_workgroups(grid[0], grid[1], grid[2]);
                }
            }
        }
        let commands = encoder.finish();
        let elapsed = start.elapsed().as_nanos() as f64 / n;
        drop(commands);
        elapsed
    };
    for _ in 0..rounds {
        // As a Scan replays its body: inside a loop, under the loop's one error scope.
        for (body_steps, best) in [
            (steps.clone(), &mut cost.replay),
            (moving.clone(), &mut cost.moving_replay),
        ] {
            let mut rec = ctx.recorder();
            let start = Instant::now();
            let run: LoopFn = Arc::new(move |rec: &mut Recorder| {
                for t in 0..times as u32 {
                    rec.replay_at(&body_steps, t)?;
                }
                Ok(())
            });
            rec.run_loop("benchmark", run, 0, Vec::new())?;
            let commands = finished(rec);
            *best = best.min(start.elapsed().as_nanos() as f64 / n);
            drop(commands);
        }

        // Each command under error scopes of its own (how replays were encoded before).
        let mut rec = ctx.recorder();
        let start = Instant::now();
        for _ in 0..times {
            for (pipeline, bind_group, grid, _) in &dispatches {
                rec.encode_dispatch(pipeline, bind_group, *grid, &[])?;
            }
        }
        let commands = finished(rec);
        cost.scoped = cost.scoped.min(start.elapsed().as_nanos() as f64 / n);
        drop(commands);

        cost.bare = cost.bare.min(bare(&dispatches));
        cost.moving_bare = cost.moving_bare.min(bare(&moving_dispatches));
    }
    Ok(cost)
}

/// Host nanoseconds per dispatch (see [`replay_cost`]).
#[doc(hidden)]
#[derive(Clone, Copy, Debug)]
pub struct ReplayCost {
    pub replay: f64,
    pub scoped: f64,
    pub bare: f64,
    /// With a binding that moves with the iteration.
    pub moving_replay: f64,
    pub moving_bare: f64,
}

#[cfg(all(test, feature = "native"))]
mod tests {
    use super::*;

    fn ctx() -> Context {
        crate::gpu::test_context()
    }

    #[test]
    fn replay_costs_are_measured_for_fixed_and_moving_bindings() {
        let c = replay_cost(&ctx(), 2, 4, 1).unwrap();
        for v in [c.replay, c.scoped, c.bare, c.moving_replay, c.moving_bare] {
            assert!(v.is_finite() && v > 0.0, "{c:?}");
        }
    }

    #[test]
    fn validation_errors_while_recording_come_back_as_errors() {
        let ctx = ctx();
        let buffer = |usage| {
            ctx.device().create_buffer(&wgpu::BufferDescriptor {
                label: None,
                size: 16,
                usage,
                mapped_at_creation: false,
            })
        };
        let src = buffer(wgpu::BufferUsages::COPY_SRC);
        let dst = buffer(wgpu::BufferUsages::STORAGE); // no COPY_DST: the copy is invalid
        let mut rec = ctx.recorder();
        let recorded = rec.record("copy probe", |_, encoder| {
            encoder.copy_buffer_to_buffer(&src, 0, &dst, 0, 16);
        });
        let result = recorded.and_then(|()| pollster::block_on(rec.finish()));
        match result {
            Err(Error::Validation { op, .. }) => {
                assert!(op == "copy probe" || op == "submit", "{op}")
            }
            other => panic!("expected a validation error, got {other:?}"),
        }
    }

    #[test]
    fn errors_of_replayed_loops_are_caught_once_and_returned() {
        let ctx = ctx();
        let a = Tensor::uninit(&ctx, DType::U8, &[16]).unwrap();
        let b = Tensor::uninit(&ctx, DType::U8, &[16]).unwrap();
        let mut rec = ctx.recorder();
        // A copy past the end of both buffers: captured unchecked, invalid when encoded.
        let ((), steps) = rec
            .capture(|rec| rec.copy_buffer(a.storage(), 0, b.storage(), 8, 64))
            .unwrap();
        let steps = Arc::new(steps);
        let run: LoopFn = Arc::new(move |rec: &mut Recorder| {
            for _ in 0..3 {
                rec.replay(&steps)?;
            }
            Ok(())
        });
        let result = rec
            .run_loop(
                "test loop",
                run,
                3,
                vec![a.buffers()[0].clone(), b.buffers()[0].clone()],
            )
            .and_then(|()| pollster::block_on(rec.finish()));
        match result {
            Err(Error::Validation { op, .. }) => {
                assert!(op == "test loop" || op == "submit", "{op}")
            }
            other => panic!("expected a validation error, got {other:?}"),
        }
    }
}
