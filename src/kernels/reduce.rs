//! The reduction kernel family (`shaders/reduce.wgsl`): ONNX's Reduce* ops, ArgMax and ArgMin
//! over any set of axes, one workgroup per output element folding its elements into a state
//! and merging the states in a tree. States are of the input's wide type (f32 for f16 and
//! bf16, i32 for 8/16-bit integers); the result is stored in that type (ArgMax and ArgMin as
//! i64 word pairs, without 64-bit shader types), and narrowed by Cast where the op's dtype is
//! narrower.

use super::operands::gcd;
use super::operands::specialize;
use super::pad::{PadAxis, PadMode};
use super::program::{
    broadcast_walk_words, index_code, intern, narrow, walk_rank, walk_struct, Program, Values,
};
use super::windows::{room, Walk};
use super::words::{
    bits_expression, load_expression, Class, F64_EMULATION, F64_EMULATION_MATH, I64_EMULATION,
};
use super::{grid_for, Kernel, MAX_RANK};
use crate::gpu::Binding;
use crate::{DType, Error, Recorder, Result, Tensor};

const REDUCE: &str = concat!(
    include_str!("../../shaders/reduce.wgsl"),
    "\n",
    include_str!("../../shaders/divide.inc")
);

/// Threads per reduction workgroup (the shader's `WORKGROUP`).
pub const WORKGROUP: u32 = 256;

/// Rows of at most this many elements are folded by one thread each (pass 3), in order: a
/// workgroup's tree over so few elements leaves most of its threads idle and waits at every
/// level. A Gaussian process exported by skl2onnx (its Scan's body reduces 1000 rows of 5 f32
/// per iteration, 2000 iterations) took 10.5 s on lavapipe with a workgroup per row, 0.35 s
/// with a thread per row.
pub const SHORT_ROW: u64 = 32;

/// Rows of at most this many elements are also folded by one thread each where there are at
/// least [`MANY_ROWS`] of them (CPU adapters: see [`CPU_THREAD_ROW`]) and neighbouring rows start
/// near each other (a pool's windows): a workgroup per row then idles most of its threads and
/// waits at every level of its tree, while the threads of rows side by side read side by side.
/// A 13x13 MaxPool over [1, 512, 20, 20] (204 800 rows of 169) took 5.8 s on lavapipe with a
/// workgroup per row, 0.44 s with a thread per row. 256 is a 16 x 16 window: longer rows, one
/// thread each, would keep too few loads in flight on a GPU (not measured on one yet).
pub const MANY_ROWS_ROW: u64 = 256;
/// See [`MANY_ROWS_ROW`]: enough threads to fill a large GPU.
pub const MANY_ROWS: u64 = 65536;
/// CPU adapters fold rows of up to this many elements (the longest loop an invocation runs;
/// see the README's limits) one thread each, whatever their layout, where there are rows
/// enough for a workgroup of [`WORKGROUP`] threads per core of the host: a workgroup's tree
/// costs a CPU adapter more than the rows it folds side by side. f32 ReduceSum over [4096,
/// 1024] ran at 0.42 GB/s with a workgroup per row on lavapipe (2 cores), 3.1-3.5 with a
/// thread per row; [256, 16384] 2.2 and 1.8, where too few threads are left
/// (`bench --reduce-only`, `bench/reduce_lavapipe.txt`).
pub const CPU_THREAD_ROW: u64 = 16384;

/// Whether `rows` rows of `n` elements read through `walk` are [`MANY_ROWS_ROW`]'s case (or,
/// on CPU adapters, [`CPU_THREAD_ROW`]'s). On GPUs the rows' starts must lie at most 4
/// elements apart along the innermost kept axis, so that a warp's loads fall in few cache
/// lines (not rows of contiguous elements, which a workgroup reads coalesced).
fn many_short_rows(ctx: &crate::Context, walk: &ReduceWalk, rows: u64, n: u64) -> bool {
    if ctx.cpu_kernels() {
        return n <= CPU_THREAD_ROW && rows >= u64::from(WORKGROUP) * host_cores();
    }
    if n > MANY_ROWS_ROW {
        return false;
    }
    let inner_step = walk
        .keep
        .iter()
        .rev()
        .find(|&&(len, _)| len > 1)
        .map_or(0, |&(_, stride)| stride);
    rows >= MANY_ROWS && inner_step <= 4
}

/// The host's cores, asked once: `available_parallelism` reads the process's cgroup files on
/// every call, which took 17 % of the host time of a planned transformer decoder step (two
/// LayerNorms and a Softmax per layer each asked it).
pub(crate) fn host_cores() -> u64 {
    static CORES: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |c| c.get()) as u64)
}

/// The threads per row of passes 0 and 4 for rows of `n` elements: about 4 elements per thread, in a
/// power of two up to a whole workgroup ([`WORKGROUP`]). A row of 64 elements given a whole
/// workgroup left 240 of its 256 threads idle and a tree of 8 levels for its sum.
pub fn lanes_for(n: u64) -> u32 {
    n.div_ceil(4)
        .next_power_of_two()
        .clamp(MIN_LANES, u64::from(WORKGROUP)) as u32
}

/// The fewest threads per row of passes 0 and 4: rows of [`SHORT_ROW`] elements and fewer take a
/// thread each.
const MIN_LANES: u64 = 16;

/// The `LANES` each pass is compiled with: every power of two from `MIN_LANES` to
/// [`WORKGROUP`] for passes 0 and 4 (a workgroup's rows, or chunks of rows, side by side),
/// [`WORKGROUP`] for the others.
pub fn lane_counts(pass: u8) -> impl Iterator<Item = u32> {
    let fewest = if matches!(pass, 0 | 4) {
        MIN_LANES as u32
    } else {
        WORKGROUP
    };
    (fewest.trailing_zeros()..=WORKGROUP.trailing_zeros()).map(|b| 1 << b)
}

/// How a reduction reads its rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RowKernel {
    /// A thread per row (short rows, or many rows side by side: [`MANY_ROWS_ROW`]).
    Thread,
    /// A workgroup per row, its threads folding a tree; or, with fewer lanes
    /// ([`lanes_for`]), a segment of a workgroup per row.
    Group(u32),
    /// Few long rows: chunks of each fold in parallel (pass 1), then merge (pass 2), so a
    /// whole-tensor reduction is not left to one workgroup.
    Chunks(u64),
}

impl RowKernel {
    fn choose(ctx: &crate::Context, walk: &ReduceWalk, rows: u64, n: u64) -> RowKernel {
        if n <= SHORT_ROW || many_short_rows(ctx, walk, rows, n) {
            return RowKernel::Thread;
        }
        if rows < 64 && n >= 8 * u64::from(WORKGROUP) {
            let chunks = n
                .div_ceil(4 * u64::from(WORKGROUP))
                .min(1024u64.div_ceil(rows));
            if chunks > 1 {
                return RowKernel::Chunks(chunks);
            }
        }
        RowKernel::Group(lanes_for(n))
    }

    /// The kernel of a reduction over the last axis of a `[rows, n]` matrix.
    pub fn of_rows(ctx: &crate::Context, rows: usize, n: usize) -> RowKernel {
        let walk = ReduceWalk::over_axes(&[rows, n], &[1]);
        RowKernel::choose(ctx, &walk, rows as u64, n as u64)
    }
}

/// The ops, by ONNX name; ArgMax/ArgMin with `select_last_index` are `ArgMaxLast`/`ArgMinLast`.
pub const OPS: [&str; 13] = [
    "ReduceSum",
    "ReduceSumSquare",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ArgMax",
    "ArgMin",
    "ArgMaxLast",
];

/// The kernel's ops: [`OPS`] and ArgMin with `select_last_index`.
pub fn kernel_ops() -> impl Iterator<Item = &'static str> {
    OPS.into_iter().chain(["ArgMinLast"])
}

/// Whether op `op` reduces `dtype` (ONNX's types, less f64 where it needs exp or log).
pub fn defined(op: &str, dtype: DType) -> bool {
    let class = Class::of(dtype);
    match op {
        _ if dtype.is_storage_only() => false,
        "ReduceLogSum" | "ReduceLogSumExp" => matches!(class, Class::Float | Class::Double),
        "ReduceMax" | "ReduceMin" => true,
        _ if class == Class::Bool => false,
        _ => true,
    }
}

/// The dtype the kernel stores: i64 for the Arg ops, else the input's wide type.
pub fn stored_dtype(op: &str, input: DType) -> DType {
    if op.starts_with("Arg") {
        DType::I64
    } else {
        Class::of(input).wide()
    }
}

/// The lowest and highest values of the state type, as WGSL.
fn extremes(class: Class) -> (&'static str, &'static str) {
    match class {
        Class::Float => ("runtime_f32(0xff800000u)", "runtime_f32(0x7f800000u)"),
        Class::Double => (
            "f64(runtime_f32(0xff800000u))",
            "f64(runtime_f32(0x7f800000u))",
        ),
        Class::Int => ("(-2147483647i - 1i)", "2147483647i"),
        Class::Long => ("(-9223372036854775807li - 1li)", "9223372036854775807li"),
        Class::Uint | Class::Bool => ("0u", "4294967295u"),
        Class::Ulong => ("0lu", "18446744073709551615lu"),
    }
}

/// The INIT, ABSORB, MERGE and FINISH lines of `op` on states of `class`.
fn op_lines(op: &str, class: Class, out: DType, input: DType) -> [String; 4] {
    let float = matches!(class, Class::Float | Class::Double);
    let (lowest, highest) = extremes(class);
    // Max and Min over no element give the input type's ends, which for the narrow signed
    // types are not the i32 state's ends cut to their width (0 and -1).
    let (input_lowest, input_highest) = match input {
        DType::I8 => ("-128i", "127i"),
        DType::I16 => ("-32768i", "32767i"),
        _ => (lowest, highest),
    };
    let (exp, log, math) = if class == Class::Double {
        ("exp64", "log64", super::words::F64_MATH)
    } else {
        ("exp", "onnx_log", "")
    };
    let bits = bits_expression(out);
    let result = |value: &str| {
        format!("fn finish(s: State) -> vec2<u32> {{ let r = {value}; return {bits}; }}")
    };
    let fold = |init: &str, absorb: &str, merge: &str, finish: &str| {
        [
            format!("fn init() -> State {{ return State({init}, C(0), 0u); }}"),
            format!("fn absorb(s: State, x: C, j: u32) -> State {{ return State({absorb}, s.b, s.i); }}"),
            format!("fn merge(s: State, t: State) -> State {{ return State({merge}, s.b, s.i); }}"),
            result(finish),
        ]
    };
    // Max and Min keep NaN, as onnxruntime does; NaN tested on the bits, since NVIDIA's
    // driver folds `!(u == u)` next to a max away.
    let is_nan = match class {
        Class::Double => super::elementwise::f64_is_nan,
        _ => super::elementwise::f32_is_nan,
    };
    let pick = |f: &str, u: &str, v: &str| {
        if float {
            format!(
                "select({f}({u}, {v}), {u} + {v}, {} || {})",
                is_nan(u),
                is_nan(v)
            )
        } else {
            format!("{f}({u}, {v})")
        }
    };
    let real = |v: &str| -> String {
        if float {
            v.to_string()
        } else {
            format!("C(sqrt(f32({v})))")
        }
    };
    match op {
        "ReduceSum" => fold("C(0)", "s.a + x", "s.a + t.a", "s.a"),
        "ReduceSumSquare" => fold("C(0)", "s.a + x * x", "s.a + t.a", "s.a"),
        "ReduceMean" => fold("C(0)", "s.a + x", "s.a + t.a", "s.a / C(params.n)"),
        "ReduceProd" => fold("C(1)", "s.a * x", "s.a * t.a", "s.a"),
        "ReduceL1" => fold("C(0)", "s.a + abs(x)", "s.a + t.a", "s.a"),
        "ReduceL2" => {
            let root = if float {
                "sqrt(s.a)".to_string()
            } else {
                real("s.a")
            };
            fold("C(0)", "s.a + x * x", "s.a + t.a", &root)
        }
        "ReduceLogSum" => {
            let [i, a, m, f] = fold("C(0)", "s.a + x", "s.a + t.a", &format!("{log}(s.a)"));
            [i, format!("{math}\n{a}"), m, f]
        }
        "ReduceMax" => fold(
            input_lowest,
            &pick("max", "s.a", "x"),
            &pick("max", "s.a", "t.a"),
            "s.a",
        ),
        "ReduceMin" => fold(
            input_highest,
            &pick("min", "s.a", "x"),
            &pick("min", "s.a", "t.a"),
            "s.a",
        ),
        "ReduceLogSumExp" => [
            format!("fn init() -> State {{ return State({lowest}, C(0), 0u); }}"),
            // (max, sum of exp(x - max)): merged by rescaling to the larger max. NaN sticks
            // in the max; a max of +inf is the result (inf - inf would make it NaN).
            format!(
                "{math}
fn lse(s: State, m2: C, s2: C) -> State {{
    if {nan_a} || {nan_m2} {{ return State(s.a + m2, C(1), 0u); }}
    let m = max(s.a, m2);
    if m == {lowest} {{ return State(m, C(0), 0u); }}
    if m == {highest} {{ return State(m, C(1), 0u); }}
    return State(m, s.b * {exp}(s.a - m) + s2 * {exp}(m2 - m), 0u);
}}
fn absorb(s: State, x: C, j: u32) -> State {{ return lse(s, x, C(1)); }}",
                nan_a = is_nan("s.a"),
                nan_m2 = is_nan("m2"),
            ),
            "fn merge(s: State, t: State) -> State { return lse(s, t.a, t.b); }".to_string(),
            result(&format!("s.a + {log}(s.b)")),
        ],
        arg => {
            let (cmp, last) = match arg {
                "ArgMax" => (">", false),
                "ArgMaxLast" => (">", true),
                "ArgMin" => ("<", false),
                _ => ("<", true),
            };
            // A state with no element yet has index NONE; later elements of one thread come
            // in order, so `>=` keeps the last of equal ones and `>` the first.
            let eq = if last { "=" } else { "" };
            let tie = if last { ">" } else { "<" };
            [
                "fn init() -> State { return State(C(0), C(0), 0xffffffffu); }".to_string(),
                format!("fn absorb(s: State, x: C, j: u32) -> State {{ if s.i == 0xffffffffu || x {cmp}{eq} s.a {{ return State(x, C(0), j); }} return s; }}"),
                format!("fn merge(s: State, t: State) -> State {{ if t.i != 0xffffffffu && (s.i == 0xffffffffu || t.a {cmp} s.a || (t.a == s.a && t.i {tie} s.i)) {{ return t; }} return s; }}"),
                "fn finish(s: State) -> vec2<u32> { return vec2<u32>(s.i, 0u); }".to_string(),
            ]
        }
    }
}

/// The INIT, ABSORB, MERGE and FINISH lines of `op` on i64 (`signed`) or u64 emulated on u32
/// pairs (`vec2<u32>`, low word first): the same results as the native lines, bit for bit.
fn emulated_op_lines(op: &str, signed: bool) -> [String; 4] {
    let lt = if signed { "lt_s64" } else { "lt_u64" };
    let zero = "vec2<u32>(0u, 0u)";
    let (lowest, highest) = if signed {
        (
            "vec2<u32>(0u, 0x80000000u)",
            "vec2<u32>(0xffffffffu, 0x7fffffffu)",
        )
    } else {
        (zero, "vec2<u32>(0xffffffffu, 0xffffffffu)")
    };
    let fold = |init: &str, absorb: &str, merge: &str, finish: &str| {
        [
            format!("{I64_EMULATION}\nfn init() -> State {{ return State({init}, C(0), 0u); }}"),
            format!("fn absorb(s: State, x: C, j: u32) -> State {{ return State({absorb}, s.b, s.i); }}"),
            format!("fn merge(s: State, t: State) -> State {{ return State({merge}, s.b, s.i); }}"),
            format!("fn finish(s: State) -> vec2<u32> {{ return {finish}; }}"),
        ]
    };
    let (abs, div, to_f32, from_f32) = if signed {
        ("abs64(x)", "div_s64", "i64_to_f32", "f32_to_i64")
    } else {
        ("x", "divmod_u64", "u64_to_f32", "f32_to_u64")
    };
    let quotient = if signed { "" } else { ".q" };
    match op {
        "ReduceSum" => fold(zero, "add64(s.a, x)", "add64(s.a, t.a)", "s.a"),
        "ReduceSumSquare" => fold(zero, "add64(s.a, mul64(x, x))", "add64(s.a, t.a)", "s.a"),
        "ReduceMean" => fold(
            zero,
            "add64(s.a, x)",
            "add64(s.a, t.a)",
            &format!("{div}(s.a, vec2<u32>(params.n, 0u)){quotient}"),
        ),
        "ReduceProd" => fold(
            "vec2<u32>(1u, 0u)",
            "mul64(s.a, x)",
            "mul64(s.a, t.a)",
            "s.a",
        ),
        "ReduceL1" => fold(
            zero,
            &format!("add64(s.a, {abs})"),
            "add64(s.a, t.a)",
            "s.a",
        ),
        // As the native path: the sum of squares to f32, its root truncated back.
        "ReduceL2" => fold(
            zero,
            "add64(s.a, mul64(x, x))",
            "add64(s.a, t.a)",
            &format!("{from_f32}(sqrt({to_f32}(s.a)))"),
        ),
        "ReduceMax" => fold(
            lowest,
            &format!("select(s.a, x, {lt}(s.a, x))"),
            &format!("select(s.a, t.a, {lt}(s.a, t.a))"),
            "s.a",
        ),
        "ReduceMin" => fold(
            highest,
            &format!("select(s.a, x, {lt}(x, s.a))"),
            &format!("select(s.a, t.a, {lt}(t.a, s.a))"),
            "s.a",
        ),
        arg => {
            // The native lines' `x > s.a`, `x >= s.a`, ... with the emulated order.
            let (takes, better) = match arg {
                "ArgMax" => (format!("{lt}(s.a, x)"), format!("{lt}(s.a, t.a)")),
                "ArgMaxLast" => (format!("!{lt}(x, s.a)"), format!("{lt}(s.a, t.a)")),
                "ArgMin" => (format!("{lt}(x, s.a)"), format!("{lt}(t.a, s.a)")),
                _ => (format!("!{lt}(s.a, x)"), format!("{lt}(t.a, s.a)")),
            };
            let tie = if arg.ends_with("Last") { ">" } else { "<" };
            [
                format!("{I64_EMULATION}\nfn init() -> State {{ return State(C(0), C(0), 0xffffffffu); }}"),
                format!("fn absorb(s: State, x: C, j: u32) -> State {{ if s.i == 0xffffffffu || {takes} {{ return State(x, C(0), j); }} return s; }}"),
                format!("fn merge(s: State, t: State) -> State {{ if t.i != 0xffffffffu && (s.i == 0xffffffffu || {better} || (all(t.a == s.a) && t.i {tie} s.i)) {{ return t; }} return s; }}"),
                "fn finish(s: State) -> vec2<u32> { return vec2<u32>(s.i, 0u); }".to_string(),
            ]
        }
    }
}

/// The INIT, ABSORB, MERGE and FINISH lines of `op` on f64 emulated on u32 pairs: the native
/// lines' operations (NaN kept by Max and Min, `x >= s.a` for the last of equal ones), each
/// rounded as the CPU rounds it; LogSum and LogSumExp with the emulation's exp and log.
pub(crate) fn emulated_f64_op_lines(op: &str) -> Option<[String; 4]> {
    let zero = "vec2<u32>(0u, 0u)";
    let fold = |init: &str, absorb: &str, merge: &str, finish: &str| {
        [
            format!("{I64_EMULATION}\n{F64_EMULATION}\nfn init() -> State {{ return State({init}, C(0), 0u); }}"),
            format!("fn absorb(s: State, x: C, j: u32) -> State {{ return State({absorb}, s.b, s.i); }}"),
            format!("fn merge(s: State, t: State) -> State {{ return State({merge}, s.b, s.i); }}"),
            format!("fn finish(s: State) -> vec2<u32> {{ return {finish}; }}"),
        ]
    };
    Some(match op {
        "ReduceSum" => fold(zero, "sf64_add(s.a, x)", "sf64_add(s.a, t.a)", "s.a"),
        "ReduceSumSquare" => fold(
            zero,
            "sf64_add(s.a, sf64_mul(x, x))",
            "sf64_add(s.a, t.a)",
            "s.a",
        ),
        "ReduceMean" => fold(
            zero,
            "sf64_add(s.a, x)",
            "sf64_add(s.a, t.a)",
            "sf64_div(s.a, sf64_from_u64(vec2<u32>(params.n, 0u)))",
        ),
        "ReduceProd" => fold(
            "vec2<u32>(0u, 0x3ff00000u)",
            "sf64_mul(s.a, x)",
            "sf64_mul(s.a, t.a)",
            "s.a",
        ),
        "ReduceL1" => fold(
            zero,
            "sf64_add(s.a, sf64_abs(x))",
            "sf64_add(s.a, t.a)",
            "s.a",
        ),
        "ReduceL2" => fold(
            zero,
            "sf64_add(s.a, sf64_mul(x, x))",
            "sf64_add(s.a, t.a)",
            "sf64_sqrt(s.a)",
        ),
        "ReduceMax" => fold(
            "vec2<u32>(0u, 0xfff00000u)",
            "sf64_max(s.a, x)",
            "sf64_max(s.a, t.a)",
            "s.a",
        ),
        "ReduceMin" => fold(
            "vec2<u32>(0u, 0x7ff00000u)",
            "sf64_min(s.a, x)",
            "sf64_min(s.a, t.a)",
            "s.a",
        ),
        "ReduceLogSum" => {
            let [i, a, m, _] = fold(zero, "sf64_add(s.a, x)", "sf64_add(s.a, t.a)", "s.a");
            [
                format!("{F64_EMULATION_MATH}\n{i}"),
                a,
                m,
                "fn finish(s: State) -> vec2<u32> { return sf64_log(s.a); }".to_string(),
            ]
        }
        // As the native lines: (max, sum of exp(x - max)), merged by rescaling to the larger
        // max; NaN sticks in the max, and a max of +inf is the result.
        "ReduceLogSumExp" => [
            format!("{I64_EMULATION}\n{F64_EMULATION}\n{F64_EMULATION_MATH}\nfn init() -> State {{ return State(vec2<u32>(0u, 0xfff00000u), C(0), 0u); }}"),
            "fn lse(s: State, m2: C, s2: C) -> State {
    if sf64_is_nan(s.a) || sf64_is_nan(m2) { return State(sf64_add(s.a, m2), vec2<u32>(0u, 0x3ff00000u), 0u); }
    let m = select(s.a, m2, sf64_lt(s.a, m2));
    if all(m == vec2<u32>(0u, 0xfff00000u)) { return State(m, C(0), 0u); }
    if all(m == vec2<u32>(0u, 0x7ff00000u)) { return State(m, vec2<u32>(0u, 0x3ff00000u), 0u); }
    return State(m, sf64_add(sf64_mul(s.b, sf64_exp(sf64_sub(s.a, m))), sf64_mul(s2, sf64_exp(sf64_sub(m2, m)))), 0u);
}
fn absorb(s: State, x: C, j: u32) -> State { return lse(s, x, vec2<u32>(0u, 0x3ff00000u)); }".to_string(),
            "fn merge(s: State, t: State) -> State { return lse(s, t.a, t.b); }".to_string(),
            "fn finish(s: State) -> vec2<u32> { return sf64_add(s.a, sf64_log(s.b)); }".to_string(),
        ],
        arg => {
            let (takes, better) = match arg {
                "ArgMax" => ("sf64_lt(s.a, x)", "sf64_lt(s.a, t.a)"),
                "ArgMaxLast" => ("sf64_le(s.a, x)", "sf64_lt(s.a, t.a)"),
                "ArgMin" => ("sf64_lt(x, s.a)", "sf64_lt(t.a, s.a)"),
                _ => ("sf64_le(x, s.a)", "sf64_lt(t.a, s.a)"),
            };
            let tie = if arg.ends_with("Last") { ">" } else { "<" };
            [
                format!("{I64_EMULATION}\n{F64_EMULATION}\nfn init() -> State {{ return State(C(0), C(0), 0xffffffffu); }}"),
                format!("fn absorb(s: State, x: C, j: u32) -> State {{ if s.i == 0xffffffffu || {takes} {{ return State(x, C(0), j); }} return s; }}"),
                format!("fn merge(s: State, t: State) -> State {{ if t.i != 0xffffffffu && (s.i == 0xffffffffu || {better} || (sf64_eq(t.a, s.a) && t.i {tie} s.i)) {{ return t; }} return s; }}"),
                "fn finish(s: State) -> vec2<u32> { return vec2<u32>(s.i, 0u); }".to_string(),
            ]
        }
    })
}

/// WGSL source of the reduction `op` on `input`; `emulate64`: an i64, u64 or f64 input is
/// computed on u32 pairs (adapters without `SHADER_INT64`, or `SHADER_F64`).
///
/// With a `prologue` (see `prologue_fits`), the input is not read from a buffer: element `i`
/// is the program's value at position `i` of the input's shape, its operands read at their
/// broadcast positions from the buffers bound after the output; its index code is compiled
/// for the walk rank `PROLOGUE_RANK` says (an override: 1 to 16; 0: any), straight-line for
/// `prologue_rank` axes where that is 4 or more.
pub fn reduce_source(
    op: &str,
    input: DType,
    emulate64: bool,
    prologue: Option<&Program>,
    prologue_rank: u8,
) -> String {
    let prologue_rank = usize::from(prologue_rank);
    let class = Class::of(input);
    let out = stored_dtype(op, input);
    let emulated = emulate64 && matches!(class, Class::Long | Class::Ulong | Class::Double);
    let [init, absorb, merge, finish] = if emulated && class == Class::Double {
        // Never asked of LogSum and LogSumExp (refused without the feature): any source.
        emulated_f64_op_lines(op)
            .unwrap_or_else(|| emulated_f64_op_lines("ReduceSum").expect("sums are emulated"))
    } else if emulated {
        emulated_op_lines(op, class == Class::Long)
    } else {
        op_lines(op, class, out, input)
    };
    let (ty, load, c_bits, c_from) = if emulated {
        (
            "vec2<u32>",
            "vec2<u32>(a_words[2u * i], a_words[2u * i + 1u])".to_string(),
            "fn c_bits(v: C) -> vec2<u32> { return v; }".to_string(),
            "fn c_from(w: vec2<u32>) -> C { return w; }".to_string(),
        )
    } else {
        (
            class.wgsl(),
            load_expression(input, "a_words"),
            c_bits_line(class),
            c_from_line(class),
        )
    };
    let mut load_a = format!("fn load_a(i: u32) -> A {{ return {load}; }}");
    let (mut params, mut bindings) = (String::new(), String::new());
    if let Some(p) = prologue {
        let n = p.operands().len();
        let parts = p.parts(3, false, "");
        params = "    pro: Prologue,".into();
        bindings = format!(
            "// The prologue's walk over the input: its rank, the operands' element offsets, the
// input's shape and each operand's element strides (innermost axis first).
{}
{}",
            walk_struct("Prologue", n),
            parts.bindings
        );
        // The program's result narrowed to its type, as storing it would.
        let value = if emulated {
            "prologue(i)".to_string()
        } else {
            narrow(p.out(), "prologue(i)")
        };
        load_a = format!(
            "{}
{}
// The rank of the prologue's walk the index code is compiled for (0: any).
override PROLOGUE_RANK: u32 = 0u;
fn prologue(e: u32) -> A {{
{}{}
}}
fn load_a(i: u32) -> A {{ return {value}; }}",
            parts.loads,
            parts.helpers.join("\n") + &parts.steps,
            index_code(n, "params.pro", "e", Some("PROLOGUE_RANK"), prologue_rank),
            parts.body
        );
    }
    specialize(
        REDUCE,
        &[
            ("// INPUT TYPE", format!("alias A = {ty};")),
            ("// STATE TYPE", format!("alias C = {ty};")),
            ("// LOAD A", load_a),
            ("// PROLOGUE PARAMS", params),
            ("// PROLOGUE BINDINGS", bindings),
            // A prologue's steps also call the f32 math of the programs (`onnx_tanh`, ...).
            (
                "// WORD HELPERS",
                match prologue {
                    Some(_) => super::words::program_helpers(),
                    None => super::words::word_helpers(),
                }
                .to_string(),
            ),
            ("// INIT", init),
            ("// C BITS", c_bits),
            ("// C FROM", c_from),
            ("// ABSORB", absorb),
            ("// MERGE", merge),
            ("// FINISH", finish),
        ],
    )
}

/// A state value's bits as a word pair.
fn c_bits_line(class: Class) -> String {
    let e = match class {
        Class::Float | Class::Int => "vec2<u32>(bitcast<u32>(v), 0u)",
        Class::Uint | Class::Bool => "vec2<u32>(v, 0u)",
        Class::Double | Class::Long => {
            "vec2<u32>(u32(bitcast<u64>(v) & 0xfffffffflu), u32(bitcast<u64>(v) >> 32u))"
        }
        Class::Ulong => "vec2<u32>(u32(v & 0xfffffffflu), u32(v >> 32u))",
    };
    format!("fn c_bits(v: C) -> vec2<u32> {{ return {e}; }}")
}

/// A state value from its word pair.
fn c_from_line(class: Class) -> String {
    let pair = "((u64(w.y) << 32u) | u64(w.x))";
    let e = match class {
        Class::Float => "bitcast<f32>(w.x)".to_string(),
        Class::Int => "bitcast<i32>(w.x)".to_string(),
        Class::Uint | Class::Bool => "w.x".to_string(),
        Class::Double => format!("bitcast<f64>{pair}"),
        Class::Long => format!("bitcast<i64>{pair}"),
        Class::Ulong => pair.to_string(),
    };
    format!("fn c_from(w: vec2<u32>) -> C {{ return {e}; }}")
}

/// The wgpu features a reduction of `input` needs (none for i64 and u64 when `emulate64`).
pub fn reduce_features(input: DType, emulate64: bool) -> wgpu::Features {
    super::words::words_features(&[input], Class::of(input).wide(), emulate64)
}

#[repr(C)]
#[derive(Clone, Copy, bytemuck::Pod, bytemuck::Zeroable)]
struct ReduceParams {
    rows: u32,
    n: u32,
    keep_rank: u32,
    reduce_rank: u32,
    keep_shape: [u32; MAX_RANK],
    keep_stride: [u32; MAX_RANK],
    reduce_shape: [u32; MAX_RANK],
    reduce_stride: [u32; MAX_RANK],
    chunks: u32,
    chunk_len: u32,
    base: u32,
    dst_base: u32,
    i_step: u32,
    state_row_step: u32,
    state_chunk_step: u32,
    pad: u32,
}

impl ReduceParams {
    /// The parameters of `rows` outputs kept along `keep` and reduced along `reduce` ((extent,
    /// stride), outermost first; every index checked to fit u32), from input element `base`
    /// into output element `dst_base` on.
    fn new(
        keep: &[(usize, usize)],
        reduce: &[(usize, usize)],
        rows: u64,
        bases: (u64, u64),
    ) -> Self {
        let mut params = ReduceParams {
            rows: rows as u32,
            n: 1,
            keep_rank: 0,
            reduce_rank: 0,
            keep_shape: [1; MAX_RANK],
            keep_stride: [0; MAX_RANK],
            reduce_shape: [1; MAX_RANK],
            reduce_stride: [0; MAX_RANK],
            chunks: 1,
            chunk_len: 0,
            base: bases.0 as u32,
            dst_base: bases.1 as u32,
            i_step: 0,
            state_row_step: 1,
            state_chunk_step: 1,
            pad: 0,
        };
        // Innermost first, as the kernel decomposes indices.
        for (dim, stride) in merged_axes(reduce).into_iter().rev() {
            let r = params.reduce_rank as usize;
            params.reduce_shape[r] = dim as u32;
            params.reduce_stride[r] = stride as u32;
            params.reduce_rank += 1;
            params.n *= dim as u32;
        }
        for &(dim, stride) in keep.iter().rev() {
            let r = params.keep_rank as usize;
            params.keep_shape[r] = dim as u32;
            params.keep_stride[r] = stride as u32;
            params.keep_rank += 1;
        }
        params
    }
}

/// The most operands a reduction's prologue reads: WebGPU's 8 storage buffers per stage, less
/// the (unused) input's binding and the output's, and one spare.
pub const MAX_PROLOGUE_LEAVES: usize = 5;

/// Whether `program` over `leaves` can be the prologue of a reduction of its values of
/// `shape`: few enough operands, each bound whole and broadcast to `shape`, no 64-bit
/// integers emulated on u32 pairs, and a result of the type the reduction reads.
pub(crate) fn prologue_fits(
    ctx: &crate::Context,
    program: &Program,
    leaves: &[&Tensor],
    shape: &[usize],
) -> bool {
    let out = program.out();
    let emulated = super::operands::emulated(ctx, out)
        || program
            .operands()
            .iter()
            .any(|&d| super::operands::emulated(ctx, d));
    leaves.len() == program.operands().len()
        && (1..=MAX_PROLOGUE_LEAVES).contains(&leaves.len())
        && shape.len() <= MAX_RANK
        && !emulated
        && program.value_type(out) == Class::of(out).wgsl()
        && leaves.iter().zip(program.operands()).all(|(t, &d)| {
            t.dtype() == d
                && t.rank() <= shape.len()
                && t.shape()
                    .iter()
                    .rev()
                    .zip(shape.iter().rev())
                    .all(|(&a, &b)| a == b || a == 1)
        })
        && super::matmul::binds_whole(ctx, leaves)
        && shape.iter().product::<usize>() as u64 <= u64::from(u32::MAX)
}

/// The binding layout of a reduction whose prologue reads `leaves` tensors.
pub fn reduce_bindings(leaves: usize) -> &'static [Binding] {
    use Binding::{StorageRead as R, StorageReadWrite as W, Uniform as U};
    const LAYOUTS: [&[Binding]; MAX_PROLOGUE_LEAVES + 1] = [
        &[U, R, W],
        &[U, R, W, R],
        &[U, R, W, R, R],
        &[U, R, W, R, R, R],
        &[U, R, W, R, R, R, R],
        &[U, R, W, R, R, R, R, R],
    ];
    LAYOUTS[leaves.min(MAX_PROLOGUE_LEAVES)]
}

/// Where a reduction reads its input: the kept axes (one output element per position, in C
/// order) and the reduced axes (folded in C order), each as (extent, element stride in the
/// input), outermost first. Over a tensor's own axes the strides are its C strides; a pool's
/// windows are such a walk over its padded input (output positions step by the strides,
/// window positions by the dilations), so they are reduced where they lie, never gathered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ReduceWalk {
    pub keep: Vec<(usize, usize)>,
    pub reduce: Vec<(usize, usize)>,
}

impl ReduceWalk {
    /// The walk of a reduction over `axes` (sorted, distinct, in range) of a C-order `shape`.
    pub fn over_axes(shape: &[usize], axes: &[usize]) -> ReduceWalk {
        let strides = crate::host::c_strides(shape);
        let (mut keep, mut reduce) = (Vec::new(), Vec::new());
        for (k, (&dim, &stride)) in shape.iter().zip(&strides).enumerate() {
            let side = if axes.contains(&k) {
                &mut reduce
            } else {
                &mut keep
            };
            side.push((dim, stride as usize));
        }
        ReduceWalk { keep, reduce }
    }

    /// The reduced axes once merged ([`merged_axes`]) as the kernel is compiled for them
    /// (`REDUCED_RANK`): 1 or 2, else 0 (any).
    fn reduced_rank(&self) -> u8 {
        match merged_axes(&self.reduce).len() {
            r @ (1 | 2) => r as u8,
            _ => 0,
        }
    }

    /// The largest element index the walk reads (0 when it reads nothing).
    fn last_index(&self) -> u64 {
        last_of(self.keep.iter().chain(&self.reduce))
    }

    /// Elements from a row's first read to its last, inclusive (1 when nothing is reduced).
    fn reach(&self) -> u64 {
        last_of(self.reduce.iter()) + 1
    }

    /// The internal error unless the walk keeps `rows` outputs, has ranks the kernel takes
    /// and reads only the `numel` elements of its input.
    fn check(&self, op: &str, numel: u64, rows: u64) -> Result<()> {
        let kept: u64 = positions(&self.keep);
        if kept != rows
            || self.keep.len() > MAX_RANK
            || self.reduce.len() > MAX_RANK
            || self.last_index() >= numel.max(1)
        {
            return Err(Error::Graph(format!(
                "internal: {op} walk {self:?} does not fit an input of {numel} elements and {rows} outputs"
            )));
        }
        Ok(())
    }
}

/// The largest offset that axes of (extent, stride) reach (0 when one is empty).
fn last_of<'a>(mut axes: impl Iterator<Item = &'a (usize, usize)> + Clone) -> u64 {
    if axes.clone().any(|&(len, _)| len == 0) {
        return 0;
    }
    axes.by_ref()
        .map(|&(len, stride)| (len as u64 - 1) * stride as u64)
        .sum()
}

/// Elements of one chunk of a row too long for one window (a workgroup folds each): enough
/// chunks to spread a long row over a GPU, few enough states to merge.
const CHUNK_ELEMENTS: u64 = 1 << 16;

/// Bytes of a fold's state in passes 1, 4 and 5: two word pairs and an index.
const STATE_BYTES: u64 = 20;

/// Where [`Recorder::reduce_pieces`] writes position p of its walk: element `base + p` of
/// `dst`, a result of `elem` bytes, or (`states`) a state of `dst` bound whole.
struct Target<'a> {
    dst: &'a crate::storage::Storage,
    elem: u64,
    base: u64,
    states: bool,
}

/// Reduced axes (extent, stride), outermost first, merged as [`Walk::merged`] merges a walk's
/// axes (adjacent ones that step as one, extents of 1 dropped): the same elements in the same
/// order, with fewer divisions per element (and one axis where the kernel divides by none).
fn merged_axes(axes: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let walk = Walk {
        lens: axes.iter().map(|&(len, _)| len as u64).collect(),
        steps: axes
            .iter()
            .map(|&(_, stride)| vec![stride as u64])
            .collect(),
        bases: vec![0],
        extents: vec![1],
    }
    .merged();
    walk.lens
        .iter()
        .zip(&walk.steps)
        .filter(|&(&len, _)| len != 1)
        .map(|(&len, step)| (len as usize, step[0] as usize))
        .collect()
}

/// The largest divisor of `n` that is at most `most` (`None` where `most` is 0): the longest
/// chunk that tiles a buffer of `n` elements.
fn largest_divisor_up_to(n: u64, most: u64) -> Option<u64> {
    (1..=most).rev().find(|&c| n.is_multiple_of(c))
}

/// Of reduced axes `reduce` (merged, outermost first), how many are left once the innermost
/// ones that a window of `room` elements holds whole are taken, and the reach of those.
fn held_whole(reduce: &[(usize, usize)], room: u64) -> (usize, u64) {
    let mut split = reduce.len();
    let mut inner_reach = 1u64;
    while let Some(&(len, stride)) = split.checked_sub(1).map(|k| &reduce[k]) {
        let reach = (len as u64 - 1) * stride as u64 + inner_reach;
        if reach > room {
            break;
        }
        inner_reach = reach;
        split -= 1;
    }
    (split, inner_reach)
}

/// Positions of axes given as (extent, stride): the product of the extents.
fn positions(axes: &[(usize, usize)]) -> u64 {
    axes.iter().map(|&(len, _)| len as u64).product()
}

/// A box of kept positions: its input offset, its first position, its axes.
type RowGroup = (u64, u64, Vec<(usize, usize)>);

/// The positions of kept axes `keep` ((extent, input stride), outermost first) cut, in C order,
/// into boxes of at most `most` positions: (input offset, first position, the box's axes)
/// each, the offsets counted from `at`.
fn row_groups(keep: &[(usize, usize)], most: u64, at: (u64, u64), groups: &mut Vec<RowGroup>) {
    let count: u64 = positions(keep);
    let Some((&(len, stride), inner)) = keep.split_first().filter(|_| count > most) else {
        groups.push((at.0, at.1, keep.to_vec()));
        return;
    };
    let inner_count: u64 = positions(inner);
    let (len, stride) = (len as u64, stride as u64);
    let run = (most / inner_count).max(1);
    let mut a = 0;
    while a < len {
        let here = (at.0 + a * stride, at.1 + a * inner_count);
        if inner_count > most {
            row_groups(inner, most, here, groups);
            a += 1;
            continue;
        }
        let k = run.min(len - a);
        let mut axes = vec![(k as usize, stride as usize)];
        axes.extend_from_slice(inner);
        groups.push((here.0, here.1, axes));
        a += k;
    }
}

impl Recorder {
    /// [`Recorder::reduce_walk_into`] of an input or output too large to bind whole: the walk
    /// cut along its kept axes, in order, into runs of outputs whose inputs and outputs each
    /// fit one window, a dispatch each (a workgroup or a thread per row, as for whole
    /// bindings). Rows that do not fit one window are cut into chunks
    /// ([`Recorder::reduce_long_rows`]); `refused` is the error where that fails too. The walk
    /// is checked by the caller.
    fn reduce_in_windows(
        &mut self,
        op: &'static str,
        x: &Tensor,
        walk: &ReduceWalk,
        out: &Tensor,
        refused: Error,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let rows = out.numel() as u64;
        let n: u64 = positions(&walk.reduce);
        // Chosen for the whole walk, so every piece folds its rows alike.
        let one_thread = n <= SHORT_ROW || many_short_rows(&ctx, walk, rows, n);
        let target = Target {
            dst: out.storage(),
            elem: out.dtype().size() as u64,
            base: 0,
            states: false,
        };
        if self.reduce_pieces(op, x, walk, 0, &target, one_thread)? {
            return Ok(());
        }
        // Rows that lie across the end of one of the input's buffers: a copy laid out in
        // buffers of whole slices of rows (the smallest trailing block of the shape that
        // holds a row's reach).
        let reach = walk.reach();
        let mut slice = 1u64;
        for &d in x.shape().iter().rev() {
            if slice >= reach {
                break;
            }
            slice *= d as u64;
        }
        let elem = x.dtype().size() as u64;
        if let Some(relaid) = self.relaid_in_whole_slices(x, slice * elem, true)? {
            if self.reduce_pieces(op, &relaid, walk, 0, &target, one_thread)?
                || self.reduce_long_rows(op, &relaid, walk, out, None)?
            {
                return Ok(());
            }
        }
        if self.reduce_long_rows(op, x, walk, out, None)? {
            return Ok(());
        }
        self.reduce_in_chunk_copy(op, x, walk, out, refused)
    }

    /// Rows of `x` whose chunks lie across the ends of its buffers (a row longer than a
    /// buffer, a sum over the first axis of a tall matrix whose rows do not tile a buffer):
    /// reduced in chunks (see [`Self::reduce_long_rows`]) from a copy in which the chunk axis
    /// (the outermost reduced axis a window does not hold whole, or the outermost) is padded
    /// to whole chunks and laid out in buffers of whole chunks, so that no chunk lies across a
    /// buffer end. The walk must read `x` as C-order axes do (the chunk axis a run of the
    /// shape, the other axes inside or outside it), else `refused`.
    fn reduce_in_chunk_copy(
        &mut self,
        op: &'static str,
        x: &Tensor,
        walk: &ReduceWalk,
        out: &Tensor,
        refused: Error,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let elem = x.dtype().size() as u64;
        let room = room(ctx.binding_limit(), ctx.window_alignment(op, elem)?, elem);
        let reduce = merged_axes(&walk.reduce);
        let keep = merged_axes(&walk.keep);
        let split = held_whole(&reduce, room).0.max(1);
        let Some(&(len, stride)) = reduce.get(split - 1) else {
            return Err(refused);
        };
        let (len, stride) = (len as u64, stride as u64);
        let inner = &reduce[split..];
        let inner_reach = last_of(inner.iter()) + 1;
        // x as [outer, len, stride]: the other axes step inside one element of the chunk axis
        // or over whole runs of it.
        let block = len * stride;
        let numel = x.numel() as u64;
        let others = keep.iter().chain(&reduce[..split - 1]).chain(inner);
        let inside = || others.clone().filter(|&&(_, s)| (s as u64) < stride);
        if !numel.is_multiple_of(block)
            || others
                .clone()
                .any(|&(_, s)| (s as u64) >= stride && !(s as u64).is_multiple_of(block))
            || last_of(inside()) >= stride
            || inner_reach > room
        {
            return Err(refused);
        }
        // The longest chunk a window holds, in whole 16-byte quads (the copy's buffers must
        // be) and no longer than a buffer.
        let quads = 16 / gcd(stride * elem, 16);
        let inner_n: u64 = positions(inner);
        let chunk = ((room - inner_reach) / stride + 1)
            .min((CHUNK_ELEMENTS / inner_n).max(1))
            .min(len)
            .min(ctx.max_buffer_size() / (stride * elem))
            / quads
            * quads;
        if chunk == 0 {
            return Err(refused);
        }
        let padded = len.div_ceil(chunk) * chunk;
        let chunk_bytes = chunk * stride * elem;
        let segment = ctx.max_buffer_size() / chunk_bytes * chunk_bytes;
        let (Ok(outer_n), Ok(padded_n), Ok(stride_n), Ok(len_n)) = (
            usize::try_from(numel / block),
            usize::try_from(padded),
            usize::try_from(stride),
            usize::try_from(len),
        ) else {
            return Err(refused);
        };
        let copy = self.scratch(x.dtype(), &[outer_n, padded_n, stride_n], segment)?;
        let axis = |out_len: usize, len: usize| PadAxis {
            out_len,
            len,
            before: 0,
            crop: 0,
        };
        let axes = [
            axis(outer_n, outer_n),
            axis(padded_n, len_n),
            axis(stride_n, stride_n),
        ];
        let shape = [outer_n, len_n, stride_n];
        self.pad_into(op, &x.reshaped(&shape)?, &axes, PadMode::Constant, 0, &copy)?;
        // The same walk over the copy: steps over whole runs of the chunk axis grow with it.
        let relaid = |axes: &[(usize, usize)]| -> Vec<(usize, usize)> {
            axes.iter()
                .map(|&(n, s)| {
                    let s = s as u64;
                    let s = if s >= block { s / len * padded } else { s };
                    (n, s as usize)
                })
                .collect()
        };
        let walk = ReduceWalk {
            keep: relaid(&keep),
            reduce: relaid(&reduce),
        };
        if self.reduce_long_rows(op, &copy, &walk, out, Some((split, chunk)))? {
            return Ok(());
        }
        Err(refused)
    }

    /// One dispatch per piece of `walk` over `x` from input element `in_base` on (see
    /// [`Self::reduce_pieces_of`]). False, with nothing recorded, where one row alone does not
    /// fit a window.
    fn reduce_pieces(
        &mut self,
        op: &'static str,
        x: &Tensor,
        walk: &ReduceWalk,
        in_base: u64,
        target: &Target<'_>,
        one_thread: bool,
    ) -> Result<bool> {
        let Some(pieces) = self.reduce_pieces_of(op, x, walk, in_base, target)? else {
            return Ok(false);
        };
        self.record_reduce_pieces(op, x, walk, pieces, target, one_thread)?;
        Ok(true)
    }

    /// `walk` over `x` from input element `in_base` on, cut along the kept axes into pieces
    /// whose input (and output, unless it is states) each fit one window, and the windows'
    /// alignment; `None` where one row alone does not fit one.
    fn reduce_pieces_of(
        &self,
        op: &'static str,
        x: &Tensor,
        walk: &ReduceWalk,
        in_base: u64,
        target: &Target<'_>,
    ) -> Result<Option<(Vec<Walk>, u64)>> {
        let ctx = self.context();
        let out_strides =
            crate::host::c_strides(&walk.keep.iter().map(|&(len, _)| len).collect::<Vec<_>>());
        let whole = Walk {
            lens: walk.keep.iter().map(|&(len, _)| len as u64).collect(),
            steps: walk
                .keep
                .iter()
                .zip(&out_strides)
                .map(|(&(_, stride), &o)| vec![stride as u64, o])
                .collect(),
            bases: vec![in_base, target.base],
            extents: vec![walk.reach(), 1],
        }
        .merged();
        let storages = [&**x.storage(), target.dst];
        let elems = [x.dtype().size() as u64, target.elem];
        // States are bound whole: only the input's windows constrain the pieces.
        let elem = if target.states {
            elems[0]
        } else {
            elems[0].max(elems[1])
        };
        let limit = ctx.binding_limit();
        let align = ctx.window_alignment(op, elem)?;
        let (_, mut segments) = super::operands::layout_of(&storages, limit, &elems);
        if target.states {
            segments[1] = u64::MAX;
        }
        Ok(whole
            .split(room(limit, align, elem), &segments)
            .map(|pieces| (pieces, align)))
    }

    /// One dispatch per piece of `walk` from [`Self::reduce_pieces_of`].
    fn record_reduce_pieces(
        &mut self,
        op: &'static str,
        x: &Tensor,
        walk: &ReduceWalk,
        (pieces, align): (Vec<Walk>, u64),
        target: &Target<'_>,
        one_thread: bool,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let storages = [&**x.storage(), target.dst];
        let elems = [x.dtype().size() as u64, target.elem];
        let emulate64 = super::operands::emulated(&ctx, x.dtype());
        let pass = match (target.states, one_thread) {
            (false, false) => 0,
            (false, true) => 3,
            (true, false) => 4,
            (true, true) => 5,
        };
        // Passes 0 and 4: `lanes` threads per row, as for whole bindings.
        let lanes = if one_thread {
            WORKGROUP
        } else {
            lanes_for(positions(&walk.reduce))
        };
        let pipeline = ctx.pipeline(&Kernel::Reduce {
            op,
            input: x.dtype(),
            prologue: None,
            pass,
            emulate64,
            reduced_rank: walk.reduced_rank(),
            prologue_rank: 0,
            lanes,
        })?;
        for piece in pieces {
            let windowed = if target.states { 1 } else { 2 };
            let (mut firsts, mut bindings) = super::operands::bind_windows(
                &storages[..windowed],
                &piece,
                false,
                align,
                &elems[..windowed],
            );
            if target.states {
                firsts.push(piece.bases[1]);
                bindings.push(target.dst.bind_whole());
            }
            let keep: Vec<(usize, usize)> = piece
                .lens
                .iter()
                .zip(&piece.steps)
                .map(|(&len, steps)| (len as usize, steps[0] as usize))
                .collect();
            let piece_rows = piece.count();
            if firsts[0] + piece.span(0) > u64::from(u32::MAX) {
                return Err(super::operands::too_many(
                    op,
                    "an input window",
                    piece.span(0),
                ));
            }
            let params = ReduceParams::new(&keep, &walk.reduce, piece_rows, (firsts[0], firsts[1]));
            let groups = if one_thread {
                piece_rows.div_ceil(u64::from(WORKGROUP))
            } else {
                piece_rows.div_ceil(u64::from(WORKGROUP / lanes))
            };
            let grid = grid_for(&ctx, op, groups, 1)?;
            self.dispatch(op, &pipeline, bytemuck::bytes_of(&params), &bindings, grid)?;
        }
        Ok(())
    }

    /// Rows too long for one window (a whole-tensor sum of a tensor beyond a binding): each
    /// row cut into chunks along the outermost of its reduced axes that one window does not
    /// hold, each chunk folded into a state in windows of the input (pass 4, or 5 for short
    /// chunks), then each row's states merged (pass 2). The chunk axes are the outermost axes
    /// of those walks, so that a window holds one chunk of many rows (a sum over the first
    /// axis of a tall matrix), and the states are stored chunk by chunk. Rows go in groups
    /// whose states fit one binding and whose outputs fit one window (a sum over the first axis
    /// of [2, n]: a state per element). An error where one row's states do not fit.
    /// `given`: the chunk axis (as [`held_whole`] counts it) and length to take (a copy laid
    /// out in whole chunks), else chosen here. False, with nothing recorded, where a chunk lies
    /// across a buffer end of `x` or a group's outputs across one of `out`.
    fn reduce_long_rows(
        &mut self,
        op: &'static str,
        x: &Tensor,
        walk: &ReduceWalk,
        out: &Tensor,
        given: Option<(usize, u64)>,
    ) -> Result<bool> {
        let ctx = self.context().clone();
        let limit = ctx.binding_limit();
        let elem = x.dtype().size() as u64;
        let room = room(limit, ctx.window_alignment(op, elem)?, elem);
        let reduce = merged_axes(&walk.reduce);
        let (split, inner_reach) = match given {
            Some((split, _)) => (split, last_of(reduce[split..].iter()) + 1),
            None => held_whole(&reduce, room),
        };
        if split == 0 || inner_reach > room || x.numel() as u64 > u64::from(u32::MAX) {
            return Ok(false);
        }
        let (len, stride) = reduce[split - 1];
        let (outer, inner) = (&reduce[..split - 1], &reduce[split..]);
        let inner_n: u64 = positions(inner);
        let mut chunk = given.map_or_else(
            || {
                ((room - inner_reach) / stride as u64 + 1)
                    .min((CHUNK_ELEMENTS / inner_n).max(1))
                    .min(len as u64)
            },
            |(_, chunk)| chunk,
        );
        // In a tensor of several buffers, chunks that tile a buffer never cross its end.
        let segment = x.storage().segments().segment / elem;
        if given.is_none()
            && x.storage().buffers().len() > 1
            && segment.is_multiple_of(stride as u64)
        {
            let per_segment = segment / stride as u64;
            if let Some(tiles) = largest_divisor_up_to(per_segment, chunk) {
                chunk = tiles;
            }
        }
        let (whole, tail) = (len as u64 / chunk, len as u64 % chunk);
        let outer_count: u64 = positions(outer);
        let chunks = outer_count * (whole + u64::from(tail > 0));
        // Rows in groups whose states fit one binding and whose outputs fit one window.
        let out_elem = out.dtype().size() as u64;
        let out_align = ctx.window_alignment(op, out_elem)?;
        let out_room = super::windows::room(limit, out_align, out_elem);
        // The states are bound whole: one buffer holds them.
        let state_room = limit.min(ctx.max_buffer_size());
        let per_group = (state_room / (chunks * STATE_BYTES)).min(out_room);
        if per_group == 0 {
            return Err(Error::LimitExceeded {
                op,
                what: format!("the states of one row's {chunks} chunks, bound at once"),
                limit: "max_storage_buffer_binding_size",
                needed: chunks * STATE_BYTES,
                max: state_room,
            });
        }
        let mut groups = Vec::new();
        row_groups(&walk.keep, per_group, (0, 0), &mut groups);
        let out_segment = out.storage().segments().segment / out_elem;
        if groups.iter().any(|(_, first, keep)| {
            first / out_segment != (first + positions(keep) - 1) / out_segment
        }) {
            return Ok(false);
        }
        let most = groups
            .iter()
            .map(|(_, _, keep)| positions(keep))
            .max()
            .unwrap_or(0);
        // Each group's parts (walk, input base, first state), whole chunks first, then the
        // tails (chunk c of row r: state c * rows + r), cut into pieces before anything is
        // recorded.
        let states = self.alloc(DType::U32, &[(most * chunks * 5) as usize])?;
        let mut planned = Vec::with_capacity(groups.len());
        for (group_base, first, keep) in groups {
            let rows = positions(&keep);
            let mut parts = Vec::new();
            if whole > 0 {
                let mut axes = outer.to_vec();
                axes.push((whole as usize, chunk as usize * stride));
                axes.extend_from_slice(&keep);
                let mut reduce = vec![(chunk as usize, stride)];
                reduce.extend_from_slice(inner);
                parts.push((ReduceWalk { keep: axes, reduce }, group_base, 0));
            }
            if tail > 0 {
                let mut axes = outer.to_vec();
                axes.extend_from_slice(&keep);
                let mut reduce = vec![(tail as usize, stride)];
                reduce.extend_from_slice(inner);
                let at = group_base + whole * chunk * stride as u64;
                let walk = ReduceWalk { keep: axes, reduce };
                parts.push((walk, at, outer_count * whole * rows));
            }
            let mut pieces = Vec::with_capacity(parts.len());
            for (part, in_base, state_base) in parts {
                let target = Target {
                    dst: states.storage(),
                    elem: STATE_BYTES,
                    base: state_base,
                    states: true,
                };
                let Some(cut) = self.reduce_pieces_of(op, x, &part, in_base, &target)? else {
                    self.release(states);
                    return Ok(false);
                };
                pieces.push((part, state_base, cut));
            }
            planned.push((first, keep, pieces));
        }
        // Few chunks per row: a thread merges them (a workgroup's tree would idle).
        let one_thread = chunks <= SHORT_ROW;
        let merge = ctx.pipeline(&Kernel::Reduce {
            op,
            input: x.dtype(),
            prologue: None,
            pass: if one_thread { 6 } else { 2 },
            emulate64: super::operands::emulated(&ctx, x.dtype()),
            reduced_rank: 0,
            prologue_rank: 0,
            lanes: WORKGROUP,
        })?;
        for (first, keep, pieces) in planned {
            let rows = positions(&keep);
            for (part, state_base, cut) in pieces {
                let part_rows = positions(&part.keep);
                let part_n: u64 = positions(&part.reduce);
                let one_thread =
                    part_n <= SHORT_ROW || many_short_rows(&ctx, &part, part_rows, part_n);
                let target = Target {
                    dst: states.storage(),
                    elem: STATE_BYTES,
                    base: state_base,
                    states: true,
                };
                self.record_reduce_pieces(op, x, &part, cut, &target, one_thread)?;
            }
            let window = out.storage().segments().window(
                first * out_elem,
                (first + rows) * out_elem,
                out_align,
            );
            let dst_base = first - window.start / out_elem;
            let mut params = ReduceParams::new(&keep, &walk.reduce, rows, (0, dst_base));
            params.chunks = chunks as u32;
            params.state_row_step = 1;
            params.state_chunk_step = rows as u32;
            // ArgMax and ArgMin reduce one axis: their chunks are runs of `chunk` along it.
            params.i_step = (chunk * inner_n) as u32;
            let bindings = [states.storage().bind_whole(), out.storage().bind(window)];
            let workgroups = if one_thread {
                rows.div_ceil(u64::from(WORKGROUP))
            } else {
                rows
            };
            let grid = grid_for(&ctx, op, workgroups, 1)?;
            self.dispatch(op, &merge, bytemuck::bytes_of(&params), &bindings, grid)?;
        }
        self.release(states);
        Ok(true)
    }

    /// Records reduction `op` of `data` over `axes` (sorted, distinct, in range) into `out`,
    /// whose elements are the kept coordinates in C order, stored as [`stored_dtype`]. A
    /// program's prologue must fit ([`prologue_fits`]).
    pub(crate) fn reduce_into(
        &mut self,
        op: &'static str,
        data: Values<'_>,
        axes: &[usize],
        out: &Tensor,
    ) -> Result<()> {
        let walk = ReduceWalk::over_axes(data.shape(), axes);
        self.reduce_walk_into(op, data, &walk, out)
    }

    /// Records reduction `op` of the elements of `data` that `walk` reads into `out` (as
    /// [`Recorder::reduce_into`]). A program's values are read in their C order, so a
    /// prologue takes only the walk of its own axes.
    pub(crate) fn reduce_walk_into(
        &mut self,
        op: &'static str,
        data: Values<'_>,
        walk: &ReduceWalk,
        out: &Tensor,
    ) -> Result<()> {
        let rows = out.numel() as u64;
        if rows == 0 {
            return Ok(());
        }
        let ctx = self.context().clone();
        let (dtype, shape) = (data.dtype(), data.shape().to_vec());
        // The input's binding (a prologue's leaves bind after the output; the input binding
        // then holds its first leaf, unread) and the prologue's.
        let (storage, prologue) = match data {
            Values::Tensor(x) => (x.storage().clone(), None),
            Values::Program {
                program, leaves, ..
            } => {
                // Kept for the kernel's key.
                let program = intern(program.clone());
                if !prologue_fits(&ctx, program, leaves, &shape) {
                    return Err(Error::Graph(format!(
                        "internal: {op} prologue {} does not fit",
                        program.describe()
                    )));
                }
                (leaves[0].storage().clone(), Some((program, leaves)))
            }
        };
        let numel: u64 = shape.iter().map(|&d| d as u64).product();
        walk.check(op, numel, rows)?;
        let limit = ctx.binding_limit();
        let fits = |s: &crate::storage::Storage| s.fits_one_binding(limit);
        if !fits(&storage) || !fits(out.storage()) {
            let refused = if !fits(&storage) && storage.size() <= limit {
                // Small enough to bind, but in several buffers: its rows lie across their ends.
                Error::LimitExceeded {
                    op,
                    what: "an input whose rows lie across the ends of its buffers, in one buffer"
                        .into(),
                    limit: "max_buffer_size",
                    needed: storage.size(),
                    max: storage.segments().segment,
                }
            } else {
                let (what, needed) = if fits(&storage) {
                    ("the output bound at once", out.storage().size())
                } else {
                    ("an input bound at once", storage.size())
                };
                Error::LimitExceeded {
                    op,
                    what: what.into(),
                    limit: "max_storage_buffer_binding_size",
                    needed,
                    max: limit,
                }
            };
            return match data {
                Values::Tensor(x) => self.reduce_in_windows(op, x, walk, out, refused),
                Values::Program { .. } => Err(refused),
            };
        }
        // Every index the kernel forms fits u32.
        if numel > u64::from(u32::MAX) {
            return Err(Error::Graph(format!(
                "internal: {op} input of {shape:?} reaches past 32-bit indices"
            )));
        }
        let emulate64 = super::operands::emulated(&ctx, dtype);
        let mut params = ReduceParams::new(&walk.keep, &walk.reduce, rows, (0, 0));
        // A prologue's walk over the input (its operands bound whole, from their first
        // element), after the parameters of the passes that read the input.
        let mut bytes = bytemuck::bytes_of(&params).to_vec();
        let mut leaf_bindings = Vec::new();
        let mut prologue_rank = None;
        if let Some((_, leaves)) = prologue {
            let words = broadcast_walk_words(leaves, &shape);
            prologue_rank = Some(walk_rank(&words));
            bytes.extend_from_slice(bytemuck::cast_slice(&words));
            leaf_bindings.extend(leaves.iter().map(|leaf| leaf.storage().bind_whole()));
        }
        let kernel = |pass: u8, lanes: u32| Kernel::Reduce {
            op,
            input: dtype,
            // Pass 2 reads the states pass 1 wrote, not the input.
            prologue: prologue.filter(|_| pass != 2).map(|(p, _)| p),
            pass,
            emulate64,
            reduced_rank: if pass == 2 { 0 } else { walk.reduced_rank() },
            prologue_rank: prologue_rank.filter(|_| pass != 2).unwrap_or(0),
            lanes,
        };
        let n = u64::from(params.n);
        let (chunks, lanes) = match RowKernel::choose(&ctx, walk, rows, n) {
            RowKernel::Thread => (None, WORKGROUP),
            RowKernel::Group(lanes) => (Some(1), lanes),
            RowKernel::Chunks(c) => (Some(c), WORKGROUP),
        };
        let Some(chunks) = chunks else {
            let pipeline = ctx.pipeline(&kernel(3, WORKGROUP))?;
            let mut bindings = vec![storage.bind_whole(), out.storage().bind_whole()];
            bindings.extend(leaf_bindings);
            let grid = grid_for(&ctx, op, rows.div_ceil(u64::from(WORKGROUP)), 1)?;
            return self.dispatch(op, &pipeline, &bytes, &bindings, grid);
        };
        if chunks == 1 {
            let pipeline = ctx.pipeline(&kernel(0, lanes))?;
            let mut bindings = vec![storage.bind_whole(), out.storage().bind_whole()];
            bindings.extend(leaf_bindings);
            // `lanes` threads per output element.
            let per_group = u64::from(WORKGROUP / lanes);
            let grid = grid_for(&ctx, op, rows.div_ceil(per_group), 1)?;
            return self.dispatch(op, &pipeline, &bytes, &bindings, grid);
        }
        params.chunks = chunks as u32;
        params.chunk_len = n.div_ceil(chunks) as u32;
        params.state_row_step = chunks as u32;
        bytes[..std::mem::size_of::<ReduceParams>()].copy_from_slice(bytemuck::bytes_of(&params));
        let states = self.alloc(DType::U32, &[(rows * chunks * 5) as usize])?;
        for (pass, src, dst, groups) in [
            (1u8, &*storage, states.storage(), rows * chunks),
            (2u8, &**states.storage(), out.storage(), rows),
        ] {
            let pipeline = ctx.pipeline(&kernel(pass, WORKGROUP))?;
            let mut bindings = vec![src.bind_whole(), dst.bind_whole()];
            if pass == 1 {
                bindings.extend(leaf_bindings.iter().cloned());
            }
            let grid = grid_for(&ctx, op, groups, 1)?;
            self.dispatch(op, &pipeline, &bytes, &bindings, grid)?;
        }
        self.release(states);
        Ok(())
    }
}

#[cfg(test)]
mod merge_tests {
    use super::merged_axes as merged;

    #[test]
    fn reduced_axes_merge_where_they_step_as_one() {
        // [2, 3, 4] reduced whole: one axis of 24; a size-1 axis in between drops out.
        assert_eq!(merged(&[(2, 12), (3, 4), (4, 1)]), vec![(24, 1)]);
        assert_eq!(merged(&[(2, 4), (1, 4), (4, 1)]), vec![(8, 1)]);
        // Axes 0 and 2 of [2, 3, 4]: not adjacent in memory.
        assert_eq!(merged(&[(2, 12), (4, 1)]), vec![(2, 12), (4, 1)]);
        // A pool's window: rows 8 apart, 3 elements each, then merged dilated taps.
        assert_eq!(merged(&[(3, 8), (3, 1)]), vec![(3, 8), (3, 1)]);
        assert_eq!(merged(&[(2, 6), (3, 2)]), vec![(6, 2)]);
        assert_eq!(merged(&[(1, 5)]), vec![]);
    }
}
