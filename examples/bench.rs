//! Throughput of the data-movement ops against the crate's plain copy of the same output bytes
//! on the same adapter (`Recorder::copy_bytes`: on GPUs the `vec4<u32>` copy kernel, the
//! fastest copy they have; on CPU adapters `copy_buffer_to_buffer`, a `memcpy` there), and the
//! per-iteration overhead of Scan. Writes `bench/results.json`,
//! `bench/throughput.png` and `bench/scan.json` (or the folder given with `--out`).
//!
//! Timing: GPU timestamps around `repeat` back-to-back runs in one command buffer where the
//! adapter has them, else wall time around the finished submission; one warm-up, then the
//! median of several measurements. GB/s counts bytes read plus bytes written. From 1 MiB of
//! output up each data-movement case is measured twice: warm (every run on the same buffers,
//! which from 16 MiB up may still sit in a GPU's 50 MiB L2 from the run before) and cold (runs
//! rotate through copies of input and output spanning `--rotate-mib` MiB, 256 by default, and
//! the copy through as many buffer pairs), each against the copy measured the same way.
//! The warm submissions also time the copy of the same bytes from the op's input into its
//! output (the memory the op touches) and between a reference pair made before the table,
//! and the table gives the op's ratio to the fastest of the three copies (the adapter's best
//! copy of those bytes at that moment). On GPUs with timestamps, copies are queued ahead of
//! every timed submission, enough to cover the host's time recording it and `--busy-ms` (30)
//! milliseconds more, so that no measurement starts on a device left idle.
//!
//! `cargo run --release --example bench -- [--out DIR] [--min-mib N] [--max-mib N] [--quick] [--case TEXT]
//! [--workgroup-size N] [--gather-unroll 1|2|4] [--rotate-mib N] [--busy-ms N] [--cpu-kernels on|off] [--f16-conversions built-in|integer] [--matmul by-shape|measure|tiles|rows|blocks]
//! [--widths 1,2,4,8] [--no-scan] [--scan-only] [--rnn-only] [--matmul-only] [--transfer-only] [--dtypes-only] [--broadcast-only] [--reduce-only] [--gather-only] [--pad-only] [--scatter-only] [--lines-only] [--linear-attention-only] [--help]`
//! (an unknown argument is refused, exit 2)
//! (`--transfer-only`: uploads and downloads against a host memcpy of the same bytes;
//! `--matmul-only`: every MatMul kernel timed on the products of recurrent steps (f32, and f64
//! and i64 emulated on u32 pairs), and f16 and bf16 products against the same products through
//! f32 copies and in f32;
//! `--dtypes-only`: `Add` on 64 MiB operands (ordinary values: normal floats) of each of the
//! 13 dtypes but bool, as GB/s and as a ratio to a plain buffer copy of the same bytes, written to
//! DIR/dtypes.txt, so the cost of each emulation is visible (and as a program on one element
//! less, `prog n-1`: an output that ends inside a 16-byte quad);
//! `--broadcast-only`: f32 `Add` of a 16 MiB matrix and a row or a column broadcast against it,
//! with rows of a power of two and of another length, and broadcasts whose walks keep 4 and 6
//! axes, against the copy of the output's bytes, written to DIR/broadcast.txt: the cost of the
//! index arithmetic a broadcast needs;
//! `--reduce-only`: f32 `ReduceSum` over the rows of 16 MiB matrices, from 16 rows of a million
//! to a million rows of 4, against the copy of the input's bytes, written to DIR/reduce.txt,
//! with the kernel each shape takes: a workgroup per row, a segment of `LANES` threads of one
//! per row, or a thread per row;
//! `--pad-only`: ONNX `Pad` in each mode on rows (of an even and an odd number of elements),
//! images and every axis of about 16 MiB of output, 1-, 4- and 8-byte elements, against the copy of the output's bytes, written to
//! DIR/pad.txt;
//! `--scatter-only`: TensorScatter's KV cache writes, distinct updates at once against
//! ScatterElements' walk in order, against the copy of the cache's bytes, and ScatterND of
//! single elements and of rows, written to DIR/scatter.txt;
//! `--lines-only`: f32 CumSum over 16 MiB seen as one line of 4 million down to 16 384 lines
//! of 256 (and lines strided along axis 0), and TopK over 4 MiB seen as one line of a million
//! to 4096 lines of 256, keeping 1, 50 and 300, each line walked by one invocation and split
//! across invocations (`ContextOptions::split_lines`), against the copy of the input's bytes,
//! written to DIR/lines.txt).
//! (`--replot DIR/results.json` redraws the plot of a file measured elsewhere).

use std::cell::RefCell;
use std::time::Instant;

use serde_json::json;
use wgpu_ops::graph::{Attr, Graph, Node};
use wgpu_ops::ops::elementwise::{Arg, Program, Values};
use wgpu_ops::{
    BatchToSpace, Context, ContextOptions, DType, HostTensor, MatMulChoice, MatMulKernel, Out,
    Recorder, Session, Slice, SpaceToBatch, StridedSlice, Tensor,
};

struct Timer {
    set: Option<wgpu::QuerySet>,
    preload: Option<Preload>,
}

/// Copies queued ahead of each timed submission of [`Timer::median_set`], so that the device
/// is busy while the host records the submission and until it starts: a device left idle for
/// the host's recording (tens of milliseconds for a few thousand small runs) may lower its
/// clocks, and the submission would then run at whatever clock it finds.
struct Preload {
    src: Tensor,
    dst: Tensor,
    /// GPU seconds of one copy of `src` into `dst`.
    copy_seconds: f64,
    /// GPU seconds queued beyond the host's recording time of the last submission.
    margin: f64,
}

impl Timer {
    fn new(ctx: &Context) -> Timer {
        let ok = ctx.device().features().contains(
            wgpu::Features::TIMESTAMP_QUERY | wgpu::Features::TIMESTAMP_QUERY_INSIDE_ENCODERS,
        );
        Timer {
            preload: None,
            set: ok.then(|| {
                ctx.device().create_query_set(&wgpu::QuerySetDescriptor {
                    label: None,
                    ty: wgpu::QueryType::Timestamp,
                    count: 2 * SET_MAX as u32 + 1,
                })
            }),
        }
    }

    /// Queues copies ahead of every timed submission of [`Timer::median_set`]: `margin` GPU
    /// seconds of them beyond the host's time to record the submission. GPU timestamps only
    /// (the copies would count in a wall time).
    fn keep_clocks(&mut self, ctx: &Context, margin: f64) {
        if self.set.is_none() || margin <= 0.0 {
            return;
        }
        let bytes = (256u64 << 20).min(ctx.max_buffer_size()) as usize & !15;
        let src = Tensor::uninit(ctx, DType::U8, &[bytes]).unwrap();
        let dst = Tensor::uninit(ctx, DType::U8, &[bytes]).unwrap();
        let copy_seconds = self.median(ctx, 4, 3, &mut |rec| {
            rec.copy_bytes(&src, 0, &dst, 0, bytes as u64).unwrap()
        });
        self.preload = Some(Preload {
            src,
            dst,
            copy_seconds,
            margin,
        });
    }

    /// Submits the copies that keep the device busy while the host records for about
    /// `host_seconds`, and `margin` beyond (see [`Preload`]); returns once they are queued.
    fn queue_preload(&self, ctx: &Context, host_seconds: f64) {
        let Some(p) = &self.preload else { return };
        let copies = ((host_seconds + p.margin) / p.copy_seconds.max(1e-7)).ceil() as usize;
        let bytes = p.src.byte_len() & !3;
        ctx.run(|rec| {
            for _ in 0..copies.clamp(1, 2048) {
                rec.copy_bytes(&p.src, 0, &p.dst, 0, bytes)?;
            }
            Ok(())
        })
        .unwrap();
    }

    fn method(&self) -> &'static str {
        if self.set.is_some() {
            "GPU timestamps"
        } else {
            "wall time around a finished submission"
        }
    }

    /// Seconds taken by what `record` records, measured on the GPU when possible.
    fn time(&self, ctx: &Context, record: &mut dyn FnMut(&mut Recorder)) -> f64 {
        let mut rec = ctx.recorder();
        if let Some(set) = &self.set {
            rec.timestamp(set, 0).unwrap();
        }
        record(&mut rec);
        if let Some(set) = &self.set {
            rec.timestamp(set, 1).unwrap();
        }
        let start = Instant::now();
        pollster::block_on(rec.finish()).unwrap();
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        self.elapsed(ctx, start.elapsed().as_secs_f64())
    }

    /// Seconds taken by what `record` records into a plain wgpu encoder.
    fn time_raw(&self, ctx: &Context, record: &mut dyn FnMut(&mut wgpu::CommandEncoder)) -> f64 {
        let mut enc = ctx.device().create_command_encoder(&Default::default());
        if let Some(set) = &self.set {
            enc.write_timestamp(set, 0);
        }
        record(&mut enc);
        if let Some(set) = &self.set {
            enc.write_timestamp(set, 1);
        }
        let start = Instant::now();
        ctx.queue().submit([enc.finish()]);
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        self.elapsed(ctx, start.elapsed().as_secs_f64())
    }

    /// The GPU time between the two timestamps just written, or `wall` without timestamps.
    fn elapsed(&self, ctx: &Context, wall: f64) -> f64 {
        let Some(set) = &self.set else { return wall };
        let t = Self::stamps(ctx, set, 2);
        t[1] - t[0]
    }

    /// The first `n` timestamps of `set`, in seconds.
    fn stamps(ctx: &Context, set: &wgpu::QuerySet, n: u32) -> Vec<f64> {
        let size = 8 * u64::from(n);
        let resolve = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        let read = ctx.device().create_buffer(&wgpu::BufferDescriptor {
            label: None,
            size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let mut enc = ctx.device().create_command_encoder(&Default::default());
        enc.resolve_query_set(set, 0..n, &resolve, 0);
        enc.copy_buffer_to_buffer(&resolve, 0, &read, 0, size);
        ctx.queue().submit([enc.finish()]);
        read.slice(..).map_async(wgpu::MapMode::Read, |_| {});
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        let ticks: Vec<u64> =
            bytemuck::cast_slice(&read.slice(..).get_mapped_range().unwrap()).to_vec();
        let period = f64::from(ctx.queue().get_timestamp_period()) * 1e-9;
        ticks
            .iter()
            .map(|&t| t.wrapping_sub(ticks[0]) as f64 * period)
            .collect()
    }

    /// Median seconds per run of `record`, recorded `repeat` times per measurement.
    fn median(
        &self,
        ctx: &Context,
        repeat: usize,
        samples: usize,
        record: &mut dyn FnMut(&mut Recorder),
    ) -> f64 {
        let mut all = |rec: &mut Recorder| (0..repeat).for_each(|_| record(rec));
        self.time(ctx, &mut all); // warm-up
        let mut t: Vec<f64> = (0..samples)
            .map(|_| self.time(ctx, &mut all) / repeat as f64)
            .collect();
        t.sort_by(f64::total_cmp);
        t[t.len() / 2]
    }

    /// Median seconds per run of `op` and of `baseline`, measured so that both see the same
    /// clock state of the device (see [`Timer::median_set`]).
    fn median_pair(
        &self,
        ctx: &Context,
        repeat: usize,
        samples: usize,
        op: &mut dyn FnMut(&mut Recorder),
        baseline: &mut dyn FnMut(&mut Recorder),
    ) -> (f64, f64) {
        let t = self.median_set(ctx, repeat, samples, &mut [op, baseline]);
        (t[0], t[1])
    }

    /// Median seconds per run of each of `runs` (at most [`SET_MAX`]), measured so that all
    /// see the same clock state of the device. With timestamps, each sample is one submission:
    /// a warm-up of the first, then every run in order and again in reverse order (`repeat`
    /// times each, a timestamp between), so the device runs without pause and a clock still
    /// rising or falling favours none of them (separate submissions of a few hundred
    /// microseconds each left a discrete GPU between clock states: the same copy ran at 2.1 or
    /// 4.5 TB/s on the H200 depending on what came before). Without, separate submissions
    /// interleaved.
    fn median_set(
        &self,
        ctx: &Context,
        repeat: usize,
        samples: usize,
        runs: &mut [&mut dyn FnMut(&mut Recorder)],
    ) -> Vec<f64> {
        let n = runs.len();
        assert!(
            (1..=SET_MAX).contains(&n),
            "median_set: 1 to {SET_MAX} runs"
        );
        let mut times = vec![Vec::with_capacity(samples); n];
        if let Some(set) = &self.set {
            // Forward then backward: run k fills slots k and 2n - 1 - k.
            let order: Vec<usize> = (0..n).chain((0..n).rev()).collect();
            let mut host_seconds = 0.0;
            for _ in 0..samples {
                self.queue_preload(ctx, host_seconds);
                let recording = Instant::now();
                let mut rec = ctx.recorder();
                (0..repeat).for_each(|_| runs[0](&mut rec));
                rec.timestamp(set, 0).unwrap();
                for (slot, &k) in order.iter().enumerate() {
                    (0..repeat).for_each(|_| runs[k](&mut rec));
                    rec.timestamp(set, slot as u32 + 1).unwrap();
                }
                host_seconds = recording.elapsed().as_secs_f64();
                pollster::block_on(rec.finish()).unwrap();
                ctx.device()
                    .poll(wgpu::PollType::wait_indefinitely())
                    .unwrap();
                let t = Self::stamps(ctx, set, 2 * n as u32 + 1);
                for (k, kept) in times.iter_mut().enumerate() {
                    let (fwd, back) = (k, 2 * n - 1 - k);
                    let spent = t[fwd + 1] - t[fwd] + t[back + 1] - t[back];
                    kept.push(spent / (2 * repeat) as f64);
                }
            }
        } else {
            for run in runs.iter_mut() {
                // Warm-up: pipelines, first touch of memory.
                self.time(ctx, &mut |rec| (0..repeat).for_each(|_| run(rec)));
            }
            for _ in 0..samples {
                for (k, run) in runs.iter_mut().enumerate() {
                    let t = self.time(ctx, &mut |rec| (0..repeat).for_each(|_| run(rec)));
                    times[k].push(t / repeat as f64);
                }
            }
        }
        times
            .into_iter()
            .map(|mut t| {
                t.sort_by(f64::total_cmp);
                t[t.len() / 2]
            })
            .collect()
    }
}

/// The most runs [`Timer::median_set`] times together.
const SET_MAX: usize = 5;

/// Bytes of the launch-bound probe: a copy this small waits on the device's clocks, not on
/// memory, so its time tracks the clock state each measurement ran in.
const PROBE_BYTES: u64 = 4 << 10;

#[derive(Clone, Copy)]
enum Case {
    Contiguous,
    Reversed,
    Step2,
    Mix,
    BatchToSpace,
    SpaceToBatch,
    ReversedOdd,
}

impl Case {
    const ALL: [Case; 7] = [
        Case::Contiguous,
        Case::Reversed,
        Case::Step2,
        Case::Mix,
        Case::BatchToSpace,
        Case::SpaceToBatch,
        Case::ReversedOdd,
    ];

    fn name(self) -> &'static str {
        match self {
            Case::Contiguous => "x[1:-1] (contiguous rows)",
            Case::Reversed => "x[:, ::-1]",
            Case::Step2 => "x[:, ::2]",
            Case::Mix => "x[None, 1, ..., ::-1]",
            Case::BatchToSpace => "BatchToSpace 2x2 NHWC",
            Case::SpaceToBatch => "SpaceToBatch 2x2 NHWC",
            Case::ReversedOdd => "rows of 255 reversed",
        }
    }

    /// The most this case's ratio can reach where memory moves whole 32-byte sectors: the
    /// bytes counted (read + written) over the bytes of the sectors it touches. Every other
    /// element of a row (of at most 8 bytes each) still reads every sector of the row: 2
    /// bytes counted for 3 moved.
    fn sector_ceiling(self) -> f64 {
        match self {
            Case::Step2 => 2.0 / 3.0,
            _ => 1.0,
        }
    }

    /// An input shape of about `bytes` bytes for elements of `w` bytes.
    fn shape(self, bytes: u64, w: u64) -> Vec<usize> {
        let e = (bytes / w) as usize;
        match self {
            Case::Mix => vec![4, (e / 4 / 256).max(1), 256],
            Case::BatchToSpace | Case::SpaceToBatch => {
                // NHWC with C = 16 and a batch of 4 (BatchToSpace) or 1.
                let n = if matches!(self, Case::BatchToSpace) {
                    4
                } else {
                    1
                };
                let hw = ((e / n / 16) as f64).sqrt() as usize / 2 * 2;
                vec![n, hw.max(2), hw.max(2), 16]
            }
            // An odd number of rows of 255: no width's byte length is whole 16-byte quads.
            Case::ReversedOdd => vec![(e / 255).max(3) | 1, 255],
            _ => vec![(e / 256).max(3), 256],
        }
    }

    fn record(self, rec: &mut Recorder, x: &Tensor) -> wgpu_ops::Result<Tensor> {
        match self {
            Case::Contiguous => rec.slice(x, &Slice::new([1], [-1], [1])),
            Case::Reversed | Case::ReversedOdd => {
                rec.slice(x, &Slice::new([-1], [i64::MIN], [-1]).axes([1]))
            }
            Case::Step2 => rec.slice(x, &Slice::new([0], [i64::MAX], [2]).axes([1])),
            Case::Mix => rec.strided_slice(
                x,
                &StridedSlice::new([0, 1, 0, 0], [0, 0, 0, 0])
                    .stride([1, 1, 1, -1])
                    .new_axis_mask([1])
                    .shrink_axis_mask([0, 1])
                    .ellipsis_mask([0, 0, 1])
                    .begin_mask([0, 0, 0, 1])
                    .end_mask([0, 0, 0, 1]),
            ),
            Case::BatchToSpace => {
                rec.batch_to_space(x, &BatchToSpace::new([1, 2, 2, 1], [0; 4], [0; 4]))
            }
            Case::SpaceToBatch => {
                rec.space_to_batch(x, &SpaceToBatch::new([1, 2, 2, 1], [0; 4], [0; 4]))
            }
        }
    }
}

fn dtype_of_width(w: u64) -> DType {
    match w {
        1 => DType::U8,
        2 => DType::U16,
        4 => DType::U32,
        _ => DType::U64,
    }
}

/// Flags that take a value, and switches.
const VALUE_FLAGS: [&str; 13] = [
    "--out",
    "--min-mib",
    "--max-mib",
    "--case",
    "--widths",
    "--workgroup-size",
    "--gather-unroll",
    "--rotate-mib",
    "--busy-ms",
    "--cpu-kernels",
    "--f16-conversions",
    "--matmul",
    "--replot",
];
const SWITCHES: [&str; 15] = [
    "--quick",
    "--no-scan",
    "--scan-only",
    "--rnn-only",
    "--matmul-only",
    "--transfer-only",
    "--dtypes-only",
    "--broadcast-only",
    "--reduce-only",
    "--gather-only",
    "--pad-only",
    "--scatter-only",
    "--lines-only",
    "--linear-attention-only",
    "--help",
];

/// Refuses what is not a known flag (a typo would otherwise run the whole benchmark, an
/// hour on a CPU adapter and a device session's budget on a GPU); `--help` lists them.
fn check_args(args: &[String]) {
    let usage = || {
        let values: Vec<String> = VALUE_FLAGS.iter().map(|f| format!("[{f} V]")).collect();
        let switches: Vec<String> = SWITCHES.iter().map(|f| format!("[{f}]")).collect();
        format!(
            "usage: bench {} {}\n(the file's doc comment says what each does)",
            values.join(" "),
            switches.join(" ")
        )
    };
    let mut i = 1;
    while i < args.len() {
        let a = args[i].as_str();
        if a == "--help" || a == "-h" {
            println!("{}", usage());
            std::process::exit(0);
        }
        if VALUE_FLAGS.contains(&a) {
            if i + 1 >= args.len() {
                eprintln!("error: bench: {a} needs a value\n{}", usage());
                std::process::exit(2);
            }
            i += 2;
        } else if SWITCHES.contains(&a) {
            i += 1;
        } else {
            eprintln!(
                "error: bench: unknown argument '{}'\n{}",
                a.escape_debug(),
                usage()
            );
            std::process::exit(2);
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    check_args(&args);
    let flag = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    // A run of a subset (`--case`, `--no-scan`) would replace the committed full results in
    // bench/ with partial ones: those runs write under target/ unless given `--out`.
    let subset = flag("--case").is_some()
        || flag("--widths").is_some()
        || flag("--min-mib").is_some()
        || args.iter().any(|a| a == "--no-scan");
    let default_out = if subset {
        "target/bench-subset"
    } else {
        "bench"
    };
    let out_dir = std::path::PathBuf::from(flag("--out").unwrap_or_else(|| default_out.into()));
    let quick = args.iter().any(|a| a == "--quick");
    let max_mib: u64 = flag("--max-mib")
        .and_then(|v| v.parse().ok())
        .unwrap_or(if quick { 16 } else { 256 });
    std::fs::create_dir_all(&out_dir).unwrap();
    if let Some(file) = flag("--replot") {
        // Draws the plot of a results.json measured elsewhere (a machine without fonts).
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&file).unwrap()).unwrap();
        let records = doc["results"].as_array().cloned().unwrap_or_default();
        let adapter = doc["adapter"].as_str().unwrap_or("?");
        let path = std::path::Path::new(&file).with_file_name("throughput.png");
        plot(&path, adapter, &records).unwrap();
        println!("wrote {}", path.display());
        return;
    }

    let ctx = Context::new_blocking(ContextOptions {
        workgroup_size: flag("--workgroup-size").map(|v| v.parse().expect("--workgroup-size N")),
        gather_unroll: flag("--gather-unroll").map(|v| v.parse().expect("--gather-unroll N")),
        cpu_kernels: flag("--cpu-kernels").map(|v| v == "on"),
        native_f16_conversions: flag("--f16-conversions").map(|v| v == "built-in"),
        matmul: flag("--matmul").map(|v| match v.as_str() {
            "by-shape" => MatMulChoice::ByShape,
            "measure" => MatMulChoice::Measure,
            name => MatMulChoice::Always(
                MatMulKernel::ALL
                    .into_iter()
                    .find(|k| k.name() == name)
                    .expect("--matmul by-shape|measure|tiles|rows|blocks"),
            ),
        }),
        ..Default::default()
    })
    .expect("no GPU adapter");
    let info = ctx.adapter_info().clone();
    let adapter = format!("{} ({:?}, {})", info.name, info.backend, info.driver_info);
    let mut timer = Timer::new(&ctx);
    println!(
        "adapter: {adapter}\ntiming: {}\nworkgroup size: {}\ngather unroll: {}\nCPU kernels: {}\nMatMul kernels: {:?}\nf16 conversions: {}\n",
        timer.method(),
        ctx.workgroup_size(),
        ctx.gather_unroll(),
        ctx.cpu_kernels(),
        ctx.matmul_choice(),
        match ctx.native_f16_conversions() {
            true => "built-in",
            false => "integer",
        }
    );
    spin_up(&ctx);
    // Copies queued ahead of each timed submission (`--busy-ms`, default 30 on GPUs): the host's
    // recording and its work between measurements idle the device, and on the H200 even a
    // launch-bound 4 KiB copy took 2.1 us in the table's first rows and 3.9-4.5 us later in
    // the same run, as if its clocks had fallen in between.
    let preload_margin = flag("--busy-ms").map_or(
        if info.device_type == wgpu::DeviceType::Cpu {
            0.0
        } else {
            0.03
        },
        |v| v.parse::<f64>().expect("--busy-ms N") / 1e3,
    );
    timer.keep_clocks(&ctx, preload_margin);
    let preload_margin = if timer.preload.is_some() {
        preload_margin
    } else {
        0.0
    };
    println!(
        "ahead of each timed submission: copies for the host's recording time and {} ms more\n",
        preload_margin * 1e3
    );
    let ceiling_bytes = (64u64 << 20).min(max_mib << 20).min(ctx.binding_limit()) & !15;
    let ceiling = ceilings(&ctx, &timer, ceiling_bytes);

    let mut sizes = Vec::new();
    // `--min-mib N` starts the sizes there (the sizes stay 4 KiB times powers of 4).
    let min_bytes = flag("--min-mib").map_or(0, |v| v.parse::<u64>().expect("--min-mib N") << 20);
    let mut s = 4u64 << 10;
    while s < min_bytes {
        s *= 4;
    }
    while s <= max_mib << 20 {
        sizes.push(s);
        s *= 4;
    }
    let mut records = Vec::new();
    if args.iter().any(|a| a == "--scan-only") {
        scan_report(&ctx, &timer, quick, &adapter, &out_dir);
        return;
    }
    if args.iter().any(|a| a == "--dtypes-only") {
        dtype_bandwidth(&ctx, &timer, &adapter, quick, &out_dir);
        return;
    }
    if args.iter().any(|a| a == "--broadcast-only") {
        broadcast_bandwidth(&ctx, &timer, &adapter, &out_dir);
        return;
    }
    if args.iter().any(|a| a == "--reduce-only") {
        reduce_bandwidth(&ctx, &timer, &adapter, &out_dir);
        return;
    }
    if args.iter().any(|a| a == "--gather-only") {
        gather_bandwidth(&ctx, &timer, &adapter, &out_dir);
        return;
    }
    if args.iter().any(|a| a == "--pad-only") {
        pad_bandwidth(&ctx, &timer, &adapter, &out_dir);
        return;
    }
    if args.iter().any(|a| a == "--scatter-only") {
        scatter_bandwidth(&ctx, &timer, &adapter, &out_dir);
        return;
    }
    if args.iter().any(|a| a == "--lines-only") {
        split_lines(&ctx, &adapter, &out_dir);
        return;
    }
    if args.iter().any(|a| a == "--linear-attention-only") {
        linear_attention_step(&ctx, &timer);
        print_matmul_measurements(&ctx);
        return;
    }
    if args.iter().any(|a| a == "--matmul-only") {
        matmul_kernels(&ctx);
        emulated_matmul_kernels(&ctx);
        sixteen_bit_products(&ctx, &timer, quick);
        return;
    }
    if args.iter().any(|a| a == "--transfer-only") {
        transfers(&ctx, max_mib);
        return;
    }
    if args.iter().any(|a| a == "--rnn-only") {
        // Prints the RNN table only (no file written).
        rnn_cells(&ctx, &timer, quick);
        print_matmul_measurements(&ctx);
        return;
    }
    println!(
        "ceiling: the ratio's bound where memory moves whole 32-byte sectors (bytes counted over bytes moved)\n"
    );
    // The footprint the cold measurements rotate through, well beyond the last-level cache
    // of the GPUs we measure (the H100's and H200's L2 hold 50 MiB).
    let rotate_bytes: u64 = flag("--rotate-mib")
        .map(|v| v.parse::<u64>().expect("--rotate-mib N") << 20)
        .unwrap_or(256 << 20);
    println!(
        "warm: every run on the same buffers (from 16 MiB up, a run's input and output may still be\n\
         in the last-level cache from the run before); cold: runs rotate through copies of the\n\
         buffers spanning {} MiB, so each run reads and writes memory no recent run touched\n",
        rotate_bytes >> 20
    );
    // The reference pair: made once, before any case's buffers, as large as the largest
    // output (odd-row cases round up a row).
    let reference_bytes = sizes.last().map_or(4, |&s| s + (64 << 10)) as usize;
    let reference = (
        Tensor::uninit(&ctx, DType::U8, &[reference_bytes]).unwrap(),
        Tensor::uninit(&ctx, DType::U8, &[reference_bytes]).unwrap(),
    );
    let probe_at_start = timer.median(&ctx, 256, 7, &mut |rec| {
        rec.copy_bytes(&reference.0, 0, &reference.1, 0, PROBE_BYTES)
            .unwrap()
    });
    println!(
        "probe (a {PROBE_BYTES}-byte copy, launch-bound) before the table: {:.2} us; the probe column \
         times it in each measurement's submissions\n",
        probe_at_start * 1e6
    );
    println!(
        "copy: the copy of the output's bytes between two buffers made for it; own copy: the same\n\
         bytes from the op's input into its output; reference: between two buffers made before the\n\
         table; all three in the op's submissions. to best: the op over the fastest of the three\n\
         (the target's measure). cmds, bufs: dispatches and buffer copies recorded, and buffers\n\
         created, by one run of the op (its output comes back from the pool: 0 buffers); probe: us\n\
         per run of the probe in the same submissions\n"
    );
    println!(
        "{:<26} {:>2} {:>10} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>10} {:>10} {:>7} {:>8} {:>5} {:>5} {:>6}",
        "case",
        "w",
        "in bytes",
        "GB/s",
        "copy GB/s",
        "ratio",
        "own copy",
        "reference",
        "to best",
        "cold GB/s",
        "cold copy",
        "ratio",
        "ceiling",
        "cmds",
        "bufs",
        "probe"
    );
    let only = flag("--case");
    // Element widths to run (`--widths 1,4`), all four by default.
    let widths: Vec<u64> = flag("--widths").map_or(vec![1, 2, 4, 8], |v| {
        v.split(',')
            .map(|w| w.trim().parse().expect("--widths 1,2,4,8"))
            .collect()
    });
    for case in Case::ALL
        .into_iter()
        .filter(|c| only.as_deref().is_none_or(|o| c.name().contains(o)))
    {
        for &w in &widths {
            for &bytes in &sizes {
                let shape = case.shape(bytes, w);
                let dtype = dtype_of_width(w);
                let n: usize = shape.iter().product();
                let host = HostTensor::from_bytes(dtype, shape.clone(), vec![7u8; n * w as usize])
                    .unwrap();
                let x = Tensor::from_host(&ctx, &host).unwrap();
                // The output's size, from one planned run.
                let probe = ctx.run(|rec| case.record(rec, &x));
                let out = match probe {
                    Ok(t) => t,
                    Err(e) => {
                        println!("{:<26} {w:>2} {:>10} {}", case.name(), n * w as usize, e);
                        records.push(json!({"case": case.name(), "width": w, "input_bytes": n as u64 * w, "error": e.to_string()}));
                        continue;
                    }
                };
                let out_bytes = out.byte_len();
                // Enough runs per measurement to keep the device busy for a while (a discrete
                // GPU lowers its clocks between short bursts), capped for the small sizes.
                let repeat = ((512u64 << 20) / out_bytes.max(1)).clamp(2, 256) as usize;
                let samples = if out_bytes >= 32 << 20 { 5 } else { 7 };
                // Baseline: copy the same number of output bytes between two buffers.
                let (a, b) = (
                    Tensor::uninit(&ctx, DType::U8, &[out_bytes as usize]).unwrap(),
                    Tensor::uninit(&ctx, DType::U8, &[out_bytes as usize]).unwrap(),
                );
                let copy_size = out_bytes.div_ceil(4) * 4;
                // The output's buffer is handed back to each recording's pool before the op runs,
                // so every measured run reuses it, as a graph would, instead of paying for a
                // fresh (zero-initialized) buffer.
                let spare: RefCell<Option<Tensor>> = RefCell::new(None);
                let run_op = |rec: &mut Recorder| {
                    if let Some(t) = spare.borrow_mut().take() {
                        rec.release(t);
                    }
                    *spare.borrow_mut() = Some(case.record(rec, &x).unwrap());
                };
                // Two more copies of the same bytes in the same submissions: from the op's input
                // into its output (the very memory the op touches), and between the pair held
                // since the table began. Where the copies disagree, the buffers or the moment
                // set the speed, not the kernel.
                let own_size = copy_size.min(x.byte_len() & !3);
                let reference_size = copy_size.min(reference.0.byte_len() & !3);
                let times = timer.median_set(
                    &ctx,
                    repeat,
                    samples,
                    &mut [
                        &mut |rec| run_op(rec),
                        &mut |rec| rec.copy_bytes(&a, 0, &b, 0, copy_size).unwrap(),
                        &mut |rec| {
                            let out = spare.borrow();
                            let out = out.as_ref().expect("the op ran first");
                            rec.copy_bytes(&x, 0, out, 0, own_size).unwrap()
                        },
                        &mut |rec| {
                            let (src, dst) = &reference;
                            rec.copy_bytes(src, 0, dst, 0, reference_size).unwrap()
                        },
                        &mut |rec| {
                            let (src, dst) = &reference;
                            rec.copy_bytes(src, 0, dst, 0, PROBE_BYTES).unwrap()
                        },
                    ],
                );
                let (t_op, t_copy) = (times[0], times[1]);
                let moved = 2.0 * out_bytes as f64;
                let (gbs, copy_gbs) = (moved / t_op / 1e9, moved / t_copy / 1e9);
                let own_gbs = 2.0 * own_size as f64 / times[2] / 1e9;
                let reference_gbs = 2.0 * reference_size as f64 / times[3] / 1e9;
                let best_copy_gbs = copy_gbs.max(own_gbs).max(reference_gbs);
                let probe_us = times[4] * 1e6;
                // What one steady-state run records: its dispatches and the buffers it creates
                // (0 when its output comes back from the pool, as in the timed runs).
                let before = ctx.stats();
                let again = ctx
                    .run(|rec| {
                        if let Some(t) = spare.borrow_mut().take() {
                            rec.release(t);
                        }
                        case.record(rec, &x)
                    })
                    .unwrap();
                let after = ctx.stats();
                let dispatches = after.dispatches - before.dispatches;
                let copies = after.copies - before.copies;
                let buffers_created = after.buffers_created - before.buffers_created;
                drop(again);
                let cold = (out_bytes >= COLD_FROM).then(|| {
                    let sets = rotation_sets(rotate_bytes, n as u64 * w + out_bytes);
                    if sets == 1 {
                        return (t_op, t_copy, sets);
                    }
                    let (t_op, t_copy) =
                        rotating_pair(&ctx, &timer, case, &x, &a, &b, sets, repeat, samples);
                    (t_op, t_copy, sets)
                });
                let cold_text = match cold {
                    Some((t_op, t_copy, _)) => format!(
                        "{:>10.2} {:>10.2} {:>7.2}",
                        moved / t_op / 1e9,
                        moved / t_copy / 1e9,
                        t_copy / t_op
                    ),
                    None => format!("{:>10} {:>10} {:>7}", "-", "-", "-"),
                };
                println!(
                    "{:<26} {w:>2} {:>10} {gbs:>10.2} {copy_gbs:>10.2} {:>7.2} {own_gbs:>10.2} {reference_gbs:>10.2} {:>7.2} {cold_text} {:>8.2} {:>5} {buffers_created:>5} {probe_us:>6.2}",
                    case.name(),
                    n * w as usize,
                    gbs / copy_gbs,
                    gbs / best_copy_gbs,
                    case.sector_ceiling(),
                    dispatches + copies
                );
                let mut record = json!({
                    "case": case.name(), "width": w, "input_shape": shape, "input_bytes": n as u64 * w,
                    "output_bytes": out_bytes, "seconds": t_op, "copy_seconds": t_copy,
                    "gb_per_s": gbs, "copy_gb_per_s": copy_gbs, "ratio_to_copy": gbs / copy_gbs,
                    "own_copy_gb_per_s": own_gbs, "reference_copy_gb_per_s": reference_gbs,
                    "ratio_to_best_copy": gbs / best_copy_gbs,
                    "sector_ceiling": case.sector_ceiling(),
                    "dispatches_per_run": dispatches, "copies_per_run": copies, "buffers_created_per_run": buffers_created,
                    "probe_us": probe_us,
                });
                if let Some((t_op, t_copy, sets)) = cold {
                    record["cold"] = json!({
                        "buffer_sets": sets, "seconds": t_op, "copy_seconds": t_copy,
                        "gb_per_s": moved / t_op / 1e9, "copy_gb_per_s": moved / t_copy / 1e9,
                        "ratio_to_copy": t_copy / t_op,
                    });
                }
                records.push(record);
            }
        }
    }
    let results = json!({"adapter": adapter, "timing": timer.method(), "workgroup_size": ctx.workgroup_size(), "preload_margin_ms": preload_margin * 1e3, "probe_us_before_table": probe_at_start * 1e6, "copy_ceilings": ceiling, "bytes_counted": "read + written", "results": records});
    std::fs::write(
        out_dir.join("results.json"),
        serde_json::to_string_pretty(&results).unwrap(),
    )
    .unwrap();
    if let Err(e) = plot(&out_dir.join("throughput.png"), &adapter, &records) {
        // e.g. no font on a bare machine; `--replot results.json` draws it elsewhere.
        let _ = std::fs::remove_file(out_dir.join("throughput.png"));
        println!("plot skipped: {e}");
    }

    if args.iter().any(|a| a == "--no-scan") {
        return;
    }
    scan_report(&ctx, &timer, quick, &adapter, &out_dir);
    println!(
        "\nwrote {}/results.json, throughput.png, scan.json",
        out_dir.display()
    );
}

/// Output size from which the data-movement cases are also measured cold.
const COLD_FROM: u64 = 1 << 20;

/// Buffer sets a cold measurement rotates through: enough that their footprint spans
/// `rotate_bytes`, so a set is used again only after that much other memory was touched.
fn rotation_sets(rotate_bytes: u64, footprint: u64) -> usize {
    rotate_bytes.div_ceil(footprint.max(1)).clamp(1, 128) as usize
}

/// `case` on `x` against the copy of `a` into `b`, as `Timer::median_pair` times them, but each
/// run on the next of `sets` copies of its input and output (the copy likewise), so no run
/// finds its bytes in a cache from the runs just before.
#[allow(clippy::too_many_arguments)]
fn rotating_pair(
    ctx: &Context,
    timer: &Timer,
    case: Case,
    x: &Tensor,
    a: &Tensor,
    b: &Tensor,
    sets: usize,
    repeat: usize,
    samples: usize,
) -> (f64, f64) {
    let like = |t: &Tensor| {
        let copy = Tensor::uninit(ctx, t.dtype(), t.shape()).unwrap();
        ctx.run(|rec| rec.copy_bytes(t, 0, &copy, 0, t.byte_len().div_ceil(4) * 4))
            .unwrap();
        copy
    };
    let inputs: Vec<Tensor> = (0..sets).map(|_| like(x)).collect();
    let pairs: Vec<(Tensor, Tensor)> = (0..sets)
        .map(|_| (like(a), Tensor::uninit(ctx, b.dtype(), b.shape()).unwrap()))
        .collect();
    let copy_size = a.byte_len().div_ceil(4) * 4;
    // The outputs of the last `sets` runs stay held; the oldest is handed back to the pool
    // just before a run, which then writes into it.
    let mut outputs = std::collections::VecDeque::with_capacity(sets);
    let (mut op_run, mut copy_run) = (0usize, 0usize);
    timer.median_pair(
        ctx,
        repeat,
        samples,
        &mut |rec| {
            if outputs.len() == sets {
                rec.release(outputs.pop_front().unwrap());
            }
            outputs.push_back(case.record(rec, &inputs[op_run % sets]).unwrap());
            op_run += 1;
        },
        &mut |rec| {
            let (a, b) = &pairs[copy_run % sets];
            rec.copy_bytes(a, 0, b, 0, copy_size).unwrap();
            copy_run += 1;
        },
    )
}

/// How fast this adapter copies through a compute shader: one 32-bit word per invocation, and
/// one `vec4<u32>` (16 bytes) per invocation, against `copy_buffer_to_buffer`, all of the same
/// bytes. The kernels' own ceiling: they move words (4-byte loads), never vectors.
fn ceilings(ctx: &Context, timer: &Timer, bytes: u64) -> serde_json::Value {
    const WGSL: &str = "
        @group(0) @binding(0) var<storage, read> src: array<T>;
        @group(0) @binding(1) var<storage, read_write> dst: array<T>;
        @compute @workgroup_size(256)
        fn main(@builtin(workgroup_id) g: vec3<u32>, @builtin(local_invocation_index) l: u32) {
            let i = (g.x + 32768u * g.y) * 256u + l;
            if i < arrayLength(&dst) { dst[i] = src[i]; }
        }";
    let a = Tensor::uninit(ctx, DType::U8, &[bytes as usize]).unwrap();
    let b = Tensor::uninit(ctx, DType::U8, &[bytes as usize]).unwrap();
    let repeat = ((1u64 << 30) / bytes).clamp(2, 64) as usize;
    let median = |t: &mut dyn FnMut() -> f64| {
        t();
        let mut v: Vec<f64> = (0..7).map(|_| t() / repeat as f64).collect();
        v.sort_by(f64::total_cmp);
        v[3]
    };
    let copy = median(&mut || {
        timer.time_raw(ctx, &mut |enc| {
            for _ in 0..repeat {
                enc.copy_buffer_to_buffer(&a.buffers()[0], 0, &b.buffers()[0], 0, bytes);
            }
        })
    });
    let mut out = vec![("copy_buffer_to_buffer".to_string(), copy)];
    for (ty, width) in [("u32", 4u64), ("vec4<u32>", 16)] {
        let module = ctx
            .device()
            .create_shader_module(wgpu::ShaderModuleDescriptor {
                label: None,
                source: wgpu::ShaderSource::Wgsl(WGSL.replace("<T>", &format!("<{ty}>")).into()),
            });
        let pipeline = ctx
            .device()
            .create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: None,
                layout: None,
                module: &module,
                entry_point: Some("main"),
                compilation_options: Default::default(),
                cache: None,
            });
        let group = ctx.device().create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry {
                    binding: 0,
                    resource: a.buffers()[0].as_entire_binding(),
                },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: b.buffers()[0].as_entire_binding(),
                },
            ],
        });
        let groups = (bytes / width).div_ceil(256);
        let (x, y) = (groups.min(32768) as u32, groups.div_ceil(32768) as u32);
        let t = median(&mut || {
            timer.time_raw(ctx, &mut |enc| {
                for _ in 0..repeat {
                    let mut pass = enc.begin_compute_pass(&Default::default());
                    pass.set_pipeline(&pipeline);
                    pass.set_bind_group(0, &group, &[]);
                    pass.dispatch_workgroups(x, y, 1);
                }
            })
        });
        out.push((format!("compute shader, one {ty} per invocation"), t));
    }
    println!("copy ceilings, {} MiB (GB/s read + written):", bytes >> 20);
    for (name, t) in &out {
        println!("  {name:<42} {:>8.1}", 2.0 * bytes as f64 / t / 1e9);
    }
    println!();
    serde_json::Value::Array(
        out.iter()
            .map(|(name, t)| json!({"method": name, "bytes": bytes, "seconds": t, "gb_per_s": 2.0 * bytes as f64 / t / 1e9}))
            .collect(),
    )
}

/// About a second of large copies before the first measurement, so that a discrete GPU has left
/// its idle clocks.
fn spin_up(ctx: &Context) {
    let bytes = (256u64 << 20).min(ctx.max_buffer_size()) as usize & !3;
    let a = Tensor::uninit(ctx, DType::U8, &[bytes]).unwrap();
    let b = Tensor::uninit(ctx, DType::U8, &[bytes]).unwrap();
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < 1.0 {
        ctx.run(|rec| {
            for _ in 0..8 {
                rec.copy_bytes(&a, 0, &b, 0, bytes as u64)?;
            }
            Ok(())
        })
        .unwrap();
        // `run` returns once submitted; wait, or a second of submissions queues far more work.
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
    }
}

fn plot(
    path: &std::path::Path,
    adapter: &str,
    records: &[serde_json::Value],
) -> Result<(), Box<dyn std::error::Error>> {
    use plotters::prelude::*;
    if let Ok(font) = std::fs::read("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf") {
        let font: &'static [u8] = Box::leak(font.into_boxed_slice());
        let _ = plotters::style::register_font("sans-serif", FontStyle::Normal, font);
    }
    let root = BitMapBackend::new(path, (1400, 1000)).into_drawing_area();
    root.fill(&WHITE)?;
    let (title, body) = root.split_vertically(40);
    title
        .titled(
            &format!("wgpu-ops throughput (read + written) on {adapter}"),
            ("sans-serif", 20),
        )
        .ok();
    let areas = body.split_evenly((2, 2));
    let max = records
        .iter()
        .filter_map(|r| r["gb_per_s"].as_f64().zip(r["copy_gb_per_s"].as_f64()))
        .map(|(a, b)| a.max(b))
        .fold(0.1, f64::max);
    for (area, w) in areas.iter().zip([1u64, 2, 4, 8]) {
        let mut chart = ChartBuilder::on(area)
            .caption(format!("{w}-byte elements"), ("sans-serif", 18))
            .margin(10)
            .x_label_area_size(35)
            .y_label_area_size(50)
            .build_cartesian_2d(
                (2f64.powi(12)..2f64.powi(29)).log_scale(),
                (0.005f64..max * 1.5).log_scale(),
            )?;
        chart
            .configure_mesh()
            .x_desc("input bytes")
            .y_desc("GB/s")
            .y_label_formatter(&|v| format!("{v:.3}"))
            .x_label_formatter(&|v| {
                if *v >= 1048576.0 {
                    format!("{:.0}M", v / 1048576.0)
                } else {
                    format!("{:.0}K", v / 1024.0)
                }
            })
            .draw()?;
        let mut series: Vec<(String, Vec<(f64, f64)>)> = Case::ALL
            .iter()
            .map(|c| (c.name().to_string(), Vec::new()))
            .collect();
        series.push(("plain copy (x[:, ::-1] sizes)".into(), Vec::new()));
        for r in records.iter().filter(|r| r["width"].as_u64() == Some(w)) {
            let (Some(x), Some(y)) = (r["input_bytes"].as_f64(), r["gb_per_s"].as_f64()) else {
                continue;
            };
            if let Some(s) = series.iter_mut().find(|s| r["case"].as_str() == Some(&s.0)) {
                s.1.push((x, y));
            }
            if r["case"].as_str() == Some(Case::Reversed.name()) {
                let last = series.len() - 1;
                series[last]
                    .1
                    .push((x, r["copy_gb_per_s"].as_f64().unwrap_or(0.0)));
            }
        }
        for (i, (name, points)) in series.into_iter().enumerate() {
            let color = Palette99::pick(i).to_rgba();
            chart
                .draw_series(LineSeries::new(points.clone(), color.stroke_width(2)))?
                .label(name)
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 18, y)], color.stroke_width(2))
                });
            chart.draw_series(
                points
                    .into_iter()
                    .map(|p| Circle::new(p, 3, color.filled())),
            )?;
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .position(SeriesLabelPosition::UpperLeft)
            .draw()?;
    }
    root.present()?;
    Ok(())
}

/// Runs the Scan and RNN benchmarks and writes `scan.json`.
fn scan_report(
    ctx: &Context,
    timer: &Timer,
    quick: bool,
    adapter: &str,
    out_dir: &std::path::Path,
) {
    let scan = scan_overhead(ctx, timer, quick);
    let rnn = rnn_cells(ctx, timer, quick);
    let doc = json!({"adapter": adapter, "results": scan, "rnn": rnn});
    std::fs::write(
        out_dir.join("scan.json"),
        serde_json::to_string_pretty(&doc).unwrap(),
    )
    .unwrap();
}

/// A Scan whose body applies `ops` element-wise ops to the state and the scan input.
fn scan_graph(elems: usize, seq: usize, ops: usize) -> Graph {
    let mut body =
        Graph::new()
            .input("s", DType::F32, &[Some(elems)])
            .input("x", DType::F32, &[Some(elems)]);
    let mut prev = "s".to_string();
    for k in 0..ops {
        let op = ["Add", "Mul", "Max", "Sub", "Min"][k % 5];
        body = body.node(
            Node::new(op, format!("op{k}"))
                .inputs([prev.clone(), "x".into()])
                .outputs([format!("v{k}")]),
        );
        prev = format!("v{k}");
    }
    let body = body.output(prev);
    Graph::new()
        .input("s0", DType::F32, &[Some(elems)])
        .input("xs", DType::F32, &[Some(seq), Some(elems)])
        .node(
            Node::new("Scan", "scan")
                .inputs(["s0", "xs"])
                .outputs(["s"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("s")
}

fn scan_overhead(ctx: &Context, timer: &Timer, quick: bool) -> Vec<serde_json::Value> {
    println!("\nScan overhead: time per iteration; scan host = until the Scan's work is submitted; by hand = the same kernels recorded into one command buffer; naive = submit and wait every iteration");
    println!(
        "{:>8} {:>5} {:>4} {:>12} {:>12} {:>12} {:>12} {:>9} {:>9}",
        "elements",
        "iters",
        "ops",
        "scan us/it",
        "scan host",
        "hand us/it",
        "naive us/it",
        "scan/hand",
        "naive/scan"
    );
    let mut out = Vec::new();
    for &elems in &[1usize << 10, 1 << 20] {
        for &seq in &[16usize, 256, 4096] {
            for &ops in &[1usize, 5] {
                // Keep each configuration's work bounded on software adapters.
                if quick && seq > 256 || (elems * seq * ops) > (1 << 30) {
                    continue;
                }
                let g = scan_graph(elems, seq, ops);
                let s0 = HostTensor::from_vec(vec![elems], &vec![0f32; elems]).unwrap();
                let xs = HostTensor::from_vec(vec![seq, elems], &vec![1f32; seq * elems]).unwrap();
                let session = Session::new(ctx, g).unwrap();
                let state = Tensor::from_host(ctx, &s0).unwrap();
                let x = Tensor::from_host(ctx, &xs).unwrap();
                let inputs = vec![
                    ("s0".to_string(), state.clone()),
                    ("xs".to_string(), x.clone()),
                ];
                // Median of three runs: (until the GPU is done, until the work is submitted).
                let wall_and_host = |f: &mut dyn FnMut()| {
                    f(); // warm-up
                    let mut t: Vec<(f64, f64)> = (0..3)
                        .map(|_| {
                            let t = Instant::now();
                            f();
                            let host = t.elapsed().as_secs_f64();
                            ctx.device()
                                .poll(wgpu::PollType::wait_indefinitely())
                                .unwrap();
                            (t.elapsed().as_secs_f64(), host)
                        })
                        .collect();
                    t.sort_by(|a, b| a.0.total_cmp(&b.0));
                    t[1]
                };
                let wall = |f: &mut dyn FnMut()| wall_and_host(f).0;
                let (t_scan, t_scan_host) = wall_and_host(&mut || {
                    session.run_tensors_blocking(inputs.clone()).unwrap();
                });
                let (t_scan, t_scan_host) = (t_scan / seq as f64, t_scan_host / seq as f64);
                // By hand: what the Scan records, written out: copy row t of the scan input
                // into an element buffer, then the body's kernels, reusing buffers.
                let row = Tensor::uninit(ctx, DType::F32, &[elems]).unwrap();
                let row_bytes = (elems * 4) as u64;
                let iteration = |rec: &mut Recorder, s: Tensor, t: usize| -> Tensor {
                    rec.copy_bytes(&x, t as u64 * row_bytes, &row, 0, row_bytes)
                        .unwrap();
                    let mut v = s;
                    for k in 0..ops {
                        let op = ["Add", "Mul", "Max", "Sub", "Min"][k % 5];
                        let next = rec.elementwise(op, &v, Some(&row)).unwrap();
                        rec.release(std::mem::replace(&mut v, next));
                    }
                    v
                };
                let t_hand = wall(&mut || {
                    let mut rec = ctx.recorder();
                    let mut s = ctx
                        .run(|rec| rec.elementwise("Add", &state, Some(&state)))
                        .unwrap();
                    for t in 0..seq {
                        s = iteration(&mut rec, s, t);
                    }
                    pollster::block_on(rec.finish()).unwrap();
                }) / seq as f64;
                // Naive: one submission and one wait per iteration.
                let naive_iters = seq.min(256);
                let t_naive = wall(&mut || {
                    let mut s = state.clone();
                    for t in 0..naive_iters {
                        s = ctx.run(|rec| Ok(iteration(rec, s.clone(), t))).unwrap();
                        ctx.device()
                            .poll(wgpu::PollType::wait_indefinitely())
                            .unwrap();
                    }
                }) / naive_iters as f64;
                let _ = timer;
                println!(
                    "{elems:>8} {seq:>5} {ops:>4} {:>12.1} {:>12.1} {:>12.1} {:>12.1} {:>9.2} {:>9.2}",
                    t_scan * 1e6,
                    t_scan_host * 1e6,
                    t_hand * 1e6,
                    t_naive * 1e6,
                    t_scan / t_hand,
                    t_naive / t_scan
                );
                out.push(json!({"elements": elems, "iterations": seq, "ops": ops, "scan_s_per_iter": t_scan, "scan_host_s_per_iter": t_scan_host, "by_hand_s_per_iter": t_hand, "naive_s_per_iter": t_naive, "scan_over_by_hand": t_scan / t_hand, "naive_over_scan": t_naive / t_scan}));
            }
        }
    }
    out
}

/// The spec's RNN cell, Ht = tanh(X_t Wi^T + H Ri^T + Wbi + Rbi), as a Scan over `steps`.
/// The MatMul kernels `ctx` chose by timing them (`MatMulChoice::Measure`, GPUs' default).
fn print_matmul_measurements(ctx: &Context) {
    let measured = ctx.matmul_measurements();
    if measured.is_empty() {
        println!("\nMatMul kernels: {:?}, none measured", ctx.matmul_choice());
        return;
    }
    println!("\nMatMul kernels measured on this context (us per product):");
    for m in measured {
        let times: Vec<String> = m
            .micros
            .iter()
            .map(|(k, us)| format!("{} {us:.1}", k.name()))
            .collect();
        let s = m.shape;
        println!(
            "  {} x [{}, {}] x [{}, {}] {}: {}; chose {}",
            s.batches,
            s.rows,
            s.k,
            s.k,
            s.n,
            s.dtype,
            times.join(", "),
            m.chosen.name()
        );
    }
}

/// The MatMul kernels timed on the products of recurrent steps (the RNN cell's rows x 256 by
/// 256 x 256 for 1 to 64 rows; LinearAttention's per-head matrix-vector products and outer
/// products at 16 heads of 128), as `MatMulChoice::Measure` times them: microseconds per
/// product, each waiting for the one before, and the kernel the shape rule picks.
/// Uploads (`Tensor::from_host`, until the GPU has the data) and downloads (`to_host`) of
/// 1 MiB up to `max_mib`, as GB/s and as a ratio to the host copying the same bytes into
/// memory it has written before (`copy_from_slice`, the best a transfer through host memory
/// can do). `fresh`: the same copy into newly allocated memory (`Vec::clone`), which bounds a
/// download, whose result is new memory, and on CPU adapters an upload too, whose tensor is.
/// `read_into`: the download into memory the caller reuses (`Tensor::read_into`).
/// Wall time, best of 5 after a warm-up; one direction's bytes.
fn transfers(ctx: &Context, max_mib: u64) {
    println!(
        "{:>8} {:>12} {:>11} {:>12} {:>6} {:>14} {:>6} {:>15} {:>6}",
        "MiB",
        "memcpy GB/s",
        "fresh GB/s",
        "upload GB/s",
        "ratio",
        "download GB/s",
        "ratio",
        "read_into GB/s",
        "ratio"
    );
    let mut mib = 1u64;
    while mib <= max_mib.min(1024) {
        let bytes = (mib << 20) as usize;
        let host = HostTensor {
            dtype: DType::U8,
            shape: vec![bytes],
            data: (0..bytes).map(|i| (i * 7 + i / 4096) as u8).collect(),
        };
        let mut target = vec![0u8; bytes];
        let best = |f: &mut dyn FnMut()| {
            f();
            (0..5)
                .map(|_| {
                    let t = Instant::now();
                    f();
                    t.elapsed().as_secs_f64()
                })
                .fold(f64::INFINITY, f64::min)
        };
        let memcpy = best(&mut || {
            target.copy_from_slice(&host.data);
            std::hint::black_box(&target);
        });
        let fresh = best(&mut || {
            std::hint::black_box(host.data.clone());
        });
        let mut uploaded = None;
        let upload = best(&mut || {
            uploaded = None;
            let t = Tensor::from_host(ctx, &host).expect("upload");
            ctx.device()
                .poll(wgpu::PollType::wait_indefinitely())
                .expect("the upload finishes");
            uploaded = Some(t);
        });
        let t = uploaded.expect("uploaded");
        let mut back = None;
        let download = best(&mut || back = Some(t.to_host_blocking().expect("download")));
        assert!(
            back.is_some_and(|b| b.data == host.data),
            "{mib} MiB came back changed"
        );
        let read_into = best(&mut || t.read_into_blocking(&mut target).expect("download"));
        assert!(target == host.data, "{mib} MiB read into memory changed");
        let gbs = |s: f64| bytes as f64 / s / 1e9;
        println!(
            "{mib:>8} {:>12.2} {:>11.2} {:>12.2} {:>6.2} {:>14.2} {:>6.2} {:>15.2} {:>6.2}",
            gbs(memcpy),
            gbs(fresh),
            gbs(upload),
            memcpy / upload,
            gbs(download),
            memcpy / download,
            gbs(read_into),
            memcpy / read_into
        );
        mib *= 4;
    }
}

fn matmul_kernels(ctx: &Context) {
    println!(
        "{:<28} {:>10} {:>10} {:>10} {:>8} {:>8}",
        "f32 product", "tiles us", "rows us", "blocks us", "fastest", "by shape"
    );
    let mut shapes: Vec<(String, [u64; 4])> = [1, 2, 4, 8, 16, 32, 64]
        .iter()
        .map(|&rows| (format!("[{rows},256]x[256,256]"), [1, rows, 256, 256]))
        .collect();
    shapes.push(("16 x [1,128]x[128,128]".into(), [16, 1, 128, 128]));
    shapes.push(("16 x [128,1]x[1,128]".into(), [16, 128, 128, 1]));
    for (name, shape) in shapes {
        match wgpu_ops::kernels::matmul::measure_matmul(ctx, DType::F32, shape) {
            Ok((m, by_shape)) => {
                let us = |kernel| kernel_micros(&m, kernel);
                println!(
                    "{name:<28} {:>10} {:>10} {:>10} {:>8} {:>8}",
                    us(MatMulKernel::Tiles),
                    us(MatMulKernel::Rows),
                    us(MatMulKernel::Blocks),
                    m.chosen.name(),
                    by_shape.name()
                );
            }
            Err(e) => println!("{name:<28} error: {e}"),
        }
    }
}

/// The time a measurement gives `kernel`, or "-" where it did not time it.
fn kernel_micros(m: &wgpu_ops::gpu::MatMulMeasurement, kernel: MatMulKernel) -> String {
    m.micros
        .iter()
        .find(|(k, _)| *k == kernel)
        .map_or("-".to_string(), |(_, us)| format!("{us:.1}"))
}

/// The MatMul kernels on f64 and i64 emulated on u32 pairs (a context of the same kernel set
/// without the 64-bit features, as browsers and Metal give it): recurrent steps' products and
/// the skinny ones of scikit-learn's distance Scans (queries x features against features x
/// points), where the blocks kernel has no emulated variant.
fn emulated_matmul_kernels(ctx: &Context) {
    let emulated = Context::new_blocking(ContextOptions {
        native_64_bit: Some(false),
        cpu_kernels: Some(ctx.cpu_kernels()),
        workgroup_size: Some(ctx.workgroup_size()),
        ..Default::default()
    })
    .expect("a second context on the adapter");
    println!(
        "\n{:<28} {:>5} {:>10} {:>10} {:>8} {:>8}",
        "emulated 64-bit product", "dtype", "tiles us", "rows us", "fastest", "by shape"
    );
    let shapes: [(&str, [u64; 4]); 8] = [
        ("[1,256]x[256,256]", [1, 1, 256, 256]),
        ("[16,256]x[256,256]", [1, 16, 256, 256]),
        ("[64,256]x[256,256]", [1, 64, 256, 256]),
        ("[640,3]x[3,3]", [1, 640, 3, 3]),
        ("[1000,4]x[4,100]", [1, 1000, 100, 4]),
        ("[1000,16]x[16,100]", [1, 1000, 100, 16]),
        ("[1000,32]x[32,100]", [1, 1000, 100, 32]),
        ("[100,100]x[100,100]", [1, 100, 100, 100]),
    ];
    for (name, shape) in shapes {
        for dtype in [DType::F64, DType::I64] {
            match wgpu_ops::kernels::matmul::measure_matmul(&emulated, dtype, shape) {
                Ok((m, by_shape)) => {
                    let us = |kernel| kernel_micros(&m, kernel);
                    println!(
                        "{name:<28} {:>5} {:>10} {:>10} {:>8} {:>8}",
                        dtype.name(),
                        us(MatMulKernel::Tiles),
                        us(MatMulKernel::Rows),
                        m.chosen.name(),
                        by_shape.name()
                    );
                }
                Err(e) => println!("{name:<28} {dtype} error: {e}"),
            }
        }
    }
}

/// f16 and bf16 products: the kernel reading the packed words (one dispatch), against the same
/// product through f32 copies (cast, cast, f32 product, cast back: how 16-bit products ran
/// before) and against the f32 product of the same shape, all in this process.
fn sixteen_bit_products(ctx: &Context, timer: &Timer, quick: bool) {
    println!(
        "\n16-bit products (us per product, {}; direct: one dispatch on the packed words; \
         via f32: cast, cast, f32 product, cast)",
        timer.method()
    );
    println!(
        "{:<28} {:>5} {:>10} {:>10} {:>10} {:>14} {:>12}",
        "product", "dtype", "direct", "via f32", "f32", "via f32/direct", "f32/direct"
    );
    let shapes: [(usize, usize, usize); 4] = [
        (1, 256, 256),
        (64, 256, 256),
        (1, 4096, 4096),
        (64, 1024, 1024),
    ];
    for (m, k, n) in shapes {
        for dtype in [DType::F16, DType::BF16] {
            let make = |shape: &[usize], seed: u32, d: DType| {
                let v: Vec<f32> = (0..shape.iter().product::<usize>())
                    .map(|i| {
                        ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32
                            / 1000.0
                            - 0.5
                    })
                    .collect();
                let host = HostTensor::from_vec(shape.to_vec(), &v).unwrap();
                let t = Tensor::from_host(ctx, &host).unwrap();
                if d == DType::F32 {
                    t
                } else {
                    ctx.run(|rec| rec.cast(&t, d)).unwrap()
                }
            };
            let (a, b) = (make(&[m, k], 1, dtype), make(&[k, n], 2, dtype));
            let (a32, b32) = (make(&[m, k], 1, DType::F32), make(&[k, n], 2, DType::F32));
            let out = Tensor::uninit(ctx, dtype, &[m, n]).unwrap();
            let out32 = Tensor::uninit(ctx, DType::F32, &[m, n]).unwrap();
            let mut direct = |rec: &mut Recorder| {
                rec.matmul_to(&a, &b, Out::into("bench", &out)).unwrap();
            };
            let mut via = |rec: &mut Recorder| {
                let (wa, wb) = (
                    rec.cast(&a, DType::F32).unwrap(),
                    rec.cast(&b, DType::F32).unwrap(),
                );
                let wide = rec.matmul(&wa, &wb).unwrap();
                rec.cast_to(&wide, dtype, Out::into("bench", &out)).unwrap();
                for t in [wa, wb, wide] {
                    rec.release(t);
                }
            };
            let mut wide = |rec: &mut Recorder| {
                rec.matmul_to(&a32, &b32, Out::into("bench", &out32))
                    .unwrap();
            };
            // About 20 ms of work per measurement, judged by one product.
            let once = timer.time(ctx, &mut direct).max(1e-6);
            let repeat = ((0.02 / once) as usize).clamp(1, 256);
            let samples = if quick { 3 } else { 7 };
            let (t_direct, t_via) = timer.median_pair(ctx, repeat, samples, &mut direct, &mut via);
            let t_wide = timer.median(ctx, repeat, samples, &mut wide);
            println!(
                "{:<28} {:>5} {:>10.1} {:>10.1} {:>10.1} {:>14.2} {:>12.2}",
                format!("[{m},{k}]x[{k},{n}]"),
                dtype.name(),
                t_direct * 1e6,
                t_via * 1e6,
                t_wide * 1e6,
                t_via / t_direct,
                t_wide / t_direct
            );
        }
    }
}

fn rnn_graph(batch: usize, hidden: usize, steps: usize) -> Graph {
    let w = |n: usize, seed: u32| -> Vec<f32> {
        (0..n)
            .map(|i| {
                ((i as u32).wrapping_mul(2654435761).wrapping_add(seed) % 1000) as f32 / 1000.0
                    - 0.5
            })
            .collect()
    };
    let body = Graph::new()
        .input("H", DType::F32, &[Some(batch), Some(hidden)])
        .input("X", DType::F32, &[Some(batch), Some(hidden)])
        .constant(
            "WiT",
            HostTensor::from_vec(vec![hidden, hidden], &w(hidden * hidden, 1)).unwrap(),
        )
        .constant(
            "RiT",
            HostTensor::from_vec(vec![hidden, hidden], &w(hidden * hidden, 2)).unwrap(),
        )
        .constant(
            "Wbi",
            HostTensor::from_vec(vec![hidden], &w(hidden, 3)).unwrap(),
        )
        .constant(
            "Rbi",
            HostTensor::from_vec(vec![hidden], &w(hidden, 4)).unwrap(),
        )
        .node(
            Node::new("MatMul", "t1")
                .inputs(["X", "WiT"])
                .outputs(["t1"]),
        )
        .node(
            Node::new("MatMul", "t2")
                .inputs(["H", "RiT"])
                .outputs(["t2"]),
        )
        .node(Node::new("Add", "t3").inputs(["t1", "t2"]).outputs(["t3"]))
        .node(Node::new("Add", "t4").inputs(["t3", "Wbi"]).outputs(["t4"]))
        .node(Node::new("Add", "t5").inputs(["t4", "Rbi"]).outputs(["t5"]))
        .node(Node::new("Tanh", "ht").inputs(["t5"]).outputs(["Ht"]))
        .output("Ht")
        .output("Ht");
    Graph::new()
        .input("H0", DType::F32, &[Some(batch), Some(hidden)])
        .input("Xs", DType::F32, &[Some(steps), Some(batch), Some(hidden)])
        .node(
            Node::new("Scan", "rnn")
                .inputs(["H0", "Xs"])
                .outputs(["Hn", "Y"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("Hn")
        .output("Y")
}

/// A second context on `ctx`'s adapter, with its workgroup size and kernel set unless
/// `options` says otherwise, for comparisons in the same process.
fn same_adapter_as(ctx: &Context, options: ContextOptions) -> Context {
    Context::new_blocking(ContextOptions {
        adapter_name: Some(ctx.adapter_info().name.clone()),
        backends: Some(ctx.adapter_info().backend.into()),
        workgroup_size: Some(ctx.workgroup_size()),
        cpu_kernels: options.cpu_kernels.or(Some(ctx.cpu_kernels())),
        ..options
    })
    .unwrap()
}

fn rnn_cells(ctx: &Context, timer: &Timer, quick: bool) -> Vec<serde_json::Value> {
    let steps = if quick { 64 } else { 512 };
    let same_adapter = |cpu_kernels: bool, fuse: bool| {
        let options = ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            fuse_elementwise: Some(fuse),
            ..Default::default()
        };
        same_adapter_as(ctx, options)
    };
    // And a fourth whose Scans copy their elements in and out instead of binding them in
    // place (how steps ran before).
    let copied = same_adapter_as(
        ctx,
        ContextOptions {
            scan_in_place: Some(false),
            ..Default::default()
        },
    );
    // The same MatMul on a second context with the other kernel set (CPU kernels or not),
    // its samples interleaved with this context's; the whole cell on a third that does not
    // fuse element-wise chains.
    let other = same_adapter(!ctx.cpu_kernels(), ctx.fuse_elementwise());
    let unfused = same_adapter(ctx.cpu_kernels(), false);
    let other_timer = Timer::new(&other);
    let other_kind = if other.cpu_kernels() { "CPU" } else { "GPU" };
    println!("\nRNN cell (hidden 256, {steps} steps) as a Scan, per step: total (until the GPU is done), host (until the last submission returns), GPU (the step's commands timed alone with GPU timestamps and summed: 2 MatMuls, the element-wise part, the scan input's and output's row copies where the elements are copied), dispatches; fused: the second MatMul takes Add -> Add -> Add -> Tanh as its epilogue, with the step's row of X W read in place and h kept as the output's rows (no copy); fused, copied: the same with the row read and h copied into its output row each step; node by node: two MatMuls and four element-wise kernels");
    println!(
        "{:>6} {:>13} {:>10} {:>10} {:>10} {:>11}",
        "batch", "element-wise", "us/step", "host us", "GPU us", "dispatches"
    );
    let mut cells = Vec::new();
    for batch in [1usize, 64] {
        let hidden = 256;
        let zeros = HostTensor::from_vec(vec![batch, hidden], &vec![0f32; batch * hidden]).unwrap();
        let x = HostTensor::from_vec(
            vec![steps, batch, hidden],
            &vec![0.1f32; steps * batch * hidden],
        )
        .unwrap();
        let mut per_mode = Vec::new();
        for (mode, c) in [
            ("fused", ctx),
            ("fused, copied", &copied),
            ("node by node", &unfused),
        ] {
            let session = Session::new(c, rnn_graph(batch, hidden, steps)).unwrap();
            let inputs = vec![
                ("H0".to_string(), Tensor::from_host(c, &zeros).unwrap()),
                ("Xs".to_string(), Tensor::from_host(c, &x).unwrap()),
            ];
            session.run_tensors_blocking(inputs.clone()).unwrap();
            let before = c.stats().dispatches;
            let runs: Vec<(f64, f64)> = (0..3)
                .map(|_| {
                    let t = Instant::now();
                    session.run_tensors_blocking(inputs.clone()).unwrap();
                    let host = t.elapsed().as_secs_f64();
                    c.device()
                        .poll(wgpu::PollType::wait_indefinitely())
                        .unwrap();
                    (t.elapsed().as_secs_f64(), host)
                })
                .collect();
            let dispatches = (c.stats().dispatches - before) as f64 / 3.0 / steps as f64;
            let median = |mut v: Vec<f64>| {
                v.sort_by(f64::total_cmp);
                v[v.len() / 2]
            };
            let total = median(runs.iter().map(|r| r.0).collect());
            let host = median(runs.iter().map(|r| r.1).collect());
            per_mode.push((mode, total, host, dispatches));
        }
        // The body's commands one at a time, on the GPU.
        let h = Tensor::from_host(ctx, &zeros).unwrap();
        let w_host =
            HostTensor::from_vec(vec![hidden, hidden], &vec![0.5f32; hidden * hidden]).unwrap();
        let w = Tensor::from_host(ctx, &w_host).unwrap();
        let bias = Tensor::from_host(
            ctx,
            &HostTensor::from_vec(vec![hidden], &vec![0.1f32; hidden]).unwrap(),
        )
        .unwrap();
        let row = Tensor::uninit(ctx, DType::F32, &[batch, hidden]).unwrap();
        let row_bytes = (batch * hidden * 4) as u64;
        let xs = Tensor::from_host(ctx, &x).unwrap();
        let gpu = |f: &mut dyn FnMut(&mut Recorder) -> wgpu_ops::Result<Tensor>| {
            timer.median(ctx, 64, 5, &mut |rec| {
                let t = f(rec).unwrap();
                rec.release(t);
            })
        };
        let (matmul, matmul_other) = {
            let (h2, w2) = (
                Tensor::from_host(&other, &zeros).unwrap(),
                Tensor::from_host(&other, &w_host).unwrap(),
            );
            let mut mine = |rec: &mut Recorder| {
                for _ in 0..16 {
                    let t = rec.matmul(&h, &w).unwrap();
                    rec.release(t);
                }
            };
            let mut theirs = |rec: &mut Recorder| {
                for _ in 0..16 {
                    let t = rec.matmul(&h2, &w2).unwrap();
                    rec.release(t);
                }
            };
            timer.time(ctx, &mut mine);
            other_timer.time(&other, &mut theirs);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for _ in 0..5 {
                a.push(timer.time(ctx, &mut mine) / 16.0);
                b.push(other_timer.time(&other, &mut theirs) / 16.0);
            }
            a.sort_by(f64::total_cmp);
            b.sort_by(f64::total_cmp);
            (a[2], b[2])
        };
        // 16 rows: one row of tiles with the GPU kernels, to compare with the few-rows kernel.
        let h16 = Tensor::uninit(ctx, DType::F32, &[16, hidden]).unwrap();
        let tiled = gpu(&mut |rec| rec.matmul(&h16, &w));
        let add = gpu(&mut |rec| rec.elementwise("Add", &h, Some(&h)));
        let tanh = gpu(&mut |rec| rec.elementwise("Tanh", &h, None));
        let chain = {
            let mut p = Program::new(vec![DType::F32; 4], false);
            let s0 = p.push("Add", vec![Arg::Operand(0), Arg::Operand(1)], DType::F32);
            let s1 = p.push("Add", vec![s0.unwrap(), Arg::Operand(2)], DType::F32);
            let s2 = p.push("Add", vec![s1.unwrap(), Arg::Operand(3)], DType::F32);
            p.push("Tanh", vec![s2.unwrap()], DType::F32).unwrap();
            gpu(&mut |rec| rec.program_to(&p, &[&h, &h, &bias, &bias], wgpu_ops::Out::NEW))
        };
        // The second MatMul with the chain as its epilogue (what the fused body records).
        let epilogue = {
            let mut p = Program::new(vec![DType::F32; 4], false);
            let s0 = p.push("Add", vec![Arg::Operand(1), Arg::Operand(0)], DType::F32);
            let s1 = p.push("Add", vec![s0.unwrap(), Arg::Operand(2)], DType::F32);
            let s2 = p.push("Add", vec![s1.unwrap(), Arg::Operand(3)], DType::F32);
            p.push("Tanh", vec![s2.unwrap()], DType::F32).unwrap();
            gpu(&mut |rec| rec.matmul_program_to(&h, &w, &p, &[&h, &bias, &bias], Out::NEW))
        };
        let copy = timer.median(ctx, 64, 5, &mut |rec| {
            rec.copy_bytes(&xs, 0, &row, 0, row_bytes).unwrap()
        });
        let mut modes = Vec::new();
        for (mode, total, host, dispatches) in per_mode {
            let gpu_step = match mode {
                "fused" => matmul + epilogue,
                "fused, copied" => matmul + epilogue + 2.0 * copy,
                _ => 2.0 * matmul + 3.0 * add + tanh,
            };
            println!(
                "{batch:>6} {mode:>13} {:>10.1} {:>10.1} {:>10.1} {:>11.1}",
                total / steps as f64 * 1e6,
                host / steps as f64 * 1e6,
                gpu_step * 1e6,
                dispatches
            );
            modes.push(
                json!({"element_wise": mode, "s_per_step": total / steps as f64,
                "host_s_per_step": host / steps as f64, "gpu_s_per_step_commands_summed": gpu_step,
                "dispatches_per_step": dispatches}),
            );
        }
        cells.push((
            batch,
            hidden,
            steps,
            modes,
            matmul,
            matmul_other,
            add,
            tanh,
            chain,
            copy,
            tiled,
            epilogue,
        ));
    }
    println!("\nThe body's commands alone (GPU us, timestamps): MatMul {other_kind}: the same MatMul with the {other_kind} kernels, samples interleaved; chain: Add -> Add -> Add -> Tanh fused; MatMul+chain: the MatMul with that chain as its epilogue; MatMul 16x: [16, 256] x [256, 256] (one row of 16 x 16 tiles with the GPU kernels)");
    println!(
        "{:>6} {:>10} {:>12} {:>10} {:>10} {:>10} {:>13} {:>10} {:>12}",
        "batch",
        "MatMul",
        format!("MatMul {other_kind}"),
        "Add",
        "Tanh",
        "chain",
        "MatMul+chain",
        "copy row",
        "MatMul 16x"
    );
    let mut out = Vec::new();
    for (
        batch,
        hidden,
        steps,
        modes,
        matmul,
        matmul_other,
        add,
        tanh,
        chain,
        copy,
        tiled,
        epilogue,
    ) in cells
    {
        println!(
            "{batch:>6} {:>10.1} {:>12.1} {:>10.1} {:>10.1} {:>10.1} {:>13.1} {:>10.1} {:>12.1}",
            matmul * 1e6,
            matmul_other * 1e6,
            add * 1e6,
            tanh * 1e6,
            chain * 1e6,
            epilogue * 1e6,
            copy * 1e6,
            tiled * 1e6
        );
        out.push(
            json!({"batch": batch, "hidden": hidden, "steps": steps, "modes": modes,
            "gpu_s_per_command": {"MatMul": matmul, "Add": add, "Tanh": tanh,
                "Add Add Add Tanh fused": chain, "MatMul with Add Add Add Tanh epilogue": epilogue,
                "copy row": copy},
            "gpu_s_matmul_16_rows": tiled,
            "cpu_kernels": ctx.cpu_kernels(), "gpu_s_matmul_other_kernels": matmul_other}),
        );
    }
    out
}

/// The commands of one LinearAttention step (16 heads, d_k = d_v = 128, as the expanded ONNX
/// model's Scan body records them), each timed alone on the GPU: node by node (element-wise
/// chains, MatMul epilogues and in-place transposes off) and fused, with their sums: where a
/// step's time goes.
fn linear_attention_step(ctx: &Context, timer: &Timer) {
    let (h, d) = (16usize, 128usize);
    let t = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|i| ((i % 97) as f32 - 48.0) / 512.0).collect();
        Tensor::from_host(ctx, &HostTensor::from_vec(shape.to_vec(), &v).unwrap()).unwrap()
    };
    let state = t(&[1, h, d, d]);
    let vector = t(&[1, h, d]);
    let column = t(&[1, h, d, 1]);
    let row = t(&[1, h, 1, d]);
    let beta = t(&[1, h, 1, 1]);
    let scale = t(&[1]);
    let gpu = |f: &mut dyn FnMut(&mut Recorder) -> wgpu_ops::Result<Tensor>| {
        timer.median(ctx, 16, 5, &mut |rec| {
            let t = f(rec).unwrap();
            rec.release(t);
        })
    };
    let f32s = |n: usize| vec![DType::F32; n];
    let op = |p: &mut Program, name: &'static str, args: Vec<Arg>| {
        p.push(name, args, DType::F32).unwrap()
    };
    let node_by_node: Vec<(&str, f64)> = vec![
        (
            "Exp (decay) [1,16,128]",
            gpu(&mut |rec| rec.elementwise("Exp", &vector, None)),
        ),
        (
            "Mul (decayed state) [1,16,128,128]",
            gpu(&mut |rec| rec.elementwise("Mul", &state, Some(&column))),
        ),
        (
            "Transpose (state) perm 0,1,3,2",
            gpu(&mut |rec| rec.transpose(&state, Some(&[0, 1, 3, 2]))),
        ),
        (
            "MatMul state^T x k: [16,128,128] x [16,128,1]",
            gpu(&mut |rec| rec.matmul(&state, &column)),
        ),
        (
            "Sub, Mul (delta) [1,16,128]",
            2.0 * gpu(&mut |rec| rec.elementwise("Mul", &vector, Some(&vector))),
        ),
        (
            "MatMul outer: [16,128,1] x [16,1,128]",
            gpu(&mut |rec| rec.matmul(&column, &row)),
        ),
        (
            "Add (state + outer) [1,16,128,128]",
            gpu(&mut |rec| rec.elementwise("Add", &state, Some(&state))),
        ),
        (
            "MatMul q x state: [16,1,128] x [16,128,128]",
            gpu(&mut |rec| rec.matmul(&row, &state)),
        ),
        (
            "Mul (scale) [1,16,128]",
            gpu(&mut |rec| rec.elementwise("Mul", &vector, Some(&vector))),
        ),
    ];
    // The fused step: Exp -> Unsqueeze -> Mul as one program; the transposed state read in
    // place with Sub -> Mul as its epilogue; the outer product with the Add; q x state with
    // the scale.
    let mut decay = Program::new(f32s(2), false);
    let e = op(&mut decay, "Exp", vec![Arg::Operand(1)]);
    op(&mut decay, "Mul", vec![Arg::Operand(0), e]);
    let mut delta = Program::new(f32s(3), false);
    let diff = op(&mut delta, "Sub", vec![Arg::Operand(1), Arg::Operand(0)]);
    op(&mut delta, "Mul", vec![Arg::Operand(2), diff]);
    let mut update = Program::new(f32s(2), false);
    op(&mut update, "Add", vec![Arg::Operand(1), Arg::Operand(0)]);
    let mut read = Program::new(f32s(2), false);
    op(&mut read, "Mul", vec![Arg::Operand(1), Arg::Operand(0)]);
    let fused: Vec<(&str, f64)> = vec![
        (
            "Exp, Mul (decayed state) as one program",
            gpu(&mut |rec| rec.program_to(&decay, &[&state, &column], Out::NEW)),
        ),
        (
            "MatMul state^T x k in place, Sub, Mul epilogue",
            gpu(&mut |rec| {
                rec.matmul_fused_to(
                    &state,
                    &column,
                    [true, false],
                    &delta,
                    &[&column, &beta],
                    Out::NEW,
                )
            }),
        ),
        (
            "MatMul outer, Add epilogue",
            gpu(&mut |rec| {
                rec.matmul_fused_to(&column, &row, [false; 2], &update, &[&state], Out::NEW)
            }),
        ),
        (
            "MatMul q x state, Mul epilogue",
            gpu(&mut |rec| {
                rec.matmul_fused_to(&row, &state, [false; 2], &read, &[&scale], Out::NEW)
            }),
        ),
    ];
    // As the expanded model's step records it now: Exp before the loop, and the decayed state
    // never stored: state^T x k computes it where it reads the operand (a prologue), and the
    // outer product's epilogue computes it again.
    let mut decayed = Program::new(f32s(2), false);
    op(&mut decayed, "Mul", vec![Arg::Operand(0), Arg::Operand(1)]);
    let mut decayed_update = Program::new(f32s(3), false);
    let m = op(
        &mut decayed_update,
        "Mul",
        vec![Arg::Operand(1), Arg::Operand(2)],
    );
    op(&mut decayed_update, "Add", vec![m, Arg::Operand(0)]);
    let shape = [1, h, d, d];
    let prologue: Vec<(&str, f64)> = vec![
        (
            "MatMul state^T x k, Mul prologue, Sub, Mul epilogue",
            gpu(&mut |rec| {
                let state_decayed = Values::Program {
                    program: &decayed,
                    leaves: &[&state, &column],
                    shape: &shape,
                };
                rec.matmul_values_to(
                    [state_decayed, Values::Tensor(&column)],
                    [true, false],
                    Some((&delta, &[&column, &beta])),
                    Out::NEW,
                )
            }),
        ),
        (
            "MatMul outer, Mul, Add epilogue",
            gpu(&mut |rec| {
                rec.matmul_fused_to(
                    &column,
                    &row,
                    [false; 2],
                    &decayed_update,
                    &[&state, &column],
                    Out::NEW,
                )
            }),
        ),
        (
            "MatMul q x state, Mul epilogue",
            gpu(&mut |rec| {
                rec.matmul_fused_to(&row, &state, [false; 2], &read, &[&scale], Out::NEW)
            }),
        ),
    ];
    println!(
        "LinearAttention step commands alone (GPU us, {}):",
        timer.method()
    );
    for (title, rows) in [
        ("node by node", node_by_node),
        ("fused", fused),
        ("fused, decayed state computed where read", prologue),
    ] {
        println!("{title}:");
        let mut sum = 0.0;
        for (name, s) in rows {
            println!("  {name:<50} {:>10.1}", s * 1e6);
            sum += s;
        }
        println!("  {:<50} {:>10.1}", "sum", sum * 1e6);
    }
    // Two lengths: the difference is the cost of a step alone, without what a run costs once.
    let short = linear_attention_op(ctx, 256);
    let long = linear_attention_op(ctx, 1024);
    println!(
        "LinearAttention op, cost of one more step (T=256 -> 1024): {:.1} us",
        (long - short) / 768.0 * 1e6
    );
}

/// The LinearAttention op itself (gated_delta, B=1, T=`steps`, 16 heads of 128) on tensors
/// already on the GPU: wall time until the GPU is done, median of 5 runs after one that builds
/// the pipelines (returned, in seconds). Beside the end-to-end figure of
/// `scripts/linear_attention_vs_onnxruntime.py --op`, which also uploads the inputs and reads
/// the outputs back, it shows what the transfers cost.
fn linear_attention_op(ctx: &Context, steps: usize) -> f64 {
    let (heads, d) = (16usize, 128usize);
    let width = heads * d;
    let f32s = |shape: &[usize]| shape.iter().map(|&n| Some(n)).collect::<Vec<_>>();
    let graph = Graph::new()
        .input("query", DType::F32, &f32s(&[1, steps, width]))
        .input("key", DType::F32, &f32s(&[1, steps, width]))
        .input("value", DType::F32, &f32s(&[1, steps, width]))
        .input("decay", DType::F32, &f32s(&[1, steps, width]))
        .input("beta", DType::F32, &f32s(&[1, steps, heads]))
        .node(
            Node::new("LinearAttention", "la")
                .inputs(["query", "key", "value", "", "decay", "beta"])
                .outputs(["output", "present_state"])
                .attr("q_num_heads", Attr::Int(heads as i64))
                .attr("kv_num_heads", Attr::Int(heads as i64))
                .attr("update_rule", Attr::String("gated_delta".into())),
        )
        .output("output")
        .output("present_state");
    let tensor = |shape: &[usize], scale: f32| {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n)
            .map(|i| ((i % 97) as f32 - 48.0) / 48.0 * scale)
            .collect();
        Tensor::from_host(ctx, &HostTensor::from_vec(shape.to_vec(), &v).unwrap()).unwrap()
    };
    let inputs = vec![
        ("query".to_string(), tensor(&[1, steps, width], 1.0)),
        ("key".to_string(), tensor(&[1, steps, width], 0.088)),
        ("value".to_string(), tensor(&[1, steps, width], 1.0)),
        ("decay".to_string(), tensor(&[1, steps, width], -0.1)),
        ("beta".to_string(), tensor(&[1, steps, heads], 0.5)),
    ];
    let session = Session::new(ctx, graph).unwrap();
    let wait = || {
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap()
    };
    session.run_tensors_blocking(inputs.clone()).unwrap();
    wait();
    let before = ctx.stats().dispatches;
    let mut times: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            session.run_tensors_blocking(inputs.clone()).unwrap();
            wait();
            t.elapsed().as_secs_f64()
        })
        .collect();
    times.sort_by(f64::total_cmp);
    let dispatches = (ctx.stats().dispatches - before) / 5;
    println!(
        "LinearAttention op (gated_delta, B=1, T={steps}, {heads} heads of {d}), inputs on the GPU: {:.2} ms per run, {:.1} us per step, {dispatches} dispatches per run",
        times[2] * 1e3,
        times[2] / steps as f64 * 1e6
    );
    times[2]
}

/// `Add` of two 64 MiB operands (16 MiB with `--quick`) of each numeric dtype into a third,
/// against a plain buffer copy of one operand's bytes measured in the same process: bytes
/// moved per second (3 operands for Add, read and write for the copy) and their ratio.
/// f32 `Add` of a [rows, C] matrix and a broadcast row [C] or column [rows, 1], against the copy
/// of the output's bytes: one run per line, 16 MiB of output. GB/s counts the matrix read and
/// the output written (the broadcast operand is at most 1/C of that).
fn broadcast_bandwidth(ctx: &Context, timer: &Timer, adapter: &str, out_dir: &std::path::Path) {
    let bytes: u64 = 16 << 20;
    let mut lines = vec![
        format!("adapter: {adapter}"),
        format!("timing: {}", timer.method()),
        format!("f32 Add with broadcasting, 16 MiB of output; copy = Recorder::copy_bytes of the output's bytes"),
        format!(
            "{:<26} {:>10} {:>10} {:>7}",
            "operands", "Add GB/s", "copy GB/s", "ratio"
        ),
    ];
    println!("{}", lines.join("\n"));
    let filled = |shape: &[usize]| {
        let n: usize = shape.iter().product();
        let values: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25).collect();
        Tensor::from_host(ctx, &HostTensor::from_vec(shape.to_vec(), &values).unwrap()).unwrap()
    };
    // One line of the table: y = a + b against the copy of y's bytes.
    let mut time_add = |name: String, a: &Tensor, b: &Tensor| {
        let y = Tensor::uninit(ctx, DType::F32, a.shape()).unwrap();
        let out_bytes = y.byte_len();
        let (t_add, t_copy) = timer.median_pair(
            ctx,
            4,
            5,
            &mut |rec| {
                rec.elementwise_to("Add", a, Some(b), Out::into("y", &y))
                    .unwrap();
            },
            &mut |rec| {
                rec.copy_bytes(a, 0, &y, 0, out_bytes).unwrap();
            },
        );
        let (add, copy) = (
            2.0 * out_bytes as f64 / t_add / 1e9,
            2.0 * out_bytes as f64 / t_copy / 1e9,
        );
        let line = format!("{name:<26} {add:>10.2} {copy:>10.2} {:>7.2}", add / copy);
        println!("{line}");
        lines.push(line);
    };
    for cols in [1024usize, 1000] {
        let rows = (bytes / 4) as usize / cols;
        let a = filled(&[rows, cols]);
        for (name, b) in [
            (format!("[{rows}, {cols}] + same"), filled(&[rows, cols])),
            (format!("[{rows}, {cols}] + [{cols}]"), filled(&[cols])),
            (
                format!("[{rows}, {cols}] + [{rows}, 1]"),
                filled(&[rows, 1]),
            ),
        ] {
            time_add(name, &a, &b);
        }
    }
    // Broadcasts whose walks merge to 4 and 6 axes (each element's index found axis by axis).
    for (shape, other) in [
        (vec![16usize, 32, 64, 128], vec![16usize, 1, 64, 1]),
        (vec![4, 8, 4, 8, 32, 128], vec![4, 1, 4, 1, 32, 1]),
    ] {
        time_add(
            format!("{}-axis walk", shape.len()),
            &filled(&shape),
            &filled(&other),
        );
    }
    std::fs::write(out_dir.join("broadcast.txt"), lines.join("\n") + "\n").unwrap();
}

fn reduce_bandwidth(ctx: &Context, timer: &Timer, adapter: &str, out_dir: &std::path::Path) {
    let bytes: u64 = 16 << 20;
    let mut lines = vec![
        format!("adapter: {adapter}"),
        format!("timing: {}", timer.method()),
        format!("f32 ReduceSum over the last axis of 16 MiB; copy = Recorder::copy_bytes of the input's bytes; kernel: a thread per row, a workgroup per row, or chunks of each row folded apart then merged"),
        format!(
            "{:<22} {:>10} {:>12} {:>10} {:>7}",
            "input", "kernel", "Reduce GB/s", "copy GB/s", "ratio"
        ),
    ];
    println!("{}", lines.join("\n"));
    // A line of the table: `reduce` timed against the copy of x's bytes, in GB/s of x's bytes.
    let mut time_rows =
        |label: String, x: &Tensor, n: usize, reduce: &mut dyn FnMut(&mut Recorder)| {
            let rows = x.numel() / n;
            let copy = Tensor::uninit(ctx, DType::F32, x.shape()).unwrap();
            let (t_reduce, t_copy) = timer.median_pair(ctx, 2, 5, reduce, &mut |rec| {
                rec.copy_bytes(x, 0, &copy, 0, bytes).unwrap();
            });
            let (reduce, copy) = (
                bytes as f64 / t_reduce / 1e9,
                2.0 * bytes as f64 / t_copy / 1e9,
            );
            let kernel = match wgpu_ops::kernels::reduce::RowKernel::of_rows(ctx, rows, n) {
                wgpu_ops::kernels::reduce::RowKernel::Thread => "thread".to_string(),
                wgpu_ops::kernels::reduce::RowKernel::Group(256) => "group".to_string(),
                wgpu_ops::kernels::reduce::RowKernel::Group(lanes) => format!("{lanes} lanes"),
                wgpu_ops::kernels::reduce::RowKernel::Chunks(c) => format!("{c} chunks"),
            };
            let line = format!(
                "{label:<22} {kernel:>10} {reduce:>12.2} {copy:>10.2} {:>7.2}",
                reduce / copy
            );
            println!("{line}");
            lines.push(line);
        };
    let matrix = |rows: usize, n: usize| {
        let values: Vec<f32> = (0..rows * n).map(|i| (i % 97) as f32 * 0.25).collect();
        Tensor::from_host(ctx, &HostTensor::from_vec(vec![rows, n], &values).unwrap()).unwrap()
    };
    let n_all = (bytes / 4) as usize;
    for n in [
        1usize << 20,
        1 << 16,
        1 << 14,
        1 << 12,
        1024,
        256,
        64,
        16,
        4,
    ] {
        let rows = n_all / n;
        let x = matrix(rows, n);
        let y = Tensor::uninit(ctx, DType::F32, &[rows]).unwrap();
        time_rows(format!("[{rows}, {n}]"), &x, n, &mut |rec| {
            rec.reduce_to(
                "ReduceSum",
                &x,
                Some(&[1]),
                false,
                false,
                Out::into("y", &y),
            )
            .unwrap();
        });
    }
    // The same rows of values an element-wise program computes where the reduction reads them
    // (a prologue): x * y, y the same matrix or one row broadcast against it.
    let mut mul = Program::new(vec![DType::F32, DType::F32], false);
    mul.push("Mul", vec![Arg::Operand(0), Arg::Operand(1)], DType::F32)
        .unwrap();
    for (rows, n) in [(4096usize, 1024usize), (65536, 64)] {
        let x = matrix(rows, n);
        let row = matrix(1, n).reshaped(&[n]).unwrap();
        let y = Tensor::uninit(ctx, DType::F32, &[rows]).unwrap();
        for (name, other) in [("x * x", &x), ("x * row", &row)] {
            time_rows(format!("[{rows}, {n}] {name}"), &x, n, &mut |rec| {
                rec.reduce_fused_to(
                    "ReduceSum",
                    &mul,
                    &[&x, other],
                    Some(&[1]),
                    false,
                    false,
                    Out::into("y", &y),
                )
                .unwrap();
            });
        }
    }
    std::fs::write(out_dir.join("reduce.txt"), lines.join("\n") + "\n").unwrap();
}

/// f32 CumSum over 16 MiB, from one line of 4 million to 16 384 lines of 256, and along
/// axis 0 of a matrix (lines strided by its width), then f32 TopK over 4 MiB from one line of
/// a million to 4096 lines of 256 (and whole sorts of a line, and a K of 20 000): each line
/// walked by one invocation and split across
/// invocations (contexts like `ctx` with `split_lines` off and on), against the copy of the
/// input's bytes on the same context, with the path the default rule takes.
fn split_lines(ctx: &Context, adapter: &str, out_dir: &std::path::Path) {
    let mut lines = vec![
        format!("adapter: {adapter}"),
        format!(
            "kernel set: {}",
            if ctx.cpu_kernels() { "CPU" } else { "GPU" }
        ),
        "GB/s of the input's bytes read and written (CumSum; TopK: read), against \
         Recorder::copy_bytes of the input's bytes (its bytes read and written); walk: one \
         invocation per line; split: CumSum as a scan, in blocks with the GPU kernels, in \
         chunks with the CPU ones, TopK in chunks merged two by two; rule: what the default \
         picks"
            .to_string(),
        format!(
            "{:<30} {:>6} {:>10} {:>10} {:>10} {:>7} {:>7} {:>7}",
            "op, shape, axis",
            "rule",
            "walk GB/s",
            "split GB/s",
            "copy GB/s",
            "walk/",
            "split/",
            "speedup"
        ),
    ];
    println!("{}", lines.join("\n"));
    let options = |split| ContextOptions {
        cpu_kernels: Some(ctx.cpu_kernels()),
        workgroup_size: Some(ctx.workgroup_size()),
        split_lines: split,
        ..Default::default()
    };
    let contexts = [Some(false), Some(true), None].map(|split| {
        let c = Context::new_blocking(options(split)).unwrap();
        let mut timer = Timer::new(&c);
        let cpu = c.adapter_info().device_type == wgpu::DeviceType::Cpu;
        timer.keep_clocks(&c, if cpu { 0.0 } else { 0.03 });
        (c, timer)
    });
    // A line of the table: `op` (bytes counted: `moved`) on each context against its copy of
    // x's `bytes`, and the dispatches of the default's run.
    let mut row = |label: String,
                   host: &HostTensor,
                   moved: u64,
                   op: &dyn Fn(&mut Recorder, &Tensor)| {
        let bytes = host.data.len() as u64;
        let mut rates = Vec::new();
        for (c, timer) in &contexts {
            let x = Tensor::from_host(c, host).unwrap();
            let copy = Tensor::uninit(c, host.dtype, &host.shape).unwrap();
            let (t_op, t_copy) = timer.median_pair(c, 1, 3, &mut |rec| op(rec, &x), &mut |rec| {
                rec.copy_bytes(&x, 0, &copy, 0, bytes).unwrap()
            });
            let before = c.stats().dispatches;
            let mut rec = c.recorder();
            op(&mut rec, &x);
            pollster::block_on(rec.finish()).unwrap();
            let dispatches = c.stats().dispatches - before;
            rates.push((
                moved as f64 / t_op / 1e9,
                2.0 * bytes as f64 / t_copy / 1e9,
                dispatches,
            ));
        }
        let [(walk, walk_copy, walk_dispatches), (split, split_copy, _), (_, _, rule)] = rates[..]
        else {
            unreachable!()
        };
        let rule = if rule == walk_dispatches {
            "walk"
        } else {
            "split"
        };
        let line = format!(
            "{label:<30} {rule:>6} {walk:>10.2} {split:>10.2} {walk_copy:>10.2} {:>7.3} {:>7.3} {:>7.1}",
            walk / walk_copy,
            split / split_copy,
            split / walk,
        );
        println!("{line}");
        lines.push(line);
    };
    let n = 4usize << 20;
    let values: Vec<f32> = (0..n).map(|i| (i % 97) as f32 * 0.25 - 12.0).collect();
    let shapes: [(&[usize], i64); 7] = [
        (&[1, n], 1),
        (&[16, n / 16], 1),
        (&[256, n / 256], 1),
        (&[4096, n / 4096], 1),
        (&[n / 256, 256], 1),
        (&[n / 16, 16], 0),
        (&[n / 1024, 1024], 0),
    ];
    for (shape, axis) in shapes {
        let host = HostTensor::from_vec(shape.to_vec(), &values).unwrap();
        row(
            format!("CumSum {shape:?}, {axis}"),
            &host,
            2 * 4 * n as u64,
            &|rec, x| {
                let y = rec.cumsum_to(x, axis, false, false, Out::NEW).unwrap();
                rec.release(y);
            },
        );
    }
    // Logits of a vocabulary: pseudo-random, so few elements displace the kept ones.
    let m = 1usize << 20;
    let logits: Vec<f32> = (0..m)
        .map(|i| ((i as u64 * 2654435761) % 1_000_003) as f32 * 1e-3)
        .collect();
    for shape in [[1, m], [16, m / 16], [256, m / 256], [4096, m / 4096]] {
        let host = HostTensor::from_vec(shape.to_vec(), &logits).unwrap();
        for k in [1i64, 50, 300]
            .into_iter()
            .filter(|&k| k as usize <= shape[1])
        {
            row(
                format!("TopK {k} {shape:?}"),
                &host,
                4 * m as u64,
                &|rec, x| {
                    let [v, i] = rec.topk_to(x, k, 1, true, [Out::NEW, Out::NEW]).unwrap();
                    rec.release(v);
                    rec.release(i);
                },
            );
        }
    }
    // Sorts (an exported argsort is a TopK of the whole axis) and a large K.
    for (len, k) in [(1usize << 16, 1i64 << 16), (1 << 16, 1 << 14), (m, 20_000)] {
        let host = HostTensor::from_vec(vec![1, len], &logits[..len]).unwrap();
        row(
            format!("TopK {k} [1, {len}]"),
            &host,
            4 * len as u64,
            &|rec, x| {
                let [v, i] = rec.topk_to(x, k, 1, true, [Out::NEW, Out::NEW]).unwrap();
                rec.release(v);
                rec.release(i);
            },
        );
    }
    std::fs::write(out_dir.join("lines.txt"), lines.join("\n") + "\n").unwrap();
}

/// ONNX Pad on 16 MiB of output in each mode, on rows (the last axis padded, as a 1-D
/// convolution's input is), on images (the two last axes, as a 2-D convolution's) and on
/// every axis, for elements of 1, 4 and 8 bytes, against the copy of the output's bytes.
/// ONNX Gather of rows at indices on the GPU (an embedding lookup) and GatherElements, each
/// with the indices checked as a graph's node checks them and unchecked (the ops' own use),
/// against a copy of the output's bytes.
fn gather_bandwidth(ctx: &Context, timer: &Timer, adapter: &str, out_dir: &std::path::Path) {
    let bytes: u64 = 16 << 20;
    let mut lines = vec![
        format!("adapter: {adapter}"),
        format!("timing: {}", timer.method()),
        "ONNX Gather (axis 0, i64 indices of random rows) and GatherElements (axis 1, random i64 \
         indices), 16 MiB of output; GB/s of output bytes read and written; checked = the \
         indices checked as a graph's node checks them; copy = Recorder::copy_bytes of the \
         output's bytes"
            .to_string(),
        format!(
            "{:<34} {:>2} {:>10} {:>12} {:>10} {:>7} {:>9}",
            "op, data", "w", "GB/s", "checked GB/s", "copy GB/s", "ratio", "checked/"
        ),
    ];
    println!("{}", lines.join("\n"));
    let random = |n: usize, below: usize, seed: u64| -> Vec<i64> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 33) % below as u64) as i64
            })
            .collect()
    };
    for w in [4u64, 1, 2, 8] {
        let elems = (bytes / w) as usize;
        // Rows of 256 and 4096 bytes: small and large embeddings; of 1000 bytes: rows the
        // row kernel cannot take (not whole quads), and lengths no shift divides by.
        for row_bytes in [256usize, 4096, 1000] {
            for elements in [false, true] {
                let row = row_bytes / w as usize;
                let rows = elems / row;
                let (shape, index_shape) = match elements {
                    false => (vec![4096, row], vec![rows]),
                    true => (vec![rows, row], vec![rows, row]),
                };
                let n: usize = shape.iter().product();
                let data: Vec<u8> = (0..n * w as usize).map(|i| (i % 251) as u8).collect();
                let host = HostTensor::from_bytes(dtype_of_width(w), shape.clone(), data).unwrap();
                let x = Tensor::from_host(ctx, &host).unwrap();
                let count: usize = index_shape.iter().product();
                let below = if elements { row } else { 4096 };
                let index = HostTensor::from_vec(index_shape, &random(count, below, w)).unwrap();
                let index = Tensor::from_host(ctx, &index).unwrap();
                let out_shape = vec![rows, row];
                let y = Tensor::uninit(ctx, dtype_of_width(w), &out_shape).unwrap();
                let copy = Tensor::uninit(ctx, dtype_of_width(w), &out_shape).unwrap();
                let out_bytes = (rows * row) as u64 * w;
                let gather = |rec: &mut Recorder| {
                    let out = Out::into("y", &y);
                    let y = match elements {
                        false => rec.gather_to(&x, &index, 0, out),
                        true => rec.gather_elements_to(&x, &index, 1, out),
                    };
                    y.unwrap();
                };
                let mut unchecked = |rec: &mut Recorder| gather(rec);
                let mut checked = |rec: &mut Recorder| {
                    rec.checking_indices("indices", |rec| {
                        gather(rec);
                        Ok(())
                    })
                    .unwrap()
                };
                let mut copy_run = |rec: &mut Recorder| {
                    rec.copy_bytes(&y, 0, &copy, 0, out_bytes.div_ceil(4) * 4)
                        .unwrap();
                };
                let t = timer.median_set(
                    ctx,
                    2,
                    5,
                    &mut [&mut unchecked, &mut checked, &mut copy_run],
                );
                let rate = |t: f64| 2.0 * out_bytes as f64 / t / 1e9;
                let (plain, check, copy) = (rate(t[0]), rate(t[1]), rate(t[2]));
                let op = if elements { "GatherElements" } else { "Gather" };
                let label = format!("{op} {shape:?}");
                let line = format!(
                    "{label:<34} {w:>2} {plain:>10.2} {check:>12.2} {copy:>10.2} {:>7.2} {:>9.2}",
                    plain / copy,
                    check / plain
                );
                println!("{line}");
                lines.push(line);
            }
        }
    }
    std::fs::write(out_dir.join("gather.txt"), lines.join("\n") + "\n").unwrap();
}

/// `--scatter-only`: the KV cache writes of TensorScatter as the ONNX loader records them (a
/// ScatterElements whose index, one per batch item and position, repeats over the heads and
/// the head's elements, `Recorder::scatter_distinct_to`) against ScatterElements with an index
/// per update element walked in order, one invocation per column (what TensorScatter recorded
/// before), and the copy of the cache's bytes that both begin with.
fn scatter_bandwidth(ctx: &Context, timer: &Timer, adapter: &str, out_dir: &std::path::Path) {
    use wgpu_ops::kernels::scatter::ScatterReduction;
    let mut lines = vec![
        format!("adapter: {adapter}"),
        format!("timing: {}", timer.method()),
        format!(
            "kernel set: {}",
            if ctx.cpu_kernels() { "CPU" } else { "GPU" }
        ),
        "KV cache writes [2, 8, len, 64] into [2, 8, 2048, 64] at write indices 0 and 1000, \
         along axis 2; µs per op, each beginning with the cache's copy; copy = \
         Recorder::copy_bytes of the cache's bytes; distinct = the index [2, 1, len, 1] \
         repeated by the kernel (TensorScatter's): each head's row of 64 elements moved a \
         16-byte quad per invocation; in order = an i64 index per update element, each column walked in order"
            .to_string(),
        format!(
            "{:<8} {:>2} {:>12} {:>12} {:>10} {:>9} {:>9}",
            "len", "w", "distinct µs", "in order µs", "copy µs", "distinct/", "in order/"
        ),
    ];
    println!("{}", lines.join("\n"));
    let (b, h, max, d) = (2usize, 8usize, 2048usize, 64usize);
    for w in [2u64, 4] {
        let dtype = dtype_of_width(w);
        let cache_bytes = (b * h * max * d) as u64 * w;
        let data: Vec<u8> = (0..cache_bytes as usize).map(|i| (i % 251) as u8).collect();
        let past = HostTensor::from_bytes(dtype, vec![b, h, max, d], data).unwrap();
        let past = Tensor::from_host(ctx, &past).unwrap();
        for len in [1usize, 64, 1024] {
            let n = b * h * len * d;
            let update = HostTensor::from_bytes(dtype, vec![b, h, len, d], vec![7; n * w as usize]);
            let update = Tensor::from_host(ctx, &update.unwrap()).unwrap();
            let at = |bi: usize, s: usize| ((bi * 1000 + s) % max) as i64;
            let small: Vec<i64> = (0..b)
                .flat_map(|bi| (0..len).map(move |s| at(bi, s)))
                .collect();
            let small = Tensor::from_host(
                ctx,
                &HostTensor::from_vec(vec![b, 1, len, 1], &small).unwrap(),
            )
            .unwrap();
            let mut full = Vec::with_capacity(n);
            for bi in 0..b {
                for _ in 0..h {
                    for s in 0..len {
                        full.extend(std::iter::repeat_n(at(bi, s), d));
                    }
                }
            }
            let full = Tensor::from_host(
                ctx,
                &HostTensor::from_vec(vec![b, h, len, d], &full).unwrap(),
            )
            .unwrap();
            let y = Tensor::uninit(ctx, dtype, &[b, h, max, d]).unwrap();
            let mut distinct = |rec: &mut Recorder| {
                rec.scatter_distinct_to(&past, &small, &update, 2, Out::into("y", &y))
                    .unwrap();
            };
            let mut in_order = |rec: &mut Recorder| {
                let out = Out::into("y", &y);
                rec.scatter_elements_to(&past, &full, &update, 2, ScatterReduction::None, out)
                    .unwrap();
            };
            let mut copy = |rec: &mut Recorder| {
                rec.copy_bytes(&past, 0, &y, 0, cache_bytes).unwrap();
            };
            let t = timer.median_set(ctx, 2, 5, &mut [&mut distinct, &mut in_order, &mut copy]);
            let us = |t: f64| t * 1e6;
            let line = format!(
                "{len:<8} {w:>2} {:>12.1} {:>12.1} {:>10.1} {:>9.2} {:>9.2}",
                us(t[0]),
                us(t[1]),
                us(t[2]),
                t[0] / t[2],
                t[1] / t[2]
            );
            println!("{line}");
            lines.push(line);
        }
    }
    // ScatterND of distinct tuples (random, no reduction): single f32 elements of a 4 MiB
    // matrix, and rows of it; against the copy of the data's bytes.
    let header = format!(
        "ScatterND without a reduction into f32 [1024, 1024] (4 MiB), distinct random tuples; µs \
         per op, beginning with the data's copy\n{:<34} {:>10} {:>10} {:>7}",
        "indices -> updates", "op µs", "copy µs", "op/"
    );
    println!("{header}");
    lines.push(header);
    let (rows, cols) = (1024usize, 1024usize);
    let data = HostTensor::from_vec(vec![rows, cols], &vec![1f32; rows * cols]).unwrap();
    let data = Tensor::from_host(ctx, &data).unwrap();
    let y = Tensor::uninit(ctx, DType::F32, &[rows, cols]).unwrap();
    let mut state = 12345u64;
    let mut shuffled = |n: usize| -> Vec<usize> {
        let mut v: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            v.swap(i, (state >> 33) as usize % (i + 1));
        }
        v
    };
    for (tuples, k) in [(65536usize, 2usize), (512, 1)] {
        let picks = shuffled(if k == 2 { rows * cols } else { rows });
        let tuple_values: Vec<i64> = picks[..tuples]
            .iter()
            .flat_map(|&p| match k {
                2 => vec![(p / cols) as i64, (p % cols) as i64],
                _ => vec![p as i64],
            })
            .collect();
        let index = HostTensor::from_vec(vec![tuples, k], &tuple_values).unwrap();
        let index = Tensor::from_host(ctx, &index).unwrap();
        let ushape: Vec<usize> = if k == 2 {
            vec![tuples]
        } else {
            vec![tuples, cols]
        };
        let n: usize = ushape.iter().product();
        let update = HostTensor::from_vec(ushape.clone(), &vec![2f32; n]).unwrap();
        let update = Tensor::from_host(ctx, &update).unwrap();
        let mut nd = |rec: &mut Recorder| {
            rec.scatter_nd_to(
                &data,
                &index,
                &update,
                ScatterReduction::None,
                Out::into("y", &y),
            )
            .unwrap();
        };
        let mut copy = |rec: &mut Recorder| {
            rec.copy_bytes(&data, 0, &y, 0, (rows * cols * 4) as u64)
                .unwrap();
        };
        let t = timer.median_set(ctx, 2, 5, &mut [&mut nd, &mut copy]);
        let label = format!("[{tuples}, {k}] -> {ushape:?}");
        let line = format!(
            "{label:<34} {:>10.1} {:>10.1} {:>7.2}",
            t[0] * 1e6,
            t[1] * 1e6,
            t[0] / t[1]
        );
        println!("{line}");
        lines.push(line);
    }
    lines.extend(decode_steps(ctx));
    lines.extend(scan_decode_steps(ctx));
    std::fs::write(out_dir.join("scatter.txt"), lines.join("\n") + "\n").unwrap();
}

/// A decode loop as a Scan over 64 steps: its state a [2, 8, 2048, 64] f16 cache that the body
/// writes one position per batch item into each step (ScatterElements with `unique_indices`
/// at a position state the body advances), its scan input the steps' new rows. In one buffer
/// the scatter updates the cache where it lies; with `scan_in_place` off (a second context on
/// the same adapter) the cache ping-pongs between two buffers and each step copies it first.
/// Wall time of `run_tensors` per step (the initial cache's one copy into the loop's buffer
/// included: the caller keeps its cache), median of 5; handed over = one buffer with each
/// run's cache handed back as the next run's initial state, which the Scan then keeps its
/// state in (no copy at all); copy = the cache's bytes copied by a submission of their own.
fn scan_decode_steps(ctx: &Context) -> Vec<String> {
    let (b, h, max, d, steps) = (2usize, 8usize, 2048usize, 64usize, 64usize);
    let dims = |v: &[usize]| v.iter().map(|&n| Some(n)).collect::<Vec<_>>();
    let one = HostTensor::from_vec(vec![1], &[1i64]).unwrap();
    let body = Graph::new()
        .input("cache", DType::F16, &dims(&[b, h, max, d]))
        .input("at", DType::I64, &dims(&[b, 1, 1, 1]))
        .input("row", DType::F16, &dims(&[b, h, 1, d]))
        .constant("one", one)
        .node(
            Node::new("ScatterElements", "write")
                .inputs(["cache", "at", "row"])
                .outputs(["cache_out"])
                .attr("axis", Attr::Int(2))
                .attr("unique_indices", Attr::Int(1)),
        )
        .node(
            Node::new("Add", "next")
                .inputs(["at", "one"])
                .outputs(["at_out"]),
        )
        .output("cache_out")
        .output("at_out");
    let graph = Graph::new()
        .input("cache0", DType::F16, &dims(&[b, h, max, d]))
        .input("at0", DType::I64, &dims(&[b, 1, 1, 1]))
        .input("rows", DType::F16, &dims(&[steps, b, h, 1, d]))
        .node(
            Node::new("Scan", "decode")
                .inputs(["cache0", "at0", "rows"])
                .outputs(["cache", "at"])
                .attr("body", Attr::Graph(Box::new(body)))
                .attr("num_scan_inputs", Attr::Int(1)),
        )
        .output("cache")
        .output("at");
    let cache_bytes = b * h * max * d * 2;
    let two_buffers = same_adapter_as(
        ctx,
        ContextOptions {
            scan_in_place: Some(false),
            ..Default::default()
        },
    );
    let inputs_on = |ctx: &Context| {
        let upload = |dtype: DType, shape: &[usize], bytes: Vec<u8>| {
            let host = HostTensor::from_bytes(dtype, shape.to_vec(), bytes).unwrap();
            Tensor::from_host(ctx, &host).unwrap()
        };
        let at: Vec<u8> = [0i64, 1000].iter().flat_map(|v| v.to_le_bytes()).collect();
        vec![
            (
                "cache0".to_string(),
                upload(DType::F16, &[b, h, max, d], vec![0; cache_bytes]),
            ),
            ("at0".to_string(), upload(DType::I64, &[b, 1, 1, 1], at)),
            (
                "rows".to_string(),
                upload(
                    DType::F16,
                    &[steps, b, h, 1, d],
                    vec![0x3c; steps * b * h * d * 2],
                ),
            ),
        ]
    };
    let sessions = [
        (
            ctx,
            Session::new(ctx, graph.clone()).unwrap(),
            inputs_on(ctx),
        ),
        (
            &two_buffers,
            Session::new(&two_buffers, graph.clone()).unwrap(),
            inputs_on(&two_buffers),
        ),
    ];
    let run = |k: usize| {
        let (ctx, session, inputs) = &sessions[k];
        let t = Instant::now();
        let out = session.run_tensors_blocking(inputs.clone()).unwrap();
        drop(out);
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        t.elapsed().as_secs_f64() / steps as f64
    };
    // The cache each run gives back, handed over to the next (the first from a run of its own),
    // on a session of its own (a session keeps for its next run only the buffers its last run
    // used, and these runs need no loop buffer for the cache).
    let handing_over = Session::new(ctx, graph.clone()).unwrap();
    let mut handed_cache = {
        let inputs = &sessions[0].2;
        let mut out = handing_over.run_tensors_blocking(inputs.clone()).unwrap();
        Some(out.swap_remove(0).1)
    };
    let mut run_handed = || {
        let (ctx, session, inputs) = (ctx, &handing_over, &sessions[0].2);
        let mut given = inputs.clone();
        // Moved, not cloned: the run holds the only handle.
        given[0].1 = handed_cache.take().expect("the last run's cache");
        let t = Instant::now();
        let mut out = session.run_tensors_blocking(given).unwrap();
        handed_cache = Some(out.swap_remove(0).1);
        drop(out);
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        t.elapsed().as_secs_f64() / steps as f64
    };
    let (copy_src, copy_dst) = (
        Tensor::from_host(
            ctx,
            &HostTensor::from_bytes(DType::F16, vec![b, h, max, d], vec![0; cache_bytes]).unwrap(),
        )
        .unwrap(),
        Tensor::uninit(ctx, DType::F16, &[b, h, max, d]).unwrap(),
    );
    let copies = || {
        let t = Instant::now();
        for _ in 0..steps {
            let mut rec = ctx.recorder();
            rec.copy_bytes(&copy_src, 0, &copy_dst, 0, cache_bytes as u64)
                .unwrap();
            pollster::block_on(rec.finish()).unwrap();
        }
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap();
        t.elapsed().as_secs_f64() / steps as f64
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    run(0);
    run(1);
    run_handed();
    copies();
    let (mut a, mut c, mut handed, mut k) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        a.push(run(0));
        c.push(run(1));
        handed.push(run_handed());
        k.push(copies());
    }
    let (a, c, handed, k) = (median(a), median(c), median(handed), median(k));
    let header = format!(
        "decode loop as a Scan of {steps} steps (run_tensors), f16 cache state [{b}, {h}, {max}, {d}] \
         ({} MiB), one position per batch item per step; wall µs per step, median of 5",
        cache_bytes >> 20
    );
    let line = format!(
        "one buffer (updated in place) {:.1} µs, two buffers (scan_in_place off: copied each step) \
         {:.1} µs, copy {:.1} µs; two/one {:.2}; one buffer with the cache handed over {:.1} µs \
         (one/handed over {:.2})",
        a * 1e6,
        c * 1e6,
        k * 1e6,
        c / a,
        handed * 1e6,
        a / handed
    );
    println!("{header}\n{line}");
    vec![header, line]
}

/// A decode loop through a `Session` (`run_tensors`): each step writes one position per
/// batch item into a [2, 8, 2048, 64] f16 cache, as TensorScatter's expansion records it (a
/// ScatterElements with `unique_indices`). Handed over, each step gives the last step's cache
/// back with no other handle kept, and the scatter writes into it where it lies; kept, the
/// caller holds the cache as well through the run, which copies it first (into the buffer of
/// the cache before, which the caller dropped). Wall time per step over 64
/// steps (the GPU waited for at the end), median of 5; copy = the cache's bytes copied by a
/// submission of their own per step, timed the same way.
fn decode_steps(ctx: &Context) -> Vec<String> {
    let (b, h, max, d) = (2usize, 8usize, 2048usize, 64usize);
    let dims = |v: &[usize]| v.iter().map(|&n| Some(n)).collect::<Vec<_>>();
    let graph = Graph::new()
        .input("past", DType::F16, &dims(&[b, h, max, d]))
        .input("update", DType::F16, &dims(&[b, h, 1, d]))
        .input("index", DType::I64, &dims(&[b, 1, 1, 1]))
        .node(
            Node::new("ScatterElements", "write")
                .inputs(["past", "index", "update"])
                .outputs(["present"])
                .attr("axis", Attr::Int(2))
                .attr("unique_indices", Attr::Int(1)),
        )
        .output("present");
    let session = Session::new(ctx, graph).unwrap();
    let upload = |dtype: DType, shape: &[usize], bytes: Vec<u8>| {
        let host = HostTensor::from_bytes(dtype, shape.to_vec(), bytes).unwrap();
        Tensor::from_host(ctx, &host).unwrap()
    };
    let cache_bytes = b * h * max * d * 2;
    let update = upload(DType::F16, &[b, h, 1, d], vec![0x3c; b * h * d * 2]);
    let indices: Vec<Tensor> = (0..64i64)
        .map(|s| {
            let at: Vec<u8> = [s, 1000 + s].iter().flat_map(|v| v.to_le_bytes()).collect();
            upload(DType::I64, &[b, 1, 1, 1], at)
        })
        .collect();
    let wait = || {
        ctx.device()
            .poll(wgpu::PollType::wait_indefinitely())
            .unwrap()
    };
    let mut cache = Some(upload(DType::F16, &[b, h, max, d], vec![0; cache_bytes]));
    let mut steps = |keep: bool| {
        let t = Instant::now();
        for index in &indices {
            let past = cache.take().unwrap();
            // Held through the run only: its buffer serves the next step's copy.
            let _held = keep.then(|| past.clone());
            let inputs = vec![
                ("past".to_string(), past),
                ("update".to_string(), update.clone()),
                ("index".to_string(), index.clone()),
            ];
            cache = Some(session.run_tensors_blocking(inputs).unwrap().remove(0).1);
        }
        wait();
        t.elapsed().as_secs_f64() / indices.len() as f64
    };
    let (copy_src, copy_dst) = (
        upload(DType::F16, &[b, h, max, d], vec![0; cache_bytes]),
        Tensor::uninit(ctx, DType::F16, &[b, h, max, d]).unwrap(),
    );
    let copies = || {
        let t = Instant::now();
        for _ in &indices {
            let mut rec = ctx.recorder();
            rec.copy_bytes(&copy_src, 0, &copy_dst, 0, cache_bytes as u64)
                .unwrap();
            pollster::block_on(rec.finish()).unwrap();
        }
        wait();
        t.elapsed().as_secs_f64() / indices.len() as f64
    };
    let median = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    steps(false);
    steps(true);
    copies();
    let (mut over, mut keep, mut copy) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..5 {
        over.push(steps(false));
        keep.push(steps(true));
        copy.push(copies());
    }
    let (over, keep, copy) = (median(over), median(keep), median(copy));
    let header = format!(
        "decode loop through a Session (run_tensors), f16 cache [{b}, {h}, {max}, {d}] ({} MiB), \
         one position per batch item per step; wall µs per step over {} steps, median of 5",
        cache_bytes >> 20,
        indices.len()
    );
    let line = format!(
        "handed over {:.1} µs, kept (copied) {:.1} µs, copy {:.1} µs; kept/handed over {:.2}",
        over * 1e6,
        keep * 1e6,
        copy * 1e6,
        keep / over
    );
    println!("{header}\n{line}");
    vec![header, line]
}

fn pad_bandwidth(ctx: &Context, timer: &Timer, adapter: &str, out_dir: &std::path::Path) {
    use wgpu_ops::kernels::pad::PadMode;
    let bytes: u64 = 16 << 20;
    let mut lines = vec![
        format!("adapter: {adapter}"),
        format!("timing: {}", timer.method()),
        format!("ONNX Pad, about 16 MiB of output; GB/s of input + output bytes; copy = Recorder::copy_bytes of the output's bytes"),
        format!(
            "{:<42} {:>2} {:>9} {:>10} {:>10} {:>7}",
            "input, pads", "w", "mode", "Pad GB/s", "copy GB/s", "ratio"
        ),
    ];
    println!("{}", lines.join("\n"));
    for w in [4u64, 1, 8] {
        let e = (bytes / w) as usize;
        let rows = e / 1024;
        let side = ((e / 64) as f64).sqrt() as usize;
        let cases: [(Vec<usize>, Vec<i64>); 4] = [
            (vec![rows, 1020], vec![0, 2, 0, 2]),
            // An odd number of elements: the output ends inside a quad.
            (vec![rows + 1, 1021], vec![0, 1, 0, 1]),
            (
                vec![1, 64, side - 2, side - 2],
                vec![0, 0, 1, 1, 0, 0, 1, 1],
            ),
            (vec![rows - 2, 1022], vec![1, 1, 1, 1]),
        ];
        for (shape, pads) in cases {
            let n: usize = shape.iter().product();
            let data: Vec<u8> = (0..n * w as usize).map(|i| (i % 251) as u8).collect();
            let host = HostTensor::from_bytes(dtype_of_width(w), shape.clone(), data).unwrap();
            let x = Tensor::from_host(ctx, &host).unwrap();
            let rank = shape.len();
            let out_shape: Vec<usize> = (0..rank)
                .map(|k| (shape[k] as i64 + pads[k] + pads[k + rank]) as usize)
                .collect();
            let out_bytes = out_shape.iter().product::<usize>() as u64 * w;
            let y = Tensor::uninit(ctx, dtype_of_width(w), &out_shape).unwrap();
            let copy = Tensor::uninit(ctx, dtype_of_width(w), &out_shape).unwrap();
            for mode in [
                PadMode::Constant,
                PadMode::Reflect,
                PadMode::Edge,
                PadMode::Wrap,
            ] {
                let (t_pad, t_copy) = timer.median_pair(
                    ctx,
                    2,
                    5,
                    &mut |rec| {
                        rec.pad_to(&x, &pads, mode, None, None, Out::into("y", &y))
                            .unwrap();
                    },
                    &mut |rec| {
                        rec.copy_bytes(&y, 0, &copy, 0, out_bytes.div_ceil(4) * 4)
                            .unwrap();
                    },
                );
                let moved = (n as u64 * w + out_bytes) as f64;
                let (pad, copy) = (moved / t_pad / 1e9, 2.0 * out_bytes as f64 / t_copy / 1e9);
                let label = format!("{shape:?} {pads:?}");
                let line = format!(
                    "{label:<42} {w:>2} {:>9} {pad:>10.2} {copy:>10.2} {:>7.2}",
                    mode.name(),
                    pad / copy
                );
                println!("{line}");
                lines.push(line);
            }
        }
    }
    std::fs::write(out_dir.join("pad.txt"), lines.join("\n") + "\n").unwrap();
}

fn dtype_bandwidth(
    ctx: &Context,
    timer: &Timer,
    adapter: &str,
    quick: bool,
    out_dir: &std::path::Path,
) {
    let bytes: u64 = if quick { 16 << 20 } else { 64 << 20 };
    let bytes = bytes.min(ctx.binding_limit()) & !15;
    let mut lines = vec![
        format!("adapter: {adapter}"),
        format!("timing: {}", timer.method()),
        format!(
            "Add on {} MiB operands of ordinary values per dtype; copy = the plain copy (Recorder::copy_bytes) of the same bytes",
            bytes >> 20
        ),
        format!(
            "{:<6} {:<8} {:>10} {:>10} {:>7}",
            "dtype", "kernel", "Add GB/s", "copy GB/s", "ratio"
        ),
    ];
    println!("{}", lines.join("\n"));
    // i64 and u64 also on a context without SHADER_INT64: the 32-bit emulation's cost.
    let emulating = Context::new_blocking(wgpu_ops::ContextOptions {
        native_64_bit: Some(false),
        ..Default::default()
    })
    .unwrap();
    let emulating_timer = Timer::new(&emulating);
    // Operands of ordinary values, not the zeros of fresh buffers (zeros and subnormals take
    // the slow paths of the f16 conversions): the bytes of the f16 values 1.0 to 2.0, which
    // are normal values of every float type.
    let ordinary: Vec<u8> = (0..bytes as usize / 2)
        .flat_map(|i| (0x3c00u16 + (i % 1024) as u16).to_le_bytes())
        .collect();
    let runs = DType::ALL
        .into_iter()
        // The storage-only types (8- and 4-bit floats, 4- and 2-bit integers) have no Add.
        .filter(|&d| d != DType::Bool && !d.is_storage_only())
        .map(|d| (d, ctx, timer, false))
        .chain([DType::I64, DType::U64].map(|d| (d, &emulating, &emulating_timer, true)));
    for (dtype, ctx, timer, emulated) in runs {
        if let Some((f, _)) =
            wgpu_ops::kernels::operands::native_feature(dtype).filter(|_| !emulated)
        {
            if !ctx.features().contains(f) {
                let line = format!(
                    "{:<6} (needs {f:?}, which this adapter lacks)",
                    dtype.name()
                );
                println!("{line}");
                lines.push(line);
                continue;
            }
        }
        let n = (bytes / dtype.size() as u64) as usize;
        let operand = || {
            let host = HostTensor::from_bytes(dtype, vec![n], ordinary.clone()).unwrap();
            Tensor::from_host(ctx, &host).unwrap()
        };
        let (a, b) = (operand(), operand());
        let y = Tensor::uninit(ctx, dtype, &[n]).unwrap();
        // The kernel `elementwise_to` picks: 4-byte results go to the word kernel (16-byte
        // stores) rather than the typed one.
        let typed = !emulated
            && dtype.size() != 4
            && wgpu_ops::ops::elementwise::lookup("Add")
                .and_then(|o| o.wgsl(dtype))
                .is_some();
        let (t_add, t_copy) = timer.median_pair(
            ctx,
            1,
            if quick { 3 } else { 7 },
            &mut |rec| {
                rec.elementwise_to("Add", &a, Some(&b), wgpu_ops::Out::into("y", &y))
                    .unwrap();
            },
            &mut |rec| {
                rec.copy_bytes(&a, 0, &y, 0, bytes).unwrap();
            },
        );
        let add = 3.0 * bytes as f64 / t_add / 1e9;
        let copy = 2.0 * bytes as f64 / t_copy / 1e9;
        let line = format!(
            "{:<6} {:<8} {:>10.2} {:>10.2} {:>7.2}",
            dtype.name(),
            if emulated {
                "emulated"
            } else if typed {
                "typed"
            } else {
                "words"
            },
            add,
            copy,
            add / copy
        );
        println!("{line}");
        lines.push(line);
        if emulated {
            continue;
        }
        // The same Add as a one-step program, the kernel graphs run (fused chains).
        let mut program = wgpu_ops::kernels::program::Program::new(vec![dtype, dtype], false);
        program
            .push(
                "Add",
                vec![
                    wgpu_ops::kernels::program::Arg::Operand(0),
                    wgpu_ops::kernels::program::Arg::Operand(1),
                ],
                dtype,
            )
            .unwrap();
        // The same program on all n elements, and on one element less: an output that ends
        // inside a 16-byte quad.
        for (m, label) in [(n, "program"), (n - 1, "prog n-1")] {
            let m_bytes = (m * dtype.size()) as u64;
            let operand = || {
                let data = ordinary[..m_bytes as usize].to_vec();
                Tensor::from_host(ctx, &HostTensor::from_bytes(dtype, vec![m], data).unwrap())
                    .unwrap()
            };
            let (a1, b1) = (operand(), operand());
            let y1 = Tensor::uninit(ctx, dtype, &[m]).unwrap();
            let (t_add, t_copy) = timer.median_pair(
                ctx,
                1,
                if quick { 3 } else { 7 },
                &mut |rec| {
                    rec.program_to(&program, &[&a1, &b1], wgpu_ops::Out::into("y", &y1))
                        .unwrap();
                },
                &mut |rec| {
                    rec.copy_bytes(&a, 0, &y, 0, bytes).unwrap();
                },
            );
            let (add, copy) = (
                3.0 * m_bytes as f64 / t_add / 1e9,
                2.0 * bytes as f64 / t_copy / 1e9,
            );
            let line = format!(
                "{:<6} {:<8} {:>10.2} {:>10.2} {:>7.2}",
                dtype.name(),
                label,
                add,
                copy,
                add / copy
            );
            println!("{line}");
            lines.push(line);
        }
    }
    let path = out_dir.join("dtypes.txt");
    std::fs::write(&path, lines.join("\n") + "\n").unwrap();
    println!("wrote {}", path.display());
}
