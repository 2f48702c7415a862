//! Kernels: one WGSL file under `shaders/` per family plus its host-side dispatcher, the plans
//! of index arithmetic they execute (plain data, tested without a GPU), and [`Kernel`], the
//! typed key of every variant. Knows tensors and the recorder; never ops or graphs.

use std::borrow::Cow;

use crate::gpu::{Binding, KernelSpec};
use crate::DType;
use matmul::MatMulKernel;

pub mod block_remap;
pub mod causal_conv;
mod check_values;
pub(crate) use check_values::ValueRule;
pub mod concat;
pub mod copy;
pub(crate) mod coupling;
pub mod cumsum;
pub mod det;
mod divide;
pub mod elementwise;
pub mod gather;
pub mod gather_index;
pub mod grid_taps;
pub mod linear_attention;
pub mod matmul;
pub mod max_roi_pool;
pub mod operands;
pub mod pad;
pub mod program;
pub mod random;
pub mod reduce;
pub mod row_norm;
pub mod scan_step;
pub mod scatter;
pub mod topk;
pub mod tree_walk;
pub mod windows;
pub mod words;

/// Loop iterations one invocation runs in one dispatch, at most, in kernels that walk a line
/// (CumSum, TopK, LinearAttention's steps): longer walks are cut over several dispatches that
/// carry their state in the output. lavapipe stops a shader's loops after about 65 000
/// iterations and returns what it has (CumSum over 200 000 elements gave zeros from element
/// 65 535 on), and short dispatches keep clear of GPU watchdogs too.
pub(crate) const LOOP_ITERATIONS_PER_DISPATCH: usize = 16384;

/// Loop iterations one invocation may run in all, its loops together. lavapipe counts the
/// iterations of every loop an invocation runs, nested ones included, against one budget of
/// 65 535, and once it is spent every later loop runs once: a loop of 1 000 around one of 100
/// counted 64 251 of its 100 000 iterations, and a loop of 10 after it ran 1. So a loop inside
/// a kernel's long loop spends the budget many times faster than the outer loop alone, which
/// is why the index code a kernel runs per element read has no loop at a compiled rank.
pub(crate) const INVOCATION_LOOP_BUDGET: usize = 65_000;

/// The most axes a kernel's parameters describe (the uniforms hold 16): the largest rank the
/// data-movement ops accept.
pub const MAX_RANK: usize = 16;

/// The grid for `invocations` threads of `op`, or an error naming the limit.
pub(crate) fn grid_for(
    ctx: &crate::Context,
    op: &'static str,
    invocations: u64,
    workgroup_size: u32,
) -> crate::Result<[u32; 3]> {
    let max_dim = ctx.limits().max_compute_workgroups_per_dimension;
    dispatch_grid(invocations, workgroup_size, max_dim).ok_or_else(|| crate::Error::LimitExceeded {
        op,
        what: format!("{invocations} invocations"),
        limit: "max_compute_workgroups_per_dimension (cubed)",
        needed: invocations.div_ceil(u64::from(workgroup_size)),
        max: u64::from(max_dim).pow(3),
    })
}

/// Workgroups for `invocations` threads of `workgroup_size`, folded into y and z when x would
/// exceed `max_per_dim` (65 535 on most devices). Kernels flatten the workgroup id back. The
/// fold keeps the grid within a row (`y * z` groups) of what is needed: x at the limit with y
/// rounded up would launch up to twice the groups (65 536 groups as 65 535 x 2), and idle
/// groups are not free (on lavapipe they nearly doubled a 64 MiB gather's time).
pub fn dispatch_grid(invocations: u64, workgroup_size: u32, max_per_dim: u32) -> Option<[u32; 3]> {
    let groups = invocations.div_ceil(u64::from(workgroup_size));
    if groups == 0 {
        return Some([0, 0, 0]);
    }
    let max = u64::from(max_per_dim);
    let z = groups.div_ceil(max * max);
    if z > max {
        return None;
    }
    let per_z = groups.div_ceil(z);
    let y = per_z.div_ceil(max);
    let x = per_z.div_ceil(y);
    Some([x as u32, y as u32, z as u32])
}

/// Every workgroup size a context accepts: the powers of two up to 1024, the most invocations
/// per workgroup any adapter offers (the context checks its own limits).
pub const WORKGROUP_SIZES: [u32; 11] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024];

const STRIDED_GATHER: &str = concat!(
    include_str!("../../shaders/strided_gather.wgsl"),
    "\n",
    include_str!("../../shaders/divide.inc")
);
const COPY: &str = include_str!("../../shaders/copy.wgsl");
const CONCAT: &str = include_str!("../../shaders/concat.wgsl");
const LINEAR_ATTENTION: &str = include_str!("../../shaders/linear_attention.wgsl");
const SCAN_COUNTER: &str = include_str!("../../shaders/scan_counter.wgsl");
const CAUSAL_CONV: &str = include_str!("../../shaders/causal_conv.wgsl");
const GRID_TAPS: &str = include_str!("../../shaders/grid_taps.wgsl");
const TREE_WALK: &str = include_str!("../../shaders/tree_walk.wgsl");
const ROW_NORM: &str = include_str!("../../shaders/row_norm.wgsl");
const MAX_ROI_POOL: &str = include_str!("../../shaders/max_roi_pool.wgsl");
const DET: &str = include_str!("../../shaders/det.wgsl");
const PAIRWISE_COUPLING: &str = include_str!("../../shaders/pairwise_coupling.wgsl");
const RANDOM: &str = include_str!("../../shaders/random.wgsl");
const RANDOM_ADVANCE: &str = include_str!("../../shaders/random_advance.wgsl");
const BLOCK_REMAP: &str = concat!(
    include_str!("../../shaders/block_remap.wgsl"),
    "\n",
    include_str!("../../shaders/divide.inc")
);
const GATHER_INDEX: &str = include_str!("../../shaders/gather_index.wgsl");
const GATHER_ROWS: &str = include_str!("../../shaders/gather_rows.wgsl");
const CHECK_VALUES: &str = include_str!("../../shaders/check_values.wgsl");
const PAD: &str = concat!(
    include_str!("../../shaders/pad.wgsl"),
    "\n",
    include_str!("../../shaders/divide.inc")
);
/// The entry point of gather_index.wgsl (see the file).
const PACKED_ELEMENTS: &str = include_str!("../../shaders/packed_elements.inc");
const SCATTER: &str = include_str!("../../shaders/scatter.wgsl");
const INDEX_FAULTS: &str = include_str!("../../shaders/index_faults.inc");
const DIVIDE: &str = include_str!("../../shaders/divide.inc");
const TWO_BUFFERS: &[Binding] = &[
    Binding::Uniform,
    Binding::StorageRead,
    Binding::StorageReadWrite,
];
const THREE_BUFFERS: &[Binding] = &[
    Binding::Uniform,
    Binding::StorageRead,
    Binding::StorageRead,
    Binding::StorageReadWrite,
];

/// One kernel variant, as plain data: the shader text, entry point and `override` constants
/// all follow from it, and the context's pipeline cache is keyed by it. [`Kernel::all`] lists
/// every variant the dispatchers can ask for, so tests validate each without a GPU.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kernel {
    /// `strided_gather.wgsl`: elements of 1, 2, 4 or 8 bytes; a strided destination (Concat,
    /// 4- and 8-byte elements); 8-byte elements as `vec2<u32>` pairs (`main_pairs`); 4- and
    /// 8-byte elements stored as `vec4<u32>` quads (`main_quads`, GPUs).
    Gather {
        /// Bytes per element (1, 2, 4 or 8).
        elem_bytes: u32,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// The destination is strided too (Concat's rows): 4- and 8-byte elements.
        dst_strided: bool,
        /// 8-byte elements as `vec2<u32>` pairs (`main_pairs`).
        pairs: bool,
        /// 16-byte quads stored per invocation (`main_quads`, GPUs).
        quads: bool,
        /// Blocks per invocation of `main_quads` (1 elsewhere).
        unroll: u32,
        /// The innermost step compiled in (1, -1, 2 or -2), or 0 for any.
        inner_step: i32,
        /// Every unit block is interior, so the edge paths are left out.
        interior: bool,
    },
    /// `block_remap.wgsl`: element by element, or runs of 4 words as `vec4<u32>` (`runs_vec4`).
    BlockRemap {
        /// Bytes per element (1, 2, 4 or 8).
        elem_bytes: u32,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// Runs of 4 words moved as `vec4<u32>` (`runs_vec4`).
        vec4: bool,
        /// The rank the kernel is compiled for (its loops unrolled), or 0 for any.
        rank: u32,
        /// Runs per invocation of `runs_vec4` (1 elsewhere).
        unroll: u32,
        /// Elements written where BatchToSpace would read them (`SCATTER`: SpaceToBatch
        /// without padding; 4- and 8-byte elements).
        scatter: bool,
        /// Every divisor of the index arithmetic is a power of two (`POW2_DIVISORS`).
        pow2_divisors: bool,
    },
    /// `elementwise.wgsl` computing the op named `op` (see [`elementwise::OPS`]) on `dtype`.
    Elementwise {
        /// The op's name in [`elementwise::OPS`].
        op: &'static str,
        /// The operands' and result's type.
        dtype: DType,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `elementwise.wgsl` converting `from` to `to`.
    Cast {
        /// The input's type.
        from: DType,
        /// The output's type.
        to: DType,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `elementwise_words.wgsl` computing `op` (Cast, an op of [`words::WORD_OPS`] or of
    /// [`elementwise::OPS`]) on the first `arity` of `operands` into `out`.
    Words {
        /// The op's name.
        op: &'static str,
        /// The operands' types (the first `arity` used).
        operands: [DType; 3],
        /// How many operands the op reads (1 to 3).
        arity: u8,
        /// The result's type.
        out: DType,
        /// i64, u64 and f64 as u32 pairs (adapters without `SHADER_INT64`, or `SHADER_F64`).
        emulate64: bool,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `elementwise_words.wgsl` computing a chain of element-wise ops fused into one
    /// program (see [`program::Program`]).
    Fused {
        /// The interned program.
        program: &'static program::Program,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// A 16-byte quad of output words per invocation, stored as one `vec4<u32>`
        /// (`main_quads`): a store of 16 bytes is what a GPU needs for its bandwidth, and CPU
        /// adapters do more per invocation.
        quads: bool,
        /// `main_dense` (programs with narrow types; see [`program::Program::has_dense`]):
        /// a quad of results per invocation from operands read a whole word at a time, every
        /// operand contiguous along one axis, or one broadcast value where its bit is set.
        dense: Option<u8>,
        /// The rank of the walk the index code is compiled for (`WALK_RANK`, 1 to
        /// [`MAX_RANK`]), 0 for any.
        walk_rank: u8,
    },
    /// `gather_index.wgsl`: ONNX Gather of elements of 1, 2, 4 or 8 bytes by i32 or i64
    /// (`index64`) indices; GatherElements with `elements` (one index per output element).
    GatherIndex {
        /// Bytes per element (1, 2, 4 or 8).
        elem_bytes: u32,
        /// The indices are i64 (else i32).
        index64: bool,
        /// GatherElements: one index per output element.
        elements: bool,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `gather_rows.wgsl`: ONNX Gather of rows of whole 16-byte quads, a quad per invocation.
    GatherRows {
        /// The indices are i64 (else i32).
        index64: bool,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `check_values.wgsl`: reports the first value (i32, or i64 with `index64`) of a rule's
    /// input outside a range and a list of kept values (a rule on values read on the GPU).
    CheckValues {
        /// The values are i64 (else i32).
        index64: bool,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `row_norm.wgsl`: Softmax, LogSoftmax, LayerNormalization or RMSNormalization of f32,
    /// f16 or bf16 rows in one dispatch, `lanes` threads per row (see [`row_norm::RowNorm`]).
    RowNorm {
        /// The row operation.
        mode: row_norm::RowNorm,
        /// f32, or f16 and bf16 two to a word.
        dtype: DType,
        /// Invocations per row (a power of two).
        lanes: u32,
        /// A bias is added after the scale (LayerNormalization's `B`).
        has_bias: bool,
    },
    /// `scatter.wgsl`: ONNX ScatterElements and ScatterND merging updates by `reduction` on
    /// `dtype` (replacing: one kernel per element size, see `scatter::kernel_dtype`).
    Scatter {
        /// The data's type (for replacing, one type per element size).
        dtype: DType,
        /// How an update merges with the data.
        reduction: scatter::ScatterReduction,
        /// i64, u64 and f64 as u32 pairs (adapters without `SHADER_INT64`, or `SHADER_F64`).
        emulate64: bool,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// Every axis length the kernel splits positions by is a power of two
        /// (`POW2_DIVISORS`).
        pow2_divisors: bool,
        /// The entry point (see [`scatter::ScatterEntry`]).
        entry: scatter::ScatterEntry,
    },
    /// `pad.wgsl`: ONNX Pad of elements of 1, 2, 4 or 8 bytes in `mode`.
    Pad {
        /// Bytes per element (1, 2, 4 or 8).
        elem_bytes: u32,
        /// constant, reflect, edge or wrap.
        mode: pad::PadMode,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// 16-byte stores (`main_quads`), else four words stored apart.
        quads: bool,
    },
    /// `cumsum.wgsl` on `dtype` (a 32- or 64-bit type): running sums, or with `product`
    /// running products.
    CumSum {
        /// The element type (32 or 64 bits).
        dtype: DType,
        /// Each sum leaves out its own element.
        exclusive: bool,
        /// Sums run from the end of the axis.
        reverse: bool,
        /// Running products instead of sums.
        product: bool,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// i64, u64 and f64 as u32 pairs (adapters without `SHADER_INT64`, or `SHADER_F64`).
        emulate64: bool,
        /// The entry point (see [`cumsum::CumSumEntry`]).
        entry: cumsum::CumSumEntry,
    },
    /// `topk.wgsl` on `dtype` (a 32- or 64-bit type), the largest or the smallest.
    TopK {
        /// The element type (32 or 64 bits).
        dtype: DType,
        /// The largest elements (else the smallest).
        largest: bool,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// i64, u64 and f64 as u32 pairs (adapters without `SHADER_INT64`, or `SHADER_F64`).
        emulate64: bool,
        /// The entry point (see [`topk::TopKEntry`]).
        entry: topk::TopKEntry,
    },
    /// `reduce.wgsl`: reduction `op` (see [`reduce::kernel_ops`]) of `input`, in one pass (0),
    /// as the first (1) or second (2) of two, or one thread per short row (3).
    Reduce {
        /// The reduction's name in [`reduce::kernel_ops`].
        op: &'static str,
        /// The input's type.
        input: DType,
        /// The element-wise program computing the input where it is read (see
        /// `reduce::prologue_fits`); `None`: the input is a tensor.
        prologue: Option<&'static program::Program>,
        /// 0: one pass; 1 and 2: the first and second of two; 3: a thread per short row.
        pass: u8,
        /// i64, u64 and f64 as u32 pairs (adapters without `SHADER_INT64`, or `SHADER_F64`).
        emulate64: bool,
        /// The walk's reduced axes once merged (`REDUCED_RANK`): 1, a row's elements lie a
        /// stride apart, with no division per element; 2, one division per element; 0, any
        /// number. A thread folding its row in order walks the two innermost axes as loops,
        /// with no division (a pool's window; a 3-D one splits once per plane).
        reduced_rank: u8,
        /// The rank of the prologue's walk its index code is compiled for (1 to
        /// [`MAX_RANK`]; 0: any, or no prologue).
        prologue_rank: u8,
        /// Threads per output element (`LANES`, a power of two up to [`reduce::WORKGROUP`]):
        /// passes 0 and 4 fold `WORKGROUP / lanes` rows per workgroup; the other passes
        /// take `WORKGROUP`.
        lanes: u32,
    },
    /// A Scan iteration's element reads and output writes at the position a GPU counter
    /// holds, `copies` of them in one dispatch (generated; see [`scan_step::copies_source`]).
    ScanCopies {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// Copies made by one dispatch (1 to [`scan_step::MAX_GROUPED_COPIES`]).
        copies: u32,
    },
    /// `copy.wgsl`: a copy of words, or of `vec4<u32>` (`main_vec4`), on GPUs.
    Copy {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// A `vec4<u32>` per invocation (`main_vec4`), else a word.
        vec4: bool,
    },
    /// `concat.wgsl`: ONNX Concat of up to 6 inputs of whole words in one dispatch, a word
    /// or a `vec4<u32>` (`main_vec4`) per invocation.
    Concat {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// A `vec4<u32>` per invocation (`main_vec4`), else a word.
        vec4: bool,
    },
    /// ONNX Split into `parts` outputs (1 to 6) of whole words in one dispatch: the walk of
    /// `concat.wgsl` the other way (its entry points generated like Concat's, see
    /// `concat::parts_source`).
    Split {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// A `vec4<u32>` per invocation, else a word.
        vec4: bool,
        /// The outputs (1 to 6).
        parts: u32,
    },
    /// `linear_attention.wgsl`: ONNX LinearAttention's recurrence (f32), one invocation per
    /// state column, or (`lanes`: GPUs, head sizes up to 128) 8 per column in workgroups of
    /// 256, their rows held in registers through the dispatch.
    /// `subgroups`: the `lanes` entry with the 8 lanes of a column in one subgroup, their sums
    /// by subgroup shuffles instead of workgroup memory and barriers.
    LinearAttention {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// 8 invocations per state column in workgroups of 256 (GPUs).
        lanes: bool,
        /// The column's lanes sum by subgroup shuffles.
        subgroups: bool,
    },
    /// `scan_counter.wgsl`: advances that counter.
    ScanCounter {
        /// The counter word it reads; it writes the other one, one more (ping-pong).
        slot: u32,
    },
    /// `causal_conv.wgsl`: ONNX CausalConvWithState (f32), one invocation per output element
    /// and per element of the state passed on.
    CausalConv {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `grid_taps.wgsl`: ONNX GridSample's taps, one invocation per output position and
    /// combination of per-axis taps: the input row each reads and its weight.
    GridTaps {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// f64 values (else f32).
        f64: bool,
        /// f64 on u32 pairs (adapters without `SHADER_F64`).
        emulate64: bool,
    },
    /// `tree_walk.wgsl`: decision trees walked to their leaves, one invocation per row and
    /// tree, on f32 or f64 rows.
    TreeWalk {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// f64 values (else f32).
        f64: bool,
        /// f64 on u32 pairs (adapters without `SHADER_F64`).
        emulate64: bool,
    },
    /// `det.wgsl`: determinants, one invocation per matrix, of f32 or f64.
    Det {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// f64 values (else f32).
        f64: bool,
        /// f64 on u32 pairs (adapters without `SHADER_F64`).
        emulate64: bool,
    },
    /// `pairwise_coupling.wgsl`: class probabilities from pairwise ones, one invocation per
    /// row running libsvm's coupling iteration.
    PairwiseCoupling {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `max_roi_pool.wgsl`: MaxRoiPool over a window table, one invocation per output
    /// element (per word of 2-byte ones), floats of 2 (f16, or bf16 with `bf16`), 4 or 8
    /// bytes compared by their bits.
    MaxRoiPool {
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
        /// Bytes per element (2, 4 or 8).
        elem_bytes: u32,
        /// 2-byte elements are bf16 (else f16).
        bf16: bool,
    },
    /// `random.wgsl`: Philox blocks made into uniform, normal, Bernoulli or Multinomial
    /// values of f32 or f64.
    Random {
        /// The distribution drawn.
        mode: random::RandomMode,
        /// f64 values (else f32).
        f64: bool,
        /// f64 on u32 pairs (adapters without `SHADER_F64`).
        emulate64: bool,
        /// Invocations per workgroup (the `WORKGROUP_SIZE` override).
        workgroup_size: u32,
    },
    /// `random_advance.wgsl`: a random stream's next draw index.
    RandomAdvance,
    /// `matmul.wgsl` on `dtype`; `group` is the workgroup of the `Rows` and `Blocks` entry
    /// points (the tiles have a fixed 16 x 16). With an `epilogue`, each sum is operand 0 of
    /// that element-wise program, whose result is stored (a fused `MatMul -> Add -> Tanh`).
    MatMul {
        /// The kernel (tiles, rows or blocks).
        variant: MatMulKernel,
        /// The operands' and product's type.
        dtype: DType,
        /// The workgroup size of the `rows` and `blocks` entry points.
        group: u32,
        /// The element-wise program each sum goes through before it is stored.
        epilogue: Option<&'static program::Program>,
        /// An element-wise program computing operand `.1` (0: A, 1: B) where it is read.
        prologue: Option<(&'static program::Program, u8)>,
        /// i64 and u64 as u32 pairs (adapters without `SHADER_INT64`; no `Blocks` variant).
        emulate64: bool,
        /// The rank of the epilogue's walk over the output its index code is compiled for
        /// (`EPILOGUE_RANK`: 1 to [`MAX_RANK`]; 0: any, or no epilogue).
        epilogue_rank: u8,
        /// The rank of the prologue's walk over its operand (`PROLOGUE_RANK`, as above).
        prologue_rank: u8,
    },
}

impl Kernel {
    /// Every variant the crate can dispatch, for every workgroup size a context accepts.
    pub fn all() -> Vec<Kernel> {
        let mut out = Vec::new();
        for slot in [0, 1] {
            out.push(Kernel::ScanCounter { slot });
        }
        out.push(Kernel::RandomAdvance);
        // Workgroups of 256, as the reductions'.
        out.extend(row_norm::variants());
        // Its workgroup is fixed at 256 (the `workgroup_size` field only keys the override).
        for subgroups in [false, true] {
            out.push(Kernel::LinearAttention {
                workgroup_size: 256,
                lanes: true,
                subgroups,
            });
        }
        for workgroup_size in WORKGROUP_SIZES {
            for copies in 1..=scan_step::MAX_GROUPED_COPIES {
                out.push(Kernel::ScanCopies {
                    workgroup_size,
                    copies,
                });
            }
            out.push(Kernel::LinearAttention {
                workgroup_size,
                lanes: false,
                subgroups: false,
            });
            out.push(Kernel::CausalConv { workgroup_size });
            out.push(Kernel::PairwiseCoupling { workgroup_size });
            for f64 in [false, true] {
                out.push(Kernel::GridTaps {
                    workgroup_size,
                    f64,
                    emulate64: false,
                });
                out.push(Kernel::TreeWalk {
                    workgroup_size,
                    f64,
                    emulate64: false,
                });
                out.push(Kernel::Det {
                    workgroup_size,
                    f64,
                    emulate64: false,
                });
                for mode in random::RandomMode::ALL {
                    for emulate64 in [false, true].into_iter().filter(|&e| !e || f64) {
                        out.push(Kernel::Random {
                            mode,
                            f64,
                            emulate64,
                            workgroup_size,
                        });
                    }
                }
            }
            for (elem_bytes, bf16) in [(2, false), (2, true), (4, false), (8, false)] {
                out.push(Kernel::MaxRoiPool {
                    workgroup_size,
                    elem_bytes,
                    bf16,
                });
            }
            for vec4 in [false, true] {
                out.push(Kernel::Copy {
                    workgroup_size,
                    vec4,
                });
                out.push(Kernel::Concat {
                    workgroup_size,
                    vec4,
                });
                for parts in 1..=concat::MAX_PARTS as u32 {
                    out.push(Kernel::Split {
                        workgroup_size,
                        vec4,
                        parts,
                    });
                }
            }
            for (dtype, emulate64) in typed_variants() {
                for (exclusive, reverse) in
                    [(false, false), (false, true), (true, false), (true, true)]
                {
                    for (product, entry) in products_and_entries() {
                        out.push(Kernel::CumSum {
                            dtype,
                            exclusive,
                            reverse,
                            product,
                            workgroup_size,
                            emulate64,
                            entry,
                        });
                    }
                }
                for (largest, entry) in largest_and_entries() {
                    out.push(Kernel::TopK {
                        dtype,
                        largest,
                        workgroup_size,
                        emulate64,
                        entry,
                    });
                }
            }
            // f64 on u32 pairs (adapters without SHADER_F64).
            out.push(Kernel::TreeWalk {
                workgroup_size,
                f64: true,
                emulate64: true,
            });
            out.push(Kernel::Det {
                workgroup_size,
                f64: true,
                emulate64: true,
            });
            out.push(Kernel::GridTaps {
                workgroup_size,
                f64: true,
                emulate64: true,
            });
            for (exclusive, reverse) in [(false, false), (false, true), (true, false), (true, true)]
            {
                for (product, entry) in products_and_entries() {
                    out.push(Kernel::CumSum {
                        dtype: DType::F64,
                        exclusive,
                        reverse,
                        product,
                        workgroup_size,
                        emulate64: true,
                        entry,
                    });
                }
            }
            for (largest, entry) in largest_and_entries() {
                out.push(Kernel::TopK {
                    dtype: DType::F64,
                    largest,
                    workgroup_size,
                    emulate64: true,
                    entry,
                });
            }
            for elem_bytes in [1u32, 2, 4, 8] {
                for index64 in [false, true] {
                    if elem_bytes == 4 {
                        out.push(Kernel::GatherRows {
                            index64,
                            workgroup_size,
                        });
                        out.push(Kernel::CheckValues {
                            index64,
                            workgroup_size,
                        });
                    }
                    for elements in [false, true] {
                        out.push(Kernel::GatherIndex {
                            elem_bytes,
                            index64,
                            elements,
                            workgroup_size,
                        });
                    }
                }
                for reduction in scatter::ScatterReduction::ALL {
                    let none = reduction == scatter::ScatterReduction::None;
                    // Replacing moves bits (one kernel per size); reductions compute on
                    // every dtype but bool and the storage-only ones.
                    let dtypes: Vec<DType> = if none {
                        vec![DType::U8, DType::U16, DType::U32, DType::U64]
                    } else {
                        DType::ALL
                            .into_iter()
                            .filter(|&d| d != DType::Bool && !d.is_storage_only())
                            .collect()
                    };
                    for dtype in dtypes
                        .into_iter()
                        .filter(|d| d.size() == elem_bytes as usize)
                    {
                        let emulated =
                            !none && matches!(dtype, DType::I64 | DType::U64 | DType::F64);
                        for emulate64 in [false, true].into_iter().filter(|&e| !e || emulated) {
                            for pow2_divisors in [false, true] {
                                for entry in scatter::ScatterEntry::ALL
                                    .into_iter()
                                    .filter(|&e| none || e == scatter::ScatterEntry::Main)
                                {
                                    out.push(Kernel::Scatter {
                                        dtype,
                                        reduction,
                                        emulate64,
                                        workgroup_size,
                                        pow2_divisors,
                                        entry,
                                    });
                                }
                            }
                        }
                    }
                }
                for mode in [
                    pad::PadMode::Constant,
                    pad::PadMode::Reflect,
                    pad::PadMode::Edge,
                    pad::PadMode::Wrap,
                ] {
                    for quads in [false, true] {
                        out.push(Kernel::Pad {
                            elem_bytes,
                            mode,
                            workgroup_size,
                            quads,
                        });
                    }
                }
            }
            for elem_bytes in [1u32, 2, 4, 8] {
                for vec4 in [false, true] {
                    for rank in [0, 1, 4, block_remap::SPECIALIZED_RANKS] {
                        for scatter in [false, true].into_iter().filter(|&s| !s || elem_bytes >= 4)
                        {
                            for unroll in [1, 2, 4].into_iter().filter(|&u| u == 1 || vec4) {
                                for pow2_divisors in [false, true] {
                                    out.push(Kernel::BlockRemap {
                                        elem_bytes,
                                        workgroup_size,
                                        vec4,
                                        rank,
                                        unroll,
                                        scatter,
                                        pow2_divisors,
                                    });
                                }
                            }
                        }
                    }
                }
                for dst_strided in [false, true].into_iter().filter(|&s| !s || elem_bytes >= 4) {
                    for pairs in [false, true].into_iter().filter(|&p| !p || elem_bytes == 8) {
                        for (inner_step, interior) in gather::specializations() {
                            out.push(Kernel::Gather {
                                elem_bytes,
                                workgroup_size,
                                dst_strided,
                                pairs,
                                quads: false,
                                unroll: 1,
                                inner_step,
                                interior,
                            });
                        }
                    }
                }
                for unroll in [1, 2, 4] {
                    for (inner_step, interior) in gather::specializations() {
                        out.push(Kernel::Gather {
                            elem_bytes,
                            workgroup_size,
                            dst_strided: false,
                            pairs: false,
                            quads: true,
                            unroll,
                            inner_step,
                            interior,
                        });
                    }
                }
            }
            for op in &elementwise::OPS {
                for dtype in COMPUTE_DTYPES.into_iter().chain(NATIVE_64_BIT) {
                    if op.wgsl(dtype).is_some() {
                        out.push(Kernel::Elementwise {
                            op: op.name,
                            dtype,
                            workgroup_size,
                        });
                    }
                }
            }
            for from in COMPUTE_DTYPES.into_iter().chain(NATIVE_64_BIT) {
                for to in COMPUTE_DTYPES.into_iter().chain(NATIVE_64_BIT) {
                    out.push(Kernel::Cast {
                        from,
                        to,
                        workgroup_size,
                    });
                }
            }
        }
        for workgroup_size in WORKGROUP_SIZES {
            for (op, operands, arity, to, emulate64) in words::variants() {
                out.push(Kernel::Words {
                    op,
                    operands,
                    arity,
                    out: to,
                    emulate64,
                    workgroup_size,
                });
            }
        }
        for op in reduce::kernel_ops() {
            for input in DType::ALL {
                if reduce::defined(op, input) {
                    let long = matches!(input, DType::I64 | DType::U64);
                    let f64_emulated =
                        input == DType::F64 && reduce::emulated_f64_op_lines(op).is_some();
                    for emulate64 in [false, true]
                        .into_iter()
                        .filter(|&e| !e || long || f64_emulated)
                    {
                        for pass in 0..7 {
                            // Passes 2 and 6 merge states and read no input.
                            for reduced_rank in [0, 1, 2]
                                .into_iter()
                                .take(if matches!(pass, 2 | 6) { 1 } else { 3 })
                            {
                                for lanes in reduce::lane_counts(pass) {
                                    out.push(Kernel::Reduce {
                                        op,
                                        input,
                                        prologue: None,
                                        pass,
                                        emulate64,
                                        reduced_rank,
                                        prologue_rank: 0,
                                        lanes,
                                    });
                                }
                            }
                        }
                    }
                }
            }
        }
        let packed = [DType::F16, DType::BF16].map(|d| (d, false));
        // f64 on u32 pairs (adapters without SHADER_F64).
        let emulated_f64 = [(DType::F64, true)];
        for (dtype, emulate64) in typed_variants().chain(packed).chain(emulated_f64) {
            out.push(Kernel::MatMul {
                variant: MatMulKernel::Tiles,
                dtype,
                group: 0,
                epilogue: None,
                prologue: None,
                emulate64,
                epilogue_rank: 0,
                prologue_rank: 0,
            });
            // The dispatcher clamps the context's workgroup size to [4, 256] for these.
            for group in WORKGROUP_SIZES
                .into_iter()
                .filter(|g| (4..=256).contains(g))
            {
                for variant in [MatMulKernel::Rows, MatMulKernel::Blocks] {
                    if !(emulate64 && variant == MatMulKernel::Blocks) {
                        out.push(Kernel::MatMul {
                            variant,
                            dtype,
                            group,
                            epilogue: None,
                            prologue: None,
                            emulate64,
                            epilogue_rank: 0,
                            prologue_rank: 0,
                        });
                    }
                }
            }
        }
        out
    }

    /// The shader file the variant is made from.
    pub fn file(&self) -> &'static str {
        match self {
            Kernel::Gather { .. } => "strided_gather.wgsl",
            Kernel::BlockRemap { .. } => "block_remap.wgsl",
            Kernel::Elementwise { .. } | Kernel::Cast { .. } => "elementwise.wgsl",
            Kernel::Words { .. } | Kernel::Fused { .. } => "elementwise_words.wgsl",
            Kernel::Reduce { .. } => "reduce.wgsl",
            Kernel::CumSum { .. } => "cumsum.wgsl",
            Kernel::TopK { .. } => "topk.wgsl",
            Kernel::GatherIndex { .. } => "gather_index.wgsl",
            Kernel::GatherRows { .. } => "gather_rows.wgsl",
            Kernel::CheckValues { .. } => "check_values.wgsl",
            Kernel::RowNorm { .. } => "row_norm.wgsl",
            Kernel::Pad { .. } => "pad.wgsl",
            Kernel::Scatter { .. } => "scatter.wgsl",
            Kernel::MatMul { .. } => "matmul.wgsl",
            Kernel::ScanCopies { .. } => "scan copies (generated)",
            Kernel::Copy { .. } => "copy.wgsl",
            Kernel::Concat { .. } | Kernel::Split { .. } => "concat.wgsl",
            Kernel::LinearAttention { .. } => "linear_attention.wgsl",
            Kernel::ScanCounter { .. } => "scan_counter.wgsl",
            Kernel::CausalConv { .. } => "causal_conv.wgsl",
            Kernel::GridTaps { .. } => "grid_taps.wgsl",
            Kernel::TreeWalk { .. } => "tree_walk.wgsl",
            Kernel::Det { .. } => "det.wgsl",
            Kernel::PairwiseCoupling { .. } => "pairwise_coupling.wgsl",
            Kernel::MaxRoiPool { .. } => "max_roi_pool.wgsl",
            Kernel::Random { .. } => "random.wgsl",
            Kernel::RandomAdvance => "random_advance.wgsl",
        }
    }

    /// The WGSL text of the variant.
    pub fn wgsl(&self) -> Cow<'static, str> {
        match *self {
            Kernel::Gather { .. } => STRIDED_GATHER.into(),
            Kernel::BlockRemap { .. } => BLOCK_REMAP.into(),
            Kernel::GatherIndex { .. } => {
                format!("{GATHER_INDEX}\n{PACKED_ELEMENTS}\n{INDEX_FAULTS}\n{DIVIDE}").into()
            }
            Kernel::GatherRows { .. } => format!("{GATHER_ROWS}\n{INDEX_FAULTS}\n{DIVIDE}").into(),
            Kernel::CheckValues { .. } => format!("{CHECK_VALUES}\n{INDEX_FAULTS}").into(),
            Kernel::RowNorm { .. } => ROW_NORM
                .replace("// WORD HELPERS", words::word_helpers())
                .into(),
            Kernel::Pad { .. } => PAD.into(),
            Kernel::Scatter {
                dtype,
                reduction,
                emulate64,
                entry,
                ..
            } => format!(
                "{}\n{INDEX_FAULTS}\n{DIVIDE}",
                scatter::scatter_source(dtype, reduction, emulate64, entry)
            )
            .into(),
            Kernel::ScanCopies { copies, .. } => scan_step::copies_source(copies).into(),
            Kernel::Copy { .. } => COPY.into(),
            Kernel::Concat { .. } => {
                concat::parts_source(CONCAT, concat::Direction::Join, concat::MAX_PARTS as u32)
                    .into()
            }
            Kernel::Split { parts, .. } => {
                concat::parts_source(CONCAT, concat::Direction::Split, parts).into()
            }
            Kernel::LinearAttention {
                subgroups: true, ..
            } => linear_attention::with_subgroup_lanes(LINEAR_ATTENTION).into(),
            Kernel::LinearAttention { .. } => LINEAR_ATTENTION.into(),
            Kernel::ScanCounter { .. } => SCAN_COUNTER.into(),
            Kernel::CausalConv { .. } => CAUSAL_CONV.into(),
            Kernel::GridTaps { f64, emulate64, .. } => {
                grid_taps::grid_taps_source(GRID_TAPS, f64, emulate64).into()
            }
            Kernel::TreeWalk { f64, emulate64, .. } => {
                tree_walk::tree_walk_source(TREE_WALK, f64, emulate64).into()
            }
            Kernel::Det { f64, emulate64, .. } => det::det_source(DET, f64, emulate64).into(),
            Kernel::PairwiseCoupling { .. } => PAIRWISE_COUPLING.into(),
            Kernel::MaxRoiPool { .. } => MAX_ROI_POOL.into(),
            Kernel::Random { f64, emulate64, .. } => {
                random::random_source(RANDOM, f64, emulate64).into()
            }
            Kernel::RandomAdvance => RANDOM_ADVANCE.into(),
            Kernel::Elementwise { op, dtype, .. } => {
                let ty = operands::elementwise_type(dtype).unwrap_or("f32");
                let e = elementwise::lookup(op)
                    .and_then(|o| o.wgsl(dtype))
                    .unwrap_or("a");
                elementwise::elementwise_source(ty, ty, e).into()
            }
            Kernel::Cast { from, to, .. } => elementwise::elementwise_source(
                operands::elementwise_type(from).unwrap_or("f32"),
                operands::elementwise_type(to).unwrap_or("f32"),
                &elementwise::cast_expression(from, to),
            )
            .into(),
            Kernel::Words {
                op,
                operands,
                arity,
                out,
                emulate64,
                ..
            } => words::words_source(op, &operands[..usize::from(arity)], out, emulate64).into(),
            Kernel::Fused {
                program,
                dense: Some(broadcast),
                ..
            } => program.dense_source(broadcast).into(),
            Kernel::Fused {
                program, walk_rank, ..
            } => program.source_for_rank(usize::from(walk_rank)).into(),
            Kernel::Reduce {
                op,
                input,
                emulate64,
                prologue,
                prologue_rank,
                ..
            } => reduce::reduce_source(op, input, emulate64, prologue, prologue_rank).into(),
            Kernel::CumSum {
                dtype,
                emulate64,
                product,
                ..
            } => cumsum::cumsum_source(dtype, emulate64, product).into(),
            Kernel::TopK {
                dtype, emulate64, ..
            } => topk::topk_source(dtype, emulate64).into(),
            Kernel::MatMul {
                dtype,
                epilogue,
                prologue,
                emulate64,
                epilogue_rank,
                prologue_rank,
                ..
            } => matmul::matmul_source(
                dtype,
                epilogue,
                prologue,
                emulate64,
                [epilogue_rank, prologue_rank],
            )
            .into(),
        }
    }

    /// The `override` constants the variant is compiled with.
    pub fn overrides(&self) -> Vec<(&'static str, u32)> {
        match *self {
            Kernel::Gather {
                elem_bytes,
                workgroup_size,
                dst_strided,
                unroll,
                inner_step,
                interior,
                ..
            } => vec![
                ("ELEM_BYTES", elem_bytes),
                ("WORKGROUP_SIZE", workgroup_size),
                ("ITEMS", gather::ITEMS),
                ("DST_STRIDED", u32::from(dst_strided)),
                ("UNROLL", unroll),
                ("INNER_STEP", inner_step as u32),
                ("INTERIOR", u32::from(interior)),
            ],
            Kernel::BlockRemap {
                elem_bytes,
                workgroup_size,
                rank,
                unroll,
                scatter,
                pow2_divisors,
                ..
            } => vec![
                ("ELEM_BYTES", elem_bytes),
                ("WORKGROUP_SIZE", workgroup_size),
                ("RANK", rank),
                ("SCATTER", u32::from(scatter)),
                ("UNROLL", unroll),
                ("POW2_DIVISORS", u32::from(pow2_divisors)),
            ],
            Kernel::Elementwise { workgroup_size, .. }
            | Kernel::Cast { workgroup_size, .. }
            | Kernel::ScanCopies { workgroup_size, .. }
            | Kernel::Copy { workgroup_size, .. }
            | Kernel::Concat { workgroup_size, .. }
            | Kernel::Split { workgroup_size, .. }
            | Kernel::CausalConv { workgroup_size }
            | Kernel::GridTaps { workgroup_size, .. }
            | Kernel::TreeWalk { workgroup_size, .. }
            | Kernel::Det { workgroup_size, .. }
            | Kernel::PairwiseCoupling { workgroup_size }
            | Kernel::LinearAttention { workgroup_size, .. } => {
                vec![("WORKGROUP_SIZE", workgroup_size)]
            }
            Kernel::Words {
                out,
                workgroup_size,
                ..
            } => vec![
                ("WORKGROUP_SIZE", workgroup_size),
                ("OUT_BYTES", out.size() as u32),
            ],
            Kernel::Fused {
                program,
                workgroup_size,
                walk_rank,
                ..
            } => vec![
                ("WORKGROUP_SIZE", workgroup_size),
                ("OUT_BYTES", program.out().size() as u32),
                ("WALK_RANK", u32::from(walk_rank)),
            ],
            Kernel::ScanCounter { slot } => vec![("SLOT", slot)],
            Kernel::MaxRoiPool {
                workgroup_size,
                elem_bytes,
                bf16,
            } => vec![
                ("WORKGROUP_SIZE", workgroup_size),
                ("ELEM_BYTES", elem_bytes),
                ("EXPONENT_MASK_16", if bf16 { 0x7F80 } else { 0x7C00 }),
            ],
            Kernel::Random {
                mode,
                workgroup_size,
                ..
            } => vec![("WORKGROUP_SIZE", workgroup_size), ("MODE", mode.code())],
            Kernel::RandomAdvance => Vec::new(),
            Kernel::TopK {
                largest,
                workgroup_size,
                ..
            } => vec![
                ("WORKGROUP_SIZE", workgroup_size),
                ("LARGEST", u32::from(largest)),
            ],
            Kernel::CumSum {
                exclusive,
                reverse,
                workgroup_size,
                ..
            } => vec![
                ("WORKGROUP_SIZE", workgroup_size),
                ("EXCLUSIVE", u32::from(exclusive)),
                ("REVERSE", u32::from(reverse)),
            ],
            Kernel::GatherIndex {
                elem_bytes,
                index64,
                elements,
                workgroup_size,
            } => vec![
                ("ELEM_BYTES", elem_bytes),
                ("INDEX_64", u32::from(index64)),
                ("ELEMENTS", u32::from(elements)),
                ("WORKGROUP_SIZE", workgroup_size),
            ],
            Kernel::GatherRows {
                index64,
                workgroup_size,
            }
            | Kernel::CheckValues {
                index64,
                workgroup_size,
            } => vec![
                ("INDEX_64", u32::from(index64)),
                ("WORKGROUP_SIZE", workgroup_size),
            ],
            Kernel::RowNorm {
                mode,
                dtype,
                lanes,
                has_bias,
            } => vec![
                ("LANES", lanes),
                ("MODE", mode as u32),
                ("HAS_BIAS", u32::from(has_bias)),
                ("DTYPE", row_norm::dtype_code(dtype)),
            ],
            Kernel::Scatter {
                dtype,
                workgroup_size,
                pow2_divisors,
                ..
            } => vec![
                ("ELEM_BYTES", dtype.size() as u32),
                ("WORKGROUP_SIZE", workgroup_size),
                ("POW2_DIVISORS", u32::from(pow2_divisors)),
            ],
            Kernel::Pad {
                elem_bytes,
                mode,
                workgroup_size,
                ..
            } => vec![
                ("ELEM_BYTES", elem_bytes),
                ("MODE", mode.code()),
                ("WORKGROUP_SIZE", workgroup_size),
            ],
            Kernel::Reduce {
                op,
                input,
                pass,
                reduced_rank,
                prologue,
                prologue_rank,
                lanes,
                ..
            } => {
                let mut constants = vec![
                    (
                        "OUT_PAIRS",
                        u32::from(reduce::stored_dtype(op, input).size() == 8),
                    ),
                    ("PASS", u32::from(pass)),
                    ("REDUCED_RANK", u32::from(reduced_rank)),
                    ("LANES", lanes),
                ];
                // Declared with the prologue only.
                if prologue.is_some() {
                    constants.push(("PROLOGUE_RANK", u32::from(prologue_rank)));
                }
                constants
            }
            Kernel::MatMul {
                variant,
                group,
                epilogue,
                prologue,
                epilogue_rank,
                prologue_rank,
                ..
            } => {
                let mut constants = Vec::new();
                if variant != MatMulKernel::Tiles {
                    constants.push(("ROWS_WORKGROUP", group));
                    constants.push(("SLICES", matmul::rows_slices(group)));
                }
                // Declared with the epilogue and the prologue only.
                if epilogue.is_some() {
                    constants.push(("EPILOGUE_RANK", u32::from(epilogue_rank)));
                }
                if prologue.is_some() {
                    constants.push(("PROLOGUE_RANK", u32::from(prologue_rank)));
                }
                constants
            }
        }
    }

    /// The features of the random kernel on f32 or f64.
    pub(crate) fn random_features(f64: bool) -> wgpu::Features {
        match f64 {
            // The f64 math reads its operands' bits as u64.
            true => wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64,
            false => wgpu::Features::empty(),
        }
    }

    /// The wgpu features the variant's shader needs (the context requests them when the
    /// adapter has them).
    pub fn features(&self) -> wgpu::Features {
        match *self {
            Kernel::Elementwise { dtype, .. } => {
                operands::native_feature(dtype).map_or(wgpu::Features::empty(), |(f, _)| f)
            }
            Kernel::Cast { from, to, .. } => [from, to]
                .into_iter()
                .filter_map(operands::native_feature)
                .fold(wgpu::Features::empty(), |all, (f, _)| all | f),
            Kernel::Words {
                operands,
                arity,
                out,
                emulate64,
                ..
            } => words::words_features(&operands[..usize::from(arity)], out, emulate64),
            Kernel::Fused { program, .. } => program.features(),
            Kernel::GridTaps {
                f64: true,
                emulate64: false,
                ..
            }
            | Kernel::TreeWalk {
                f64: true,
                emulate64: false,
                ..
            } => wgpu::Features::SHADER_F64 | wgpu::Features::SHADER_INT64,
            Kernel::Det {
                f64: true,
                emulate64: false,
                ..
            } => wgpu::Features::SHADER_F64,
            Kernel::Random { f64, emulate64, .. } => Kernel::random_features(f64 && !emulate64),
            Kernel::Reduce {
                input,
                emulate64,
                prologue,
                ..
            } => {
                reduce::reduce_features(input, emulate64)
                    | prologue.map_or(wgpu::Features::empty(), |p| p.features())
            }
            Kernel::CumSum {
                dtype, emulate64, ..
            }
            | Kernel::TopK {
                dtype, emulate64, ..
            } if !emulate64 => {
                operands::native_feature(dtype).map_or(wgpu::Features::empty(), |(f, _)| f)
            }
            Kernel::MatMul {
                dtype,
                epilogue,
                prologue,
                emulate64,
                ..
            } => {
                let native = if emulate64 {
                    None
                } else {
                    operands::native_feature(dtype)
                };
                native.map_or(wgpu::Features::empty(), |(f, _)| f)
                    | epilogue.map_or(wgpu::Features::empty(), |p| p.features())
                    | prologue.map_or(wgpu::Features::empty(), |(p, _)| p.features())
            }
            Kernel::LinearAttention {
                subgroups: true, ..
            } => wgpu::Features::SUBGROUP,
            Kernel::Scatter {
                dtype,
                reduction,
                emulate64: false,
                ..
            } if reduction != scatter::ScatterReduction::None => {
                operands::native_feature(dtype).map_or(wgpu::Features::empty(), |(f, _)| f)
            }
            _ => wgpu::Features::empty(),
        }
    }

    /// The entry point of the variant.
    pub fn entry_point(&self) -> &'static str {
        match self {
            Kernel::Gather { pairs: true, .. } => "main_pairs",
            Kernel::Fused { dense: Some(_), .. } => "main_dense",
            Kernel::Gather { quads: true, .. }
            | Kernel::Fused { quads: true, .. }
            | Kernel::Pad { quads: true, .. } => "main_quads",
            Kernel::BlockRemap { vec4: true, .. } => "runs_vec4",
            Kernel::Copy { vec4: true, .. }
            | Kernel::Concat { vec4: true, .. }
            | Kernel::Split { vec4: true, .. } => "main_vec4",
            Kernel::Scatter { entry, .. } => entry.name(),
            Kernel::CumSum { entry, .. } => entry.name(),
            Kernel::TopK { entry, .. } => entry.name(),
            Kernel::LinearAttention { lanes: true, .. } => "lanes",
            Kernel::MatMul {
                variant: MatMulKernel::Rows,
                ..
            } => "rows",
            Kernel::MatMul {
                variant: MatMulKernel::Blocks,
                ..
            } => "blocks",
            _ => "main",
        }
    }
}

/// How a module's cache key marks i64 and u64 emulated on u32 pairs.
fn emulated(emulate64: bool) -> &'static str {
    if emulate64 {
        " (i64 emulated)"
    } else {
        ""
    }
}

/// The dtypes the compute kernels compute in WGSL without optional features.
const COMPUTE_DTYPES: [DType; 3] = [DType::F32, DType::I32, DType::U32];

/// CumSum's sums and products, each at every entry point.
fn products_and_entries() -> impl Iterator<Item = (bool, cumsum::CumSumEntry)> {
    [false, true]
        .into_iter()
        .flat_map(|p| cumsum::CumSumEntry::ALL.map(|e| (p, e)))
}

/// TopK's largest and smallest, each at every entry point.
fn largest_and_entries() -> impl Iterator<Item = (bool, topk::TopKEntry)> {
    [false, true]
        .into_iter()
        .flat_map(|l| topk::TopKEntry::ALL.map(|e| (l, e)))
}

/// The (dtype, i64 emulated) variants of the kernels typed by one element type (CumSum, TopK,
/// MatMul): the 32-bit types, the 64-bit ones natively, i64 and u64 on u32 pairs.
fn typed_variants() -> impl Iterator<Item = (DType, bool)> {
    COMPUTE_DTYPES
        .into_iter()
        .chain(NATIVE_64_BIT)
        .map(|d| (d, false))
        .chain([(DType::I64, true), (DType::U64, true)])
}

/// What a module's name says of a walk of `rank` axes: the rank where its index code is
/// straight-line for it (4 or more, see [`program::index_code`]), else nothing (the ranks
/// below share a module).
fn wide_walk(rank: u8) -> String {
    if rank >= 4 {
        format!(" walk of rank {rank}")
    } else {
        String::new()
    }
}

/// The dtypes the element-wise kernel computes with wgpu's 64-bit shader features.
const NATIVE_64_BIT: [DType; 3] = [DType::F64, DType::I64, DType::U64];

impl KernelSpec for Kernel {
    fn module(&self) -> Cow<'static, str> {
        match *self {
            Kernel::Gather { .. }
            | Kernel::BlockRemap { .. }
            | Kernel::GatherIndex { .. }
            | Kernel::GatherRows { .. }
            | Kernel::CheckValues { .. }
            | Kernel::RowNorm { .. }
            | Kernel::Pad { .. }
            | Kernel::Copy { .. }
            | Kernel::Concat { .. }
            | Kernel::LinearAttention { .. }
            | Kernel::CausalConv { .. }
            | Kernel::GridTaps { f64: false, .. }
            | Kernel::ScanCounter { .. }
            | Kernel::RandomAdvance => self.file().into(),
            Kernel::Random { f64: false, .. } => self.file().into(),
            Kernel::Random {
                f64: true,
                emulate64: false,
                ..
            } => "random.wgsl f64".into(),
            Kernel::Random { f64: true, .. } => "random.wgsl f64 (emulated)".into(),
            Kernel::GridTaps {
                f64: true,
                emulate64: false,
                ..
            } => "grid_taps.wgsl f64".into(),
            Kernel::GridTaps { f64: true, .. } => "grid_taps.wgsl f64 (emulated)".into(),
            Kernel::TreeWalk { f64: false, .. } => self.file().into(),
            Kernel::TreeWalk {
                f64: true,
                emulate64: false,
                ..
            } => "tree_walk.wgsl f64".into(),
            Kernel::TreeWalk { f64: true, .. } => "tree_walk.wgsl f64 (emulated)".into(),
            Kernel::Det { f64: false, .. } => self.file().into(),
            Kernel::Det {
                f64: true,
                emulate64: false,
                ..
            } => "det.wgsl f64".into(),
            Kernel::Det { f64: true, .. } => "det.wgsl f64 (emulated)".into(),
            Kernel::PairwiseCoupling { .. } => self.file().into(),
            Kernel::MaxRoiPool { .. } => self.file().into(),
            Kernel::ScanCopies { copies, .. } => format!("scan copies {copies}").into(),
            Kernel::Split { parts, .. } => format!("concat.wgsl split {parts}").into(),
            Kernel::Scatter {
                dtype,
                reduction,
                emulate64,
                entry,
                ..
            } => format!(
                "scatter.wgsl {dtype} {}{}{}",
                reduction.name(),
                emulated(emulate64),
                if entry.claims() { " claims" } else { "" }
            )
            .into(),
            Kernel::Elementwise { op, dtype, .. } => {
                format!("elementwise.wgsl {op} {dtype}").into()
            }
            Kernel::Cast { from, to, .. } => format!("elementwise.wgsl Cast {from}->{to}").into(),
            Kernel::Words {
                op,
                operands,
                arity,
                out,
                emulate64,
                ..
            } => {
                let ins: Vec<&str> = operands[..usize::from(arity)]
                    .iter()
                    .map(|d| d.name())
                    .collect();
                format!(
                    "elementwise_words.wgsl {op} {}->{out}{}",
                    ins.join(","),
                    emulated(emulate64)
                )
                .into()
            }
            Kernel::Fused {
                program,
                dense: Some(broadcast),
                ..
            } => format!(
                "elementwise_words.wgsl fused {} dense(broadcast {broadcast:#b})",
                program::described(program)
            )
            .into(),
            Kernel::Fused {
                program, walk_rank, ..
            } => format!(
                "elementwise_words.wgsl fused {}{}",
                program::described(program),
                wide_walk(walk_rank)
            )
            .into(),
            Kernel::MatMul {
                dtype,
                epilogue,
                prologue,
                emulate64,
                epilogue_rank,
                prologue_rank,
                ..
            } => {
                let epilogue = epilogue
                    .map(|p| {
                        format!(
                            " epilogue {}{}",
                            program::described(p),
                            wide_walk(epilogue_rank)
                        )
                    })
                    .unwrap_or_default();
                let prologue = prologue
                    .map(|(p, j)| {
                        format!(
                            " prologue of {} {}{}",
                            ["A", "B"][usize::from(j)],
                            program::described(p),
                            wide_walk(prologue_rank)
                        )
                    })
                    .unwrap_or_default();
                format!(
                    "matmul.wgsl {dtype}{}{epilogue}{prologue}",
                    emulated(emulate64)
                )
                .into()
            }
            Kernel::Reduce {
                op,
                input,
                emulate64,
                prologue,
                prologue_rank,
                ..
            } => {
                let prologue = prologue
                    .map(|p| {
                        format!(
                            " prologue {}{}",
                            program::described(p),
                            wide_walk(prologue_rank)
                        )
                    })
                    .unwrap_or_default();
                format!("reduce.wgsl {op} {input}{}{prologue}", emulated(emulate64)).into()
            }
            Kernel::CumSum {
                dtype,
                emulate64,
                product,
                ..
            } => format!(
                "cumsum.wgsl {}{dtype}{}",
                if product { "product " } else { "" },
                emulated(emulate64)
            )
            .into(),
            Kernel::TopK {
                dtype, emulate64, ..
            } => format!("topk.wgsl {dtype}{}", emulated(emulate64)).into(),
        }
    }
    fn source(&self) -> Cow<'static, str> {
        self.wgsl()
    }
    fn entry(&self) -> &'static str {
        self.entry_point()
    }
    fn constants(&self) -> Vec<(&'static str, u32)> {
        self.overrides()
    }
    fn bindings(&self) -> &'static [Binding] {
        match self {
            Kernel::Reduce { prologue, .. } => {
                reduce::reduce_bindings(prologue.map_or(0, |p| p.operands().len()))
            }
            Kernel::Gather { .. }
            | Kernel::BlockRemap { .. }
            | Kernel::Pad { .. }
            | Kernel::Copy { .. } => TWO_BUFFERS,
            Kernel::Split { parts, .. } => concat::split_bindings(*parts),
            Kernel::Concat { .. } => concat::concat_bindings(),
            Kernel::ScanCounter { .. } | Kernel::RandomAdvance => &[Binding::StorageReadWrite],
            Kernel::Random { .. } => THREE_BUFFERS,
            Kernel::ScanCopies { copies, .. } => scan_step::copies_bindings(*copies),
            Kernel::LinearAttention { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            // ScatterND's claims after the index faults (see `scatter::ScatterEntry`).
            Kernel::Scatter { entry, .. } if entry.claims() => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            // The fourth: the index faults' buffer (see `recorder::IndexFaults`).
            Kernel::GatherIndex { .. }
            | Kernel::GatherRows { .. }
            | Kernel::CheckValues { .. }
            | Kernel::Scatter { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            // The sums carried between stretches of lines longer than a window, and the scan in
            // blocks' block sums.
            Kernel::CumSum { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            Kernel::Det { .. } => &[
                Binding::Uniform,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            Kernel::RowNorm { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageReadWrite,
            ],
            Kernel::PairwiseCoupling { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            Kernel::CausalConv { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            Kernel::TreeWalk { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageRead,
                Binding::StorageReadWrite,
            ],
            // The split lines' lists of values and of positions.
            Kernel::TopK { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            Kernel::GridTaps { .. } => &[
                Binding::Uniform,
                Binding::StorageRead,
                Binding::StorageReadWrite,
                Binding::StorageReadWrite,
            ],
            Kernel::Words { arity, .. } => program::operand_bindings(usize::from(*arity)),
            Kernel::Fused { program, .. } => program.bindings(),
            Kernel::MatMul {
                epilogue, prologue, ..
            } if epilogue.is_some() || prologue.is_some() => matmul::matmul_bindings(
                epilogue.map_or(0, |p| p.operands().len() - 1)
                    + prologue.map_or(0, |(p, _)| p.operands().len()),
            ),
            _ => THREE_BUFFERS,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::dispatch_grid;

    #[test]
    fn grid_covers_and_folds() {
        assert_eq!(dispatch_grid(0, 64, 65535), Some([0, 0, 0]));
        assert_eq!(dispatch_grid(1, 64, 65535), Some([1, 1, 1]));
        assert_eq!(dispatch_grid(65535 * 64, 64, 65535), Some([65535, 1, 1]));
        // One group past the limit: two rows of half, not 65 535 x 2.
        assert_eq!(
            dispatch_grid(65535 * 64 + 1, 64, 65535),
            Some([32768, 2, 1])
        );
        assert_eq!(dispatch_grid(65536 * 64, 64, 65535), Some([32768, 2, 1]));
        assert_eq!(dispatch_grid(1000, 1, 10), Some([10, 10, 10]));
        assert_eq!(dispatch_grid(1001, 1, 10), None);
        assert_eq!(dispatch_grid(376, 3, 5), None);
        for n in (1u64..=375).chain([1 << 22, 1 << 24, (1 << 32) + 12345, 65535u64.pow(3)]) {
            let (wg, max) = if n <= 375 { (3, 5) } else { (1, 65535) };
            let [x, y, z] = dispatch_grid(n, wg, max).unwrap();
            let groups = n.div_ceil(u64::from(wg));
            let launched = u64::from(x) * u64::from(y) * u64::from(z);
            assert!(x <= max && y <= max && z <= max, "{n}: {x} {y} {z}");
            // Covers every group, with less than one x-row per (y, z) pair to spare.
            assert!(launched >= groups, "{n}: {x} {y} {z}");
            assert!(
                launched - groups < u64::from(y) * u64::from(z),
                "{n}: {x} {y} {z}"
            );
        }
    }
}
