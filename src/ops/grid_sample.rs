//! ONNX GridSample (opsets 16 to 22, any number of spatial axes): every output position
//! samples the input at the grid's coordinates. One kernel computes, from the grid, the input
//! position and weight of every tap (1 per axis nearest, 2 linear, 4 cubic, each combination
//! of them); the input, moved to put its channels last with a row of zeros after it (where
//! taps outside it read with zeros padding), gives each tap's channels in one gather; the
//! weighted sum over the taps is one multiply and one reduction. Nearest mode is the gather
//! alone, exact on every dtype.
//!
//! Padding applies to each tap's index, as onnxruntime (and PyTorch, for bicubic) do; the ONNX
//! reference clamps or reflects the coordinate first. The two agree but for cubic sampling
//! with border padding, where we follow onnxruntime (`docs/spec-decisions.md`).

use crate::kernels::grid_taps::TapsPlan;
use crate::kernels::pad::PadMode;
use crate::{DType, Error, Out, Recorder, Result, Tensor};

const OP: &str = "GridSample";

fn invalid(input: &str, message: String) -> Error {
    Error::invalid(OP, input, message)
}

/// GridSample's attributes (ONNX names and defaults).
#[derive(Clone, Copy, Debug)]
pub struct GridSampleAttrs<'a> {
    /// `linear`, `nearest` or `cubic` (`bilinear` and `bicubic` as GridSample-16 names them).
    pub mode: &'a str,
    /// `zeros`, `border` or `reflection`.
    pub padding_mode: &'a str,
    pub align_corners: bool,
}

impl Default for GridSampleAttrs<'_> {
    fn default() -> Self {
        GridSampleAttrs {
            mode: "linear",
            padding_mode: "zeros",
            align_corners: false,
        }
    }
}

/// The mode and padding codes of the taps kernel (and of the CPU interpreter), after checking
/// the names.
fn grid_sample_codes(attrs: &GridSampleAttrs) -> Result<(u32, u32)> {
    let mode = match attrs.mode {
        "nearest" => 0,
        "linear" | "bilinear" => 1,
        "cubic" | "bicubic" => 2,
        other => {
            return Err(invalid(
                "mode",
                format!(
                    "mode '{}' is not one of linear, nearest, cubic (bilinear, bicubic)",
                    other.escape_debug()
                ),
            ))
        }
    };
    let padding = match attrs.padding_mode {
        "zeros" => 0,
        "border" => 1,
        "reflection" => 2,
        other => {
            return Err(invalid(
                "padding_mode",
                format!(
                    "padding_mode '{}' is not one of zeros, border, reflection",
                    other.escape_debug()
                ),
            ))
        }
    };
    Ok((mode, padding))
}

/// The output's shape `[N, C, O...]` for input `x` `[N, C, S...]` and `grid` `[N, O..., K]`
/// (K the number of spatial axes), and the mode and padding codes, after checking them all
/// (dtypes too). Shared with the CPU interpreter.
pub fn grid_sample_plan(
    (x_dtype, x): (DType, &[usize]),
    (grid_dtype, grid): (DType, &[usize]),
    attrs: &GridSampleAttrs,
) -> Result<(Vec<usize>, u32, u32)> {
    let (mode, padding) = grid_sample_codes(attrs)?;
    if x.len() < 3 {
        return Err(invalid(
            "X",
            format!("X must be [N, C, spatial...] with at least one spatial axis, not {x:?}"),
        ));
    }
    let k = x.len() - 2;
    if grid.len() != x.len() || grid[0] != x[0] || grid[k + 1] != k {
        return Err(invalid(
            "grid",
            format!(
                "grid must be [N, O..., K] with N = {} and K = {k} spatial axes (X is {x:?}), not {grid:?}",
                x[0]
            ),
        ));
    }
    let float = |d: DType| matches!(d, DType::F32 | DType::F16 | DType::BF16 | DType::F64);
    if !float(grid_dtype) {
        return Err(invalid(
            "grid",
            format!("grid is {grid_dtype}; it takes f32, f16, bf16 or f64"),
        ));
    }
    if mode != 0 && !float(x_dtype) {
        return Err(invalid(
            "X",
            format!(
                "X is {x_dtype}; {} mode takes f32, f16, bf16 or f64",
                attrs.mode
            ),
        ));
    }
    let mut shape = vec![x[0], x[1]];
    shape.extend(&grid[1..=k]);
    Ok((shape, mode, padding))
}

impl Recorder {
    /// Records ONNX GridSample of `x` `[N, C, S...]` at `grid` `[N, O..., K]` (float
    /// coordinates in [-1, 1], x first). Nearest mode takes every dtype; linear and cubic the
    /// float types. Coordinates, weights and sums are computed in f32 (f64 for f64).
    pub fn grid_sample_to(
        &mut self,
        x: &Tensor,
        grid: &Tensor,
        attrs: &GridSampleAttrs,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs(OP, &[("X", x), ("grid", grid)])?;
        super::check_rank(OP, x.shape())?;
        let (shape, mode, padding) =
            grid_sample_plan((x.dtype(), x.shape()), (grid.dtype(), grid.shape()), attrs)?;
        let dtype = x.dtype();
        if shape.contains(&0) {
            return out.tensor(self, dtype, &shape);
        }
        let (n, c) = (x.shape()[0], x.shape()[1]);
        let dims = &x.shape()[2..];
        let spatial: usize = dims.iter().product();
        let positions: usize = shape[2..].iter().product();
        let taps = [1usize, 2, 4][mode as usize].pow(dims.len() as u32);

        // The taps' rows and weights, in f64 for f64 inputs (onnxruntime computes in the
        // input's type; f32 coordinates would miss f64's tolerance), else in f32.
        let wide = if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        let coords = match grid.dtype() == wide {
            true => grid.clone(),
            false => self.cast(grid, wide)?,
        };
        let rows = self.alloc(DType::I32, &[n * positions * taps])?;
        let weights = self.alloc(wide, &[n * positions, taps, 1])?;
        let plan = TapsPlan {
            dims,
            batch: n,
            mode,
            padding,
            align_corners: attrs.align_corners,
        };
        self.grid_taps_into(OP, &coords, &plan, &rows, &weights)?;
        if !coords.shares_buffer(grid) {
            self.release(coords);
        }

        // The input as rows of channels, a zero row after them.
        let mut perm: Vec<i64> = vec![0];
        perm.extend((2..x.rank() as i64).chain([1]));
        let moved = self.transpose(x, Some(&perm))?;
        let table = self.reshape_to(&moved, &[(n * spatial) as i64, c as i64], false, Out::NEW)?;
        let padded = self.pad_to(
            &table,
            &[0, 0, 1, 0],
            PadMode::Constant,
            None,
            None,
            Out::NEW,
        )?;
        self.release(table);
        self.release(moved);
        let gathered = self.gather_to(&padded, &rows, 0, Out::NEW)?;
        self.release(padded);
        self.release(rows);

        // [N * O, C] sampled rows.
        let sampled = if taps == 1 {
            self.release(weights);
            gathered
        } else {
            let g = self.reshape_to(
                &gathered,
                &[(n * positions) as i64, taps as i64, c as i64],
                false,
                Out::NEW,
            )?;
            let g = match dtype == wide {
                true => g,
                false => {
                    let w = self.cast(&g, wide)?;
                    self.release(g);
                    w
                }
            };
            let products = self.elementwise("Mul", &g, Some(&weights))?;
            self.release(g);
            self.release(weights);
            let sum = self.reduce_to("ReduceSum", &products, Some(&[1]), false, false, Out::NEW)?;
            self.release(products);
            if dtype == wide {
                sum
            } else {
                let s = self.cast(&sum, dtype)?;
                self.release(sum);
                s
            }
        };
        // [N, O..., C] to [N, C, O...].
        let mut by_position = vec![n as i64];
        by_position.extend(shape[2..].iter().map(|&d| d as i64));
        by_position.push(c as i64);
        let rows_view = self.reshape_to(&sampled, &by_position, false, Out::NEW)?;
        let k = shape.len() as i64 - 2;
        let mut back: Vec<i64> = vec![0, k + 1];
        back.extend(1..=k);
        let y = self.transpose_to(&rows_view, Some(&back), out)?;
        self.release(rows_view);
        self.release(sampled);
        Ok(y)
    }
}
