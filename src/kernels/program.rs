//! Element-wise programs for the word kernel (`shaders/elementwise_words.wgsl`): a chain of
//! element-wise steps over up to [`MAX_OPERANDS`] operands, each step an op of the word
//! kernel's tables on earlier steps or operands. One op is a program of one step; a chain of
//! ops in a graph (a Scan body's `Add -> Add -> Tanh`, say) is one program, one dispatch, with
//! no intermediate tensor. Each step's result is narrowed to its dtype as storing it would
//! narrow it, so a fused chain gives the bits its ops give one by one.

use std::sync::Mutex;

use super::divide::Divisor;
use super::operands::{specialize, too_many};
use super::windows::{Broadcast, Walk};
use super::words::{
    bits_expression, cast_mode, decode_expression, emulated_expression, load_expression,
    result_dtype, uses_64_bit, word_expression, words_features, Class, Expr, WORDS,
};
use super::{grid_for, Kernel, MAX_RANK};
use crate::gpu::Binding;
use crate::{DType, Error, Recorder, Result, Tensor};

/// The most operands a program reads: 8 storage buffers per shader stage is WebGPU's default
/// limit, and the output takes one.
pub const MAX_OPERANDS: usize = 7;
/// The most steps of one program (longer chains are split): bounds the shader's size and its
/// compile time.
pub const MAX_STEPS: usize = 24;

/// What a step reads: an operand of the program, the result of an earlier step, or a
/// constant written into the shader (a float of the dtype, as the bits of the f64 holding it
/// exactly; see [`Arg::literal`]), which takes no binding.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Arg {
    /// Operand `k` of the program.
    Operand(u8),
    /// The result of step `k`.
    Step(u8),
    /// A constant of the dtype: the bits of the f64 holding it.
    Literal(DType, u64),
}

impl Arg {
    /// `value` rounded to `dtype` as a constant of the program: floats only, finite values
    /// only (`None` otherwise; the caller binds the value as an operand instead). f16 and
    /// bf16 compute in f32, which holds their values exactly.
    pub fn literal(dtype: DType, value: f64) -> Option<Arg> {
        let exact = match dtype {
            DType::F32 => f64::from(value as f32),
            DType::F16 => half::f16::from_f64(value).to_f64(),
            DType::BF16 => half::bf16::from_f64(value).to_f64(),
            DType::F64 => value,
            _ => return None,
        };
        exact
            .is_finite()
            .then_some(Arg::Literal(dtype, exact.to_bits()))
    }

    /// The WGSL expression of a literal.
    fn literal_wgsl(dtype: DType, bits: u64) -> String {
        let value = f64::from_bits(bits);
        match dtype {
            DType::F32 | DType::F16 | DType::BF16 => {
                format!("bitcast<f32>({:#x}u)", (value as f32).to_bits())
            }
            // A decimal of as many digits as tell the value apart, which the shader compiler
            // reads exactly (naga does not fold a bitcast to f64 of constants).
            _ => format!("f64({value:e})"),
        }
    }
}

/// One element-wise op of a program: `op` (as [`word_expression`] names it: `Add`, `FMod`,
/// `Cast`, ...) on one to three arguments, giving `out`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Step {
    /// The op's name.
    pub op: &'static str,
    /// What it reads.
    pub args: Vec<Arg>,
    /// Its result's type.
    pub out: DType,
}

/// A chain of element-wise steps over operands of the given dtypes; the last step's result is
/// the output. Build it with [`Program::new`] and [`Program::push`], which check each step.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Program {
    operands: Vec<DType>,
    steps: Vec<Step>,
    /// i64, u64 and f64 as u32 pairs (adapters without `SHADER_INT64`, or for f64 without
    /// `SHADER_F64`).
    emulate64: bool,
}

impl Program {
    /// An empty program over `operands`; `emulate64`: i64, u64 and f64 values are emulated
    /// on u32 pairs (the adapter lacks the features that compute them natively).
    pub fn new(operands: Vec<DType>, emulate64: bool) -> Program {
        Program {
            operands,
            steps: Vec::new(),
            emulate64,
        }
    }

    /// The program of one op on operands `0..dtypes.len()`, or `None` where the op is not
    /// defined on them.
    pub fn single(
        op: &'static str,
        dtypes: &[DType],
        out: DType,
        emulate64: bool,
    ) -> Option<Program> {
        let mut p = Program::new(dtypes.to_vec(), emulate64);
        let args = (0..dtypes.len()).map(|k| Arg::Operand(k as u8)).collect();
        p.push(op, args, out)?;
        Some(p)
    }

    /// Adds an operand of `dtype` and returns it as an argument.
    pub fn add_operand(&mut self, dtype: DType) -> Arg {
        self.operands.push(dtype);
        Arg::Operand((self.operands.len() - 1) as u8)
    }

    /// The operands' types, in order.
    pub fn operands(&self) -> &[DType] {
        &self.operands
    }

    /// The steps, in order.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// Whether i64, u64 and f64 are held as u32 pairs.
    pub fn emulate64(&self) -> bool {
        self.emulate64
    }

    /// The program on the path an adapter with `features` computes it on (see
    /// [`super::words::emulates_64_bit`]): emulated where its dtypes need a 64-bit feature
    /// the adapter lacks (f64 without `SHADER_F64` beside i64 with `SHADER_INT64`, say),
    /// native where it has no 64-bit value at all (narrow programs keep their dense entry
    /// point). `None` where a step has no expression on that path. Builders that merge
    /// programs decide this once the dtypes are all known.
    pub fn on_adapter(&self, features: wgpu::Features) -> Option<Program> {
        let all: Vec<DType> = self.dtypes().collect();
        let emulate64 = super::words::emulates_64_bit(features, &all, self.out());
        if emulate64 == self.emulate64 {
            return Some(self.clone());
        }
        let mut p = Program::new(self.operands.clone(), emulate64);
        for s in &self.steps {
            p.push(s.op, s.args.clone(), s.out)?;
        }
        Some(p)
    }

    /// The dtype of the output (the last step's).
    pub fn out(&self) -> DType {
        self.steps.last().map_or(self.operands[0], |s| s.out)
    }

    /// The dtype an argument has.
    pub fn dtype_of(&self, arg: Arg) -> DType {
        match arg {
            Arg::Operand(k) => self.operands[usize::from(k)],
            Arg::Step(k) => self.steps[usize::from(k)].out,
            Arg::Literal(d, _) => d,
        }
    }

    /// Appends `op` on `args` (its result dtype is `out` for Cast, else the op's own) and
    /// returns its result as an argument of later steps; `None` (the program unchanged) where
    /// the op is not defined on those dtypes, on this path, or the program would be too long.
    pub fn push(&mut self, op: &'static str, args: Vec<Arg>, out: DType) -> Option<Arg> {
        if self.steps.len() >= MAX_STEPS
            || args.is_empty()
            || args.len() > 3
            || args.iter().any(|&a| match a {
                Arg::Operand(k) => usize::from(k) >= self.operands.len(),
                Arg::Step(k) => usize::from(k) >= self.steps.len(),
                Arg::Literal(d, _) => {
                    !matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64)
                }
            })
        {
            return None;
        }
        let dtypes: Vec<DType> = args.iter().map(|&a| self.dtype_of(a)).collect();
        let out = if cast_mode(op).is_some() {
            out
        } else {
            result_dtype(op, &dtypes)
        };
        let step = Step { op, args, out };
        self.expression(&step)?;
        self.steps.push(step);
        Some(Arg::Step((self.steps.len() - 1) as u8))
    }

    /// The WGSL of a step on this program's path.
    fn expression(&self, step: &Step) -> Option<Expr> {
        let dtypes: Vec<DType> = step.args.iter().map(|&a| self.dtype_of(a)).collect();
        if self.emulate64 && uses_64_bit(&dtypes, step.out) {
            emulated_expression(step.op, &dtypes, step.out)
        } else {
            word_expression(step.op, &dtypes, step.out)
        }
    }

    /// Every dtype the program's values have.
    fn dtypes(&self) -> impl Iterator<Item = DType> + '_ {
        self.operands
            .iter()
            .copied()
            .chain(self.steps.iter().map(|s| s.out))
    }

    /// The WGSL type a value of `dtype` has in this program.
    fn wgsl_type(&self, dtype: DType) -> &'static str {
        if self.emulate64 && matches!(dtype, DType::I64 | DType::U64 | DType::F64) {
            "vec2<u32>"
        } else {
            Class::of(dtype).wgsl()
        }
    }

    /// The wgpu features the program's shader needs.
    pub fn features(&self) -> wgpu::Features {
        let all: Vec<DType> = self.dtypes().collect();
        words_features(&all, self.out(), self.emulate64)
    }

    /// The layout the program binds: its parameters, one read-only buffer per operand, the
    /// output.
    pub fn bindings(&self) -> &'static [Binding] {
        operand_bindings(self.operands.len())
    }

    /// The program's WGSL module.
    pub fn source(&self) -> String {
        self.source_for_rank(0)
    }

    /// The program's WGSL module, its index code straight-line for walks of `wide_rank` axes
    /// where that is 4 or more (see `index_code`).
    pub fn source_for_rank(&self, wide_rank: usize) -> String {
        let n = self.operands.len();
        let parts = self.parts(1, false, "");
        let out = self.out();
        let bits = if self.wgsl_type(out) == "vec2<u32>" {
            "r"
        } else {
            bits_expression(out)
        };
        specialize(
            WORDS,
            &[
                ("// OPERAND COUNT", format!("const OPERANDS: u32 = {n}u;")),
                ("// OPERAND BINDINGS", parts.bindings),
                (
                    "// OUTPUT BINDING",
                    format!(
                        "@group(0) @binding({}) var<storage, read_write> dst: array<u32>;",
                        n + 1
                    ),
                ),
                (
                    "// OUTPUT QUADS BINDING",
                    format!(
                        "@group(0) @binding({}) var<storage, read_write> dst4: array<vec4<u32>>;",
                        n + 1
                    ),
                ),
                ("// LOADS", parts.loads),
                ("// STEPS", parts.helpers.join("\n") + &parts.steps),
                (
                    "// RESULT TYPE",
                    format!("alias R = {};", self.wgsl_type(out)),
                ),
                (
                    "// BITS",
                    format!("fn bits(r: R) -> vec2<u32> {{ return {bits}; }}"),
                ),
                (
                    "// INDEXES",
                    index_code(n, "params", "e", Some("WALK_RANK"), wide_rank),
                ),
                ("// PROGRAM", parts.body),
            ],
        )
    }

    /// Whether the module has the dense entry point: programs of narrow types (a result of 1
    /// or 2 bytes, or an operand of 1 or 2), whose operands are at most 4 bytes and not on the
    /// i64 emulation. Reading an operand's words once instead of once per element is what
    /// narrow types need: the per-element path loads and indexes a word for each element.
    pub fn has_dense(&self) -> bool {
        let out = self.out().size();
        !self.emulate64
            && self.operands.len() <= 8
            && out <= 4
            && self.operands.iter().all(|d| d.size() <= 4)
            && (out < 4 || self.operands.iter().any(|d| d.size() < 4))
    }

    /// The module with the dense entry point `main_dense` (see [`Program::has_dense`]) for
    /// operands contiguous along the walk's one axis, but those whose bit is set in
    /// `broadcast`, which are one value.
    pub fn dense_source(&self, broadcast: u8) -> String {
        let n = self.operands.len();
        let out_bytes = self.out().size();
        let per_quad = 16 / out_bytes;
        let parts = self.parts(1, false, "");
        // The program on given operand values: the body without its loads.
        let body: String = parts
            .body
            .lines()
            .filter(|l| !l.trim_start().starts_with("let o"))
            .map(|l| format!("{l}\n"))
            .collect();
        let params: Vec<String> = (0..n).map(|k| format!("o{k}: T{k}")).collect();
        let mut code = format!("\nfn apply({}) -> R {{\n{body}}}\n", params.join(", "));
        code.push_str(concat!(
            "\n// A quad of results per invocation; operand k's elements for them are whole\n",
            "// words (the host checks: contiguous and word-aligned) or one broadcast value.\n",
            "@compute @workgroup_size(WORKGROUP_SIZE)\n",
            "fn main_dense(\n",
            "    @builtin(workgroup_id) group: vec3<u32>,\n",
            "    @builtin(num_workgroups) groups: vec3<u32>,\n",
            "    @builtin(local_invocation_index) local: u32,\n",
            ") {\n",
            "    let t = (group.x + groups.x * (group.y + groups.y * group.z)) * WORKGROUP_SIZE + local;\n",
            "    if t >= params.units {\n",
            "        return;\n",
            "    }\n",
        ));
        for (k, d) in self.operands.iter().enumerate() {
            let base = format!("params.base[{}][{}]", k / 4, k % 4);
            if broadcast & (1 << k) != 0 {
                code.push_str(&format!("    let s{k} = load{k}({base});\n"));
                continue;
            }
            let words = per_quad * d.size() / 4;
            code.push_str(&format!(
                "    let b{k} = {base} * {}u / 4u + t * {words}u;\n",
                d.size()
            ));
            for j in 0..words {
                code.push_str(&format!("    let a{k}_{j} = w{k}[b{k} + {j}u];\n"));
            }
        }
        // Lane `lane`'s value of each operand.
        let lane_values = |lane: usize| -> Vec<String> {
            self.operands
                .iter()
                .enumerate()
                .map(|(k, &d)| {
                    if broadcast & (1 << k) != 0 {
                        return format!("s{k}");
                    }
                    let b = d.size();
                    let word = format!("a{k}_{}", lane * b / 4);
                    let raw = if b == 4 {
                        word
                    } else {
                        format!("extractBits({word}, {}u, {}u)", (lane * b % 4) * 8, b * 8)
                    };
                    decode_expression(d, &raw)
                })
                .collect()
        };
        let lanes_per_word = 4 / out_bytes;
        for m in 0..4 {
            let mut word = "0u".to_string();
            for l in 0..lanes_per_word {
                let lane = m * lanes_per_word + l;
                let result = format!("bits(apply({})).x", lane_values(lane).join(", "));
                word = if lanes_per_word == 1 {
                    result
                } else {
                    format!(
                        "insertBits({word}, {result}, {}u, {}u)",
                        l * out_bytes * 8,
                        out_bytes * 8
                    )
                };
            }
            code.push_str(&format!("    let q{m} = {word};\n"));
        }
        code.push_str(&format!(
            "    dst4[params.dst_base / {per_quad}u + t] = vec4<u32>(q0, q1, q2, q3);\n}}\n"
        ));
        self.source() + &code
    }

    /// The type a value of `dtype` has in the program's WGSL.
    pub(crate) fn value_type(&self, dtype: DType) -> &'static str {
        self.wgsl_type(dtype)
    }

    /// The program's WGSL pieces for a template that binds and indexes its operands: operand
    /// `k` is read from `w{k}` (bound at `first_binding` on) at element `i{k}`. With
    /// `accumulator`, operand 0 is not read but is the value `acc` the template computed (a
    /// MatMul's sum), and operand `k` is bound at `first_binding + k - 1`, read at `i{k - 1}`.
    /// Module-level names the pieces define end in `ns`, so that two programs can share a
    /// module (a MatMul's prologue and epilogue); their shared helpers come apart, in
    /// `helpers`, to be defined once.
    pub(crate) fn parts(&self, first_binding: usize, accumulator: bool, ns: &str) -> Parts {
        let skip = usize::from(accumulator);
        let mut bindings = String::new();
        let mut loads = String::new();
        for (k, &d) in self.operands.iter().enumerate().skip(skip) {
            bindings.push_str(&format!(
                "@group(0) @binding({}) var<storage, read> w{k}{ns}: array<u32>;\n",
                first_binding + k - skip
            ));
            let buffer = format!("w{k}{ns}");
            let load = if self.wgsl_type(d) == "vec2<u32>" {
                format!("vec2<u32>({buffer}[2u * i], {buffer}[2u * i + 1u])")
            } else {
                load_expression(d, &buffer)
            };
            loads.push_str(&format!(
                "alias T{k}{ns} = {};\nfn load{k}{ns}(i: u32) -> T{k}{ns} {{ return {load}; }}\n",
                self.wgsl_type(d)
            ));
        }
        let mut steps = String::new();
        let mut shared: Vec<String> = Vec::new();
        if self.dtypes().any(DType::is_storage_only) {
            shared.push(strip_comments(super::words::MINIFLOAT));
        }
        let mut program = String::new();
        for k in 0..self.operands.len() {
            if k < skip {
                program.push_str(&format!("    let o{k} = acc;\n"));
            } else {
                program.push_str(&format!("    let o{k} = load{k}{ns}(i{});\n", k - skip));
            }
        }
        let last = self.steps.len().saturating_sub(1);
        for (k, step) in self.steps.iter().enumerate() {
            let e = self.expression(step).unwrap_or(Expr {
                helpers: String::new(),
                expression: "R(a)".into(),
            });
            let mut helpers = strip_comments(&e.helpers);
            let mut expression = e.expression;
            let suffix = format!("_{k}{ns}");
            let aliases = ["A", "B", "C", "R"];
            // The f64 functions (and their tables, which renaming would not reach) are
            // defined once even where a step's own helpers, copied per step, build on them.
            let f64_math = strip_comments(super::words::F64_MATH);
            // The 64-bit emulation's parts (the i64 arithmetic the f64 emulation builds on, which
            // its math builds on) likewise, each once.
            for library in [
                super::words::I64_EMULATION,
                super::words::F64_EMULATION,
                super::words::F64_EMULATION_MATH,
                super::words::F64_EMULATION_SPECIAL,
            ] {
                let library = strip_comments(library);
                if helpers.contains(&library) {
                    helpers = helpers.replace(&library, "");
                    if !shared.contains(&library) {
                        shared.push(library);
                    }
                }
            }
            helpers = helpers.trim().to_string();
            if has_tokens(&helpers, &aliases) && helpers.contains(&f64_math) {
                helpers = helpers.replace(&f64_math, "");
                if !shared.contains(&f64_math) {
                    shared.push(f64_math);
                }
            }
            if has_tokens(&helpers, &aliases) {
                // Helpers written for the step's types: a copy of their own per step, their
                // functions and the type aliases renamed.
                let mut names: Vec<String> = defined_functions(&helpers);
                names.extend(aliases.iter().map(|s| s.to_string()));
                steps.push_str(&rename(&helpers, &names, &suffix));
                steps.push('\n');
                expression = rename(&expression, &names, &suffix);
            } else {
                if !helpers.trim().is_empty() && !shared.contains(&helpers) {
                    shared.push(helpers);
                }
                expression = rename(&expression, &aliases.map(String::from), &suffix);
            }
            let letters = ["a", "b", "c"];
            let mut params = Vec::new();
            for (j, &arg) in step.args.iter().enumerate() {
                let alias = format!("{}{suffix}", letters[j].to_uppercase());
                steps.push_str(&format!(
                    "alias {alias} = {};\n",
                    self.wgsl_type(self.dtype_of(arg))
                ));
                params.push(format!("{}: {alias}", letters[j]));
            }
            steps.push_str(&format!(
                "alias R{suffix} = {};\n",
                self.wgsl_type(step.out)
            ));
            // The final store narrows the output; intermediate results are narrowed here.
            let value = if k == last || self.wgsl_type(step.out) == "vec2<u32>" {
                expression
            } else {
                narrow(step.out, &expression)
            };
            steps.push_str(&format!(
                "fn step{k}{ns}({}) -> R{suffix} {{ return {value}; }}\n",
                params.join(", ")
            ));
            let args: Vec<String> = step
                .args
                .iter()
                .enumerate()
                .map(|(j, &a)| {
                    let value = match a {
                        Arg::Operand(j) => format!("o{j}"),
                        Arg::Step(j) => format!("v{j}"),
                        Arg::Literal(d, bits) if self.wgsl_type(d) == "vec2<u32>" => {
                            format!("vec2<u32>({:#x}u, {:#x}u)", bits as u32, bits >> 32)
                        }
                        Arg::Literal(d, bits) => Arg::literal_wgsl(d, bits),
                    };
                    match self.wgsl_type(self.dtype_of(a)) {
                        t @ ("f32" | "f64") => {
                            if !shared
                                .iter()
                                .any(|h| h.contains(&format!("fn opaque_{t}_0")))
                            {
                                shared.push(opaque_helpers(t));
                            }
                            format!("opaque_{t}_{j}({value})")
                        }
                        _ => value,
                    }
                })
                .collect();
            program.push_str(&format!(
                "    let v{k} = step{k}{ns}({});\n",
                args.join(", ")
            ));
        }
        if self.steps.is_empty() {
            program.push_str("    return o0;");
        } else {
            program.push_str(&format!("    return v{last};"));
        }
        Parts {
            bindings,
            loads,
            helpers: shared,
            steps,
            body: program,
        }
    }

    /// A short description for pipeline labels: `Add(f32,f32)->f32; Tanh(f32)->f32`.
    pub fn describe(&self) -> String {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|s| {
                let args: Vec<String> = s
                    .args
                    .iter()
                    .map(|&a| match a {
                        Arg::Operand(k) => format!("{}#{k}", self.operands[usize::from(k)]),
                        Arg::Step(k) => format!("s{k}"),
                        Arg::Literal(d, bits) => format!("{d}:{}", f64::from_bits(bits)),
                    })
                    .collect();
                format!("{}({})->{}", s.op, args.join(","), s.out)
            })
            .collect();
        let emulated = if self.emulate64 {
            " (64-bit emulated)"
        } else {
            ""
        };
        format!("{}{emulated}", steps.join("; "))
    }
}

/// A program's WGSL pieces (see [`Program::parts`]).
pub(crate) struct Parts {
    /// The storage bindings of the operands read from buffers.
    pub bindings: String,
    /// Per operand read: `alias Tk` and `fn loadk(i: u32) -> Tk` from its words.
    pub loads: String,
    /// Helpers the steps call that do not depend on their types (the same text in every
    /// program that uses them).
    pub helpers: Vec<String>,
    /// One function per step, with the helpers written for its types.
    pub steps: String,
    /// Statements: the operands loaded from `ix`, the steps, `return` of the result.
    pub body: String,
}

/// WGSL helpers `opaque_{t}_0` to `_2` (`t` f32 or f64): a float's own bits, ORed with a zero
/// the compiler cannot know (`opaque_source()`, which each template defines from a small
/// uniform). Every float argument of a fused step goes through the one of its position, so
/// that the step computes as its op alone would: without them drivers fold across steps and
/// within one (lavapipe makes `(a + b) - b` `a`, `x - x` 0 and `a * (a - a)` 0, wrong for
/// rounding, infinities and NaN, which WGSL allows them to assume away). A different zero per
/// position keeps the two arguments of `x - x` apart.
fn opaque_helpers(t: &str) -> String {
    (0..3)
        .map(|j| {
            let zero = format!("(opaque_source() >> {}u)", 29 + j);
            let body = if t == "f64" {
                format!("bitcast<f64>(bitcast<u64>(x) | u64({zero}))")
            } else {
                format!("bitcast<f32>(bitcast<u32>(x) | {zero})")
            };
            format!("fn opaque_{t}_{j}(x: {t}) -> {t} {{ return {body}; }}\n")
        })
        .collect()
}

/// `value` (of the wide type `dtype` computes in) narrowed to `dtype` and widened back, as
/// storing and loading it would: integers wrap to their width, f16 and bf16 round to
/// nearest-even.
pub(crate) fn narrow(dtype: DType, value: &str) -> String {
    match dtype {
        DType::F16 => format!("f16_to_f32(f32_to_f16({value}))"),
        DType::BF16 => format!("bitcast<f32>(f32_to_bf16({value}) << 16u)"),
        DType::I8 => format!("(({value}) << 24u) >> 24u"),
        DType::I16 => format!("(({value}) << 16u) >> 16u"),
        DType::U8 => format!("({value}) & 0xffu"),
        DType::U16 => format!("({value}) & 0xffffu"),
        DType::F8E4M3FN
        | DType::F8E4M3FNUZ
        | DType::F8E5M2
        | DType::F8E5M2FNUZ
        | DType::F4E2M1
        | DType::F6E2M3
        | DType::F6E3M2 => format!("{0}_to_f32(f32_to_{0}({value}))", dtype.name()),
        DType::F8E8M0 => format!("f8e8m0_to_f32((bitcast<u32>({value}) >> 23u) & 0xffu)"),
        DType::I4 => format!("(({value}) << 28u) >> 28u"),
        DType::I2 => format!("(({value}) << 30u) >> 30u"),
        DType::U4 => format!("({value}) & 0xfu"),
        DType::U2 => format!("({value}) & 0x3u"),
        _ => value.to_string(),
    }
}

/// WGSL of struct `name`: a walk over a shape for `n` operands (at least one stride array),
/// as [`index_code`] reads it: the rank, the operands' element offsets, the shape and each
/// operand's element strides, innermost axis first. [`walk_words`] fills it.
pub(crate) fn walk_struct(name: &str, n: usize) -> String {
    format!(
        "struct {name} {{
    rank: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
    base: array<vec4<u32>, 2>,
    shape: array<vec4<u32>, 4>,
    stride: array<array<vec4<u32>, 4>, {}>,
    shift: array<vec4<u32>, 4>,
    magic: array<vec4<u32>, 4>,
}}",
        n.max(1)
    )
}

/// The words of a [`walk_struct`] for `n` operands: `lens` and each operand's `steps` given
/// outermost axis first (`steps[axis][operand]`), `bases` the operands' first elements.
pub(crate) fn walk_words(lens: &[u64], steps: &[Vec<u64>], bases: &[u64], n: usize) -> Vec<u32> {
    // rank, pad[3], base[8], shape[16], stride[max(n, 1)][16], shift[16], magic[16].
    let strides = n.max(1);
    let mut words = vec![0u32; 4 + 8 + MAX_RANK * (3 + strides)];
    let r = lens.len();
    words[0] = r as u32;
    for (j, &b) in bases.iter().take(n).enumerate() {
        words[4 + j] = b as u32;
    }
    words[12..12 + MAX_RANK].fill(1);
    for k in 0..r {
        let axis = r - 1 - k;
        words[12 + k] = lens[axis] as u32;
        for j in 0..n {
            words[12 + MAX_RANK * (1 + j) + k] = steps[axis][j] as u32;
        }
        let by = Divisor::new(lens[axis] as u32);
        words[12 + MAX_RANK * (1 + strides) + k] = by.shift;
        words[12 + MAX_RANK * (2 + strides) + k] = by.magic;
    }
    words
}

/// The rank a kernel's index code is compiled for to take the walk of `words` (a
/// [`walk_words`]): its rank, and 1 for none (every stride 0).
pub(crate) fn walk_rank(words: &[u32]) -> u8 {
    words[0].clamp(1, MAX_RANK as u32) as u8
}

/// The words of a [`walk_struct`] over `shape` for `leaves` broadcast to it, read from their
/// first elements: a prologue's inputs at position `e` of the values it computes. Axes are
/// merged where every input allows (a same-shape input and one broadcast along the last axis
/// take two axes, not four), so the kernel divides less per element.
pub(crate) fn broadcast_walk_words(leaves: &[&Tensor], shape: &[usize]) -> Vec<u32> {
    let mut strides: Vec<Vec<u64>> = leaves
        .iter()
        .map(|leaf| super::elementwise::broadcast_strides(leaf.shape(), shape))
        .collect();
    // The computed values' own (contiguous) position, which `e` counts.
    strides.push(crate::host::c_strides(shape));
    let n = strides.len();
    let walk = super::windows::Walk {
        lens: shape.iter().map(|&d| d as u64).collect(),
        steps: (0..shape.len())
            .map(|axis| strides.iter().map(|s| s[axis]).collect())
            .collect(),
        bases: vec![0; n],
        extents: vec![1; n],
    }
    .merged();
    walk_words(&walk.lens, &walk.steps, &[], leaves.len())
}

/// WGSL statements declaring `i0` .. `i{n-1}`, the element indexes of `n` operands at output
/// element `e` (an expression): from `{params}.base`, `.rank`, `.shape` and `.stride` (the
/// walk's layout in the templates' parameters), one variable per operand. `rank_override`
/// names a WGSL constant (an override) holding the walk's rank the code is compiled for, 0
/// for any; `None`: the code reads the rank. With `wide_rank` 4 or more (up to
/// [`MAX_RANK`]), walks of that rank take straight-line code instead of the loop the other
/// ranks past 3 take.
pub(crate) fn index_code(
    n: usize,
    params: &str,
    e: &str,
    rank_override: Option<&str>,
    wide_rank: usize,
) -> String {
    let mut code = String::new();
    if n == 0 {
        return code;
    }
    // With the rank a constant, the compiler drops the other ranks' branches: CPU adapters run
    // every branch of a uniform `if`, which held f32 Add on lavapipe at 0.19 of the vec4 copy
    // (0.45 with the one-axis branch alone).
    let is_rank = |r: u32| match rank_override {
        Some(o) => format!("({o} == {r}u || ({o} == 0u && {params}.rank == {r}u))"),
        None => format!("{params}.rank == {r}u"),
    };
    // By a multiply-high and shifts (divide.inc, appended to every template with a walk).
    let divide = |x: &str, a: &str, b: &str| {
        format!("divide({x}, {params}.shift[{a}][{b}], {params}.magic[{a}][{b}])")
    };
    for j in 0..n {
        code.push_str(&format!(
            "    var i{j} = {params}.base[{}][{}];\n",
            j / 4,
            j % 4
        ));
    }
    code.push_str(&format!("    if {} {{\n", is_rank(1)));
    for j in 0..n {
        code.push_str(&format!(
            "        i{j} += ({e}) * {params}.stride[{j}][0][0];\n"
        ));
    }
    // Two axes (what a broadcast along one axis merges to): one division for all operands.
    code.push_str(&format!(
        "    }} else if {} {{\n        let hi = {};\n        let lo = ({e}) - hi * {params}.shape[0][0];\n",
        is_rank(2),
        divide(e, "0", "0")
    ));
    for j in 0..n {
        code.push_str(&format!(
            "        i{j} += lo * {params}.stride[{j}][0][0] + hi * {params}.stride[{j}][0][1];\n"
        ));
    }
    // Three axes (a row broadcast against a matrix, stacked): two divisions for all operands.
    code.push_str(&format!(
        "    }} else if {} {{\n        let q0 = {};\n        let c0 = ({e}) - q0 * {params}.shape[0][0];\n        let c2 = {};\n        let c1 = q0 - c2 * {params}.shape[0][1];\n",
        is_rank(3),
        divide(e, "0", "0"),
        divide("q0", "0", "1")
    ));
    for j in 0..n {
        code.push_str(&format!(
            "        i{j} += c0 * {params}.stride[{j}][0][0] + c1 * {params}.stride[{j}][0][1] + c2 * {params}.stride[{j}][0][2];\n"
        ));
    }
    // A walk of `wide_rank` axes (4 or more), the rank the override holds: one step per axis
    // in straight-line code. A loop here would run inside the kernels' own loops (a MatMul's
    // prologue reads elements through it at every step of its sum), and lavapipe's budget
    // counts nested iterations (see `super::INVOCATION_LOOP_BUDGET`); straight-line code is
    // also 2x faster there. Only the modules of such walks carry it: 16 guarded steps in
    // every module made each pipeline's first build 15-20 ms slower on lavapipe.
    if let (Some(o), 4..) = (rank_override, wide_rank) {
        code.push_str(&format!(
            "    }} else if {o} == {wide_rank}u {{\n        var rest = {e};\n"
        ));
        for k in 0..wide_rank {
            let (a, b) = (k / 4, k % 4);
            let strides: String = (0..n)
                .map(|j| format!(" i{j} += c * {params}.stride[{j}][{a}][{b}];"))
                .collect();
            code.push_str(&format!(
                "        {{ let q = {}; let c = rest - q * {params}.shape[{a}][{b}]; rest = q;{strides} }}\n",
                divide("rest", &a.to_string(), &b.to_string())
            ));
        }
    }
    code.push_str(&format!(
        "    }} else {{\n        var rest = {e};\n        for (var k = 0u; k < {params}.rank; k++) {{\n            let q = {};\n            let coord = rest - q * {params}.shape[k / 4u][k % 4u];\n            rest = q;\n",
        divide("rest", "k / 4u", "k % 4u")
    ));
    for j in 0..n {
        code.push_str(&format!(
            "            i{j} += coord * {params}.stride[{j}][k / 4u][k % 4u];\n"
        ));
    }
    code.push_str("        }\n    }\n");
    code
}

/// The binding layout of a program of `n` operands.
pub fn operand_bindings(n: usize) -> &'static [Binding] {
    use Binding::{StorageRead as R, StorageReadWrite as W, Uniform as U};
    const LAYOUTS: [&[Binding]; MAX_OPERANDS + 1] = [
        &[U, W],
        &[U, R, W],
        &[U, R, R, W],
        &[U, R, R, R, W],
        &[U, R, R, R, R, W],
        &[U, R, R, R, R, R, W],
        &[U, R, R, R, R, R, R, W],
        &[U, R, R, R, R, R, R, R, W],
    ];
    LAYOUTS[n.min(MAX_OPERANDS)]
}

/// WGSL text without its `//` comments (WGSL has no string literals to mind).
fn strip_comments(text: &str) -> String {
    text.lines()
        .map(|l| l.find("//").map_or(l, |i| &l[..i]).trim_end())
        .filter(|l| !l.is_empty())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Calls `f` on each identifier of WGSL `text` and rebuilds the text with what it returns.
fn map_identifiers(text: &str, mut f: impl FnMut(&str) -> Option<String>) -> String {
    let mut out = String::with_capacity(text.len());
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        if c.is_ascii_alphabetic() || c == b'_' || c.is_ascii_digit() {
            let start = i;
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_') {
                i += 1;
            }
            let word = &text[start..i];
            // Numbers (`0xffu`, `1e-5`'s digits) are not identifiers.
            match (c.is_ascii_digit(), f(word)) {
                (false, Some(new)) => out.push_str(&new),
                _ => out.push_str(word),
            }
        } else {
            out.push(c as char);
            i += 1;
        }
    }
    out
}

fn has_tokens(text: &str, tokens: &[&str]) -> bool {
    let mut found = false;
    map_identifiers(text, |w| {
        found |= tokens.contains(&w);
        None
    });
    found
}

/// `text` with each identifier in `names` suffixed.
fn rename(text: &str, names: &[String], suffix: &str) -> String {
    map_identifiers(text, |w| {
        names.iter().any(|n| n == w).then(|| format!("{w}{suffix}"))
    })
}

/// The names of the functions `text` defines.
fn defined_functions(text: &str) -> Vec<String> {
    text.split("fn ")
        .skip(1)
        .filter_map(|rest| rest.split('(').next())
        .map(|name| name.trim().to_string())
        .filter(|name| !name.is_empty() && name.chars().all(|c| c.is_alphanumeric() || c == '_'))
        .collect()
}

/// What a kernel reads: a tensor, or the values of an element-wise program over `leaves` of
/// the given shape, computed where the kernel reads them and never stored (a Scan body's
/// `Sub -> ReduceSumSquare` is one dispatch; see the reduction and MatMul prologues).
#[derive(Clone, Copy)]
pub enum Values<'a> {
    /// A tensor's elements.
    Tensor(&'a Tensor),
    /// A program's values, never stored.
    Program {
        /// Its operand `k` is `leaves[k]`.
        program: &'a Program,
        /// Each broadcast (numpy rules) to `shape`.
        leaves: &'a [&'a Tensor],
        /// The values' shape.
        shape: &'a [usize],
    },
}

impl Values<'_> {
    /// The values' type.
    pub fn dtype(&self) -> DType {
        match self {
            Values::Tensor(t) => t.dtype(),
            Values::Program { program, .. } => program.out(),
        }
    }

    /// The values' shape.
    pub fn shape(&self) -> &[usize] {
        match self {
            Values::Tensor(t) => t.shape(),
            Values::Program { shape, .. } => shape,
        }
    }
}

/// [`Program::describe`] of an interned program and the dtypes of all its operands, formatted
/// once: every pipeline lookup of a fused kernel names its module by it, and formatting it
/// anew took more host time than the lookup. The steps alone do not tell programs apart: one
/// of no steps (its first operand as it is) reads f32 or f64 alike, and an operand no step
/// reads is still bound.
pub(crate) fn described(program: &'static Program) -> &'static str {
    static NAMES: Mutex<Option<crate::FastMap<usize, &'static str>>> = Mutex::new(None);
    let mut guard = NAMES.lock().unwrap_or_else(|e| e.into_inner());
    let names = guard.get_or_insert_with(Default::default);
    // Interned programs are never freed, so an address names one program for good.
    names
        .entry(program as *const Program as usize)
        .or_insert_with(|| String::leak(module_name(program)))
}

/// What [`described`] formats.
fn module_name(program: &Program) -> String {
    let operands: Vec<&str> = program.operands.iter().map(|d| d.name()).collect();
    format!("{} over ({})", program.describe(), operands.join(","))
}

/// Each distinct program is kept once for the life of the process, for the kernel key (a
/// program and its name take a few hundred bytes; the pipelines compiled from it come and go
/// with the context's cache, see [`crate::ContextOptions::cached_pipelines`]).
pub(crate) fn intern(program: Program) -> &'static Program {
    static PROGRAMS: Mutex<Option<crate::FastSet<&'static Program>>> = Mutex::new(None);
    let mut guard = PROGRAMS.lock().unwrap_or_else(|e| e.into_inner());
    let set = guard.get_or_insert_with(Default::default);
    if let Some(&p) = set.get(&program) {
        return p;
    }
    let p: &'static Program = Box::leak(Box::new(program));
    set.insert(p);
    p
}

/// Output elements from which a program whose last quad is partial takes a second dispatch
/// for it: below, the dispatch costs more than the quads save.
const SPLIT_FROM: u64 = 1 << 16;

impl Recorder {
    /// Records `out = program(inputs...)` (numpy broadcasting across the inputs) with the
    /// word kernel `kernel` (whose program it is); `op` names it in errors. The inputs'
    /// dtypes and the program's features are checked by the caller.
    pub(crate) fn program_into(
        &mut self,
        op: &'static str,
        kernel: Kernel,
        inputs: &[&Tensor],
        out: &Tensor,
    ) -> Result<()> {
        let count = out.numel() as u64;
        if count == 0 {
            return Ok(());
        }
        if count > u64::from(u32::MAX) {
            return Err(too_many(op, "the output", count));
        }
        let rank = out.rank();
        if rank > MAX_RANK {
            return Err(Error::invalid(
                op,
                "A",
                format!("rank {rank} exceeds {MAX_RANK}"),
            ));
        }
        let ctx = self.context().clone();
        let n = inputs.len();
        let plan = Broadcast::plan(&ctx, op, inputs, out)?;
        // A program (a fused chain, or one op) stores its results a 16-byte quad at a time
        // where the output's piece is whole quads: on GPUs, and on CPU adapters too, where
        // the quads (and the dense narrow reads) ran programs 1.15x (8-byte results) to 10x
        // (1-byte) faster than a word per invocation (bench/program_quads_lavapipe.txt).
        let per_quad = 16 / out.dtype().size() as u64;
        // Every word kernel runs as a program (a lone op is a program of one step), so that it
        // is compiled for the rank of the walk it runs on.
        let as_program = match kernel {
            Kernel::Fused {
                program,
                workgroup_size,
                ..
            } => Some((program, workgroup_size)),
            Kernel::Words {
                op,
                operands,
                arity,
                out,
                emulate64,
                workgroup_size,
            } => Program::single(op, &operands[..usize::from(arity)], out, emulate64)
                .map(|program| (intern(program), workgroup_size)),
            _ => None,
        };
        for w in &plan.walks {
            let (firsts, bindings) = plan.bind(w);
            let count = w.count();
            let dst_base = firsts[n];
            let aligned = as_program.is_some() && dst_base.is_multiple_of(per_quad);
            // A large output whose last quad is partial: its whole quads by the quads kernel,
            // then the rest (the end of its last row) as a walk of its own, where the rest
            // lies in one row; else a word (or element) per invocation throughout.
            let tail = count % per_quad;
            let inner = w.lens.last().copied().unwrap_or(1);
            let split = aligned && tail != 0 && count >= SPLIT_FROM && tail <= inner;
            let head = count - if split { tail } else { 0 };
            let quads = aligned && head.is_multiple_of(per_quad);
            let whole = (&firsts[..], bindings);
            self.program_walk(op, kernel, as_program, w, whole, out.dtype(), head, quads)?;
            if split {
                let last = w.lens.len() - 1;
                let bases = (0..w.bases.len())
                    .map(|j| {
                        let outer: u64 = (0..last).map(|k| (w.lens[k] - 1) * w.steps[k][j]).sum();
                        w.bases[j] + outer + (inner - tail) * w.steps[last][j]
                    })
                    .collect();
                let rest = Walk {
                    lens: vec![tail],
                    steps: vec![w.steps[last].clone()],
                    bases,
                    extents: w.extents.clone(),
                };
                let (firsts, bindings) = plan.bind(&rest);
                let bound = (&firsts[..], bindings);
                self.program_walk(
                    op,
                    kernel,
                    as_program,
                    &rest,
                    bound,
                    out.dtype(),
                    tail,
                    false,
                )?;
            }
        }
        Ok(())
    }

    /// One dispatch of the word kernel `kernel` (or of `as_program`, the program it runs)
    /// over the first `count` elements of walk `w`, bound as `firsts` and `bindings` say: a
    /// quad of results per invocation where `quads` (`count` is then whole quads), else a
    /// word or an element.
    #[allow(clippy::too_many_arguments)]
    fn program_walk(
        &mut self,
        op: &'static str,
        kernel: Kernel,
        as_program: Option<(&'static Program, u32)>,
        w: &Walk,
        (firsts, bindings): (&[u64], Vec<wgpu::BindingResource<'_>>),
        out_dtype: DType,
        count: u64,
        quads: bool,
    ) -> Result<()> {
        let ctx = self.context().clone();
        let n = firsts.len() - 1;
        let dst_base = firsts[n];
        let out_bytes = out_dtype.size() as u64;
        let lanes = (4 / out_bytes).max(1);
        let per_quad = 16 / out_bytes;
        // Narrow types: whole words of contiguous, word-aligned operands (or one broadcast
        // value) per invocation, where the walk is one axis.
        let dense = match as_program {
            Some((program, _)) if quads && program.has_dense() && w.lens.len() == 1 => {
                let mut broadcast = Some(0u8);
                for (j, d) in program.operands.iter().enumerate() {
                    match w.steps[0][j] {
                        0 => broadcast = broadcast.map(|b| b | 1 << j),
                        1 if (firsts[j] * d.size() as u64).is_multiple_of(4) => {}
                        _ => broadcast = None,
                    }
                }
                broadcast
            }
            _ => None,
        };
        // The context caches pipelines: only the variants the walks use are compiled (a
        // chain rarely sees walks of more than one or two ranks).
        let chosen = match as_program {
            Some((program, workgroup_size)) => Kernel::Fused {
                program,
                workgroup_size,
                quads,
                dense,
                // `main_dense` has no index code.
                walk_rank: if dense.is_some() {
                    0
                } else {
                    w.lens.len().clamp(1, MAX_RANK) as u8
                },
            },
            None => kernel,
        };
        let pipeline = ctx.pipeline(&chosen)?;
        let units = if quads {
            count / per_quad
        } else if lanes > 1 {
            (dst_base + count - 1) / lanes - dst_base / lanes + 1
        } else {
            count
        };
        // count, units, rank, dst_base, then the walk as `walk_struct` lays it out after
        // its rank and padding (base, shape, strides, divisors).
        let rank = w.lens.len() as u32;
        let mut params = vec![count as u32, units as u32, rank, dst_base as u32];
        params.extend_from_slice(&walk_words(&w.lens, &w.steps, &firsts[..n], n)[4..]);
        let grid = grid_for(&ctx, op, units, ctx.workgroup_size())?;
        ctx.count_quads(quads);
        self.dispatch(
            op,
            &pipeline,
            bytemuck::cast_slice(&params),
            &bindings,
            grid,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn module_names_tell_apart_programs_that_differ_only_in_operands() {
        let empty = |d| module_name(&Program::new(vec![d], false));
        assert_ne!(empty(DType::F32), empty(DType::F64));
        let unread = |d| {
            let mut p = Program::new(vec![DType::F32, d], false);
            p.push("Neg", vec![Arg::Operand(0)], DType::F32).unwrap();
            module_name(&p)
        };
        assert_ne!(unread(DType::F32), unread(DType::I32));
    }
}
