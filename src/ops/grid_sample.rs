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
//! with border padding, where we follow onnxruntime (`docs/spec-decisions.md` 19). So too
//! for coordinates NaN, infinite or past 2^62 pixels, which sample where -1 does.

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
    /// Whether -1 and 1 are the centers of the corner pixels (else their outer edges).
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
    // Samples of an empty image have nothing to read (onnxruntime refuses them too); an
    // empty output needs no sample.
    if let Some(j) = x[2..].iter().position(|&d| d == 0) {
        if shape.iter().all(|&d| d > 0) {
            return Err(invalid(
                "X",
                format!("X's spatial axis {j} is empty (X is {x:?}): there is nothing to sample"),
            ));
        }
    }
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

/// AffineGrid's base grid for spatial extents `dims`: every position (C order) as its
/// normalized coordinates, the last axis's first, then a 1: `[P, K + 1]` values. Pixel
/// centres run from -1 to 1 with `align_corners` (a single pixel at -1), else from
/// -1 + 1/n to 1 - 1/n.
pub fn affine_base_grid(dims: &[usize], align_corners: bool) -> Vec<f64> {
    let k = dims.len();
    let positions: usize = dims.iter().product();
    let coordinate = |i: usize, n: usize| match (align_corners, n) {
        (true, 1) => -1.0,
        (true, _) => -1.0 + 2.0 * i as f64 / (n - 1) as f64,
        (false, _) => -1.0 + (2 * i + 1) as f64 / n as f64,
    };
    let mut grid = Vec::with_capacity(positions * (k + 1));
    let mut index = vec![0usize; k];
    for _ in 0..positions {
        grid.extend((0..k).rev().map(|a| coordinate(index[a], dims[a])));
        grid.push(1.0);
        // The next position in C order.
        for a in (0..k).rev() {
            index[a] += 1;
            if index[a] < dims[a] {
                break;
            }
            index[a] = 0;
        }
    }
    grid
}

/// The most coordinates of AffineGrid's base grid (2 GiB in f64 on the host).
const MAX_BASE_GRID: u64 = 1 << 28;

/// AffineGrid's output shape `[N, spatial..., K]` for `theta` and `size` (`[N, C,
/// spatial...]`), after checking them: theta `[N, K, K + 1]` of a float type.
pub fn affine_grid_shape(theta: (DType, &[usize]), size: &[i64]) -> Result<Vec<usize>> {
    const OP: &str = "AffineGrid";
    if size.len() < 3 || size.iter().any(|&d| d < 0) {
        return Err(Error::invalid(
            OP,
            "size",
            format!("size must be [N, C, spatial...] of at least one spatial axis, each at least 0, not {size:?}"),
        ));
    }
    let k = size.len() - 2;
    let n = size[0] as usize;
    if theta.1 != [n, k, k + 1] {
        return Err(Error::invalid(
            OP,
            "theta",
            format!(
                "theta must be [N, K, K + 1] = [{n}, {k}, {}] for size {size:?}, not {:?}",
                k + 1,
                theta.1
            ),
        ));
    }
    if !matches!(theta.0, DType::F32 | DType::F16 | DType::BF16 | DType::F64) {
        return Err(Error::invalid(
            OP,
            "theta",
            format!("theta is {}; it takes f32, f16, bf16 or f64", theta.0),
        ));
    }
    let mut shape = vec![n];
    shape.extend(size[2..].iter().map(|&d| d as usize));
    shape.push(k);
    // The base grid is built on the host: its size must be one it can hold.
    let base = size[2..]
        .iter()
        .try_fold(k as u64 + 1, |acc, &d| acc.checked_mul(d as u64))
        .filter(|&b| b <= MAX_BASE_GRID);
    if base.is_none() {
        return Err(Error::LimitExceeded {
            op: OP,
            what: "the base grid (positions times K + 1 coordinates)".into(),
            limit: "2^28 coordinates planned on the host",
            needed: u64::MAX,
            max: MAX_BASE_GRID,
        });
    }
    Ok(shape)
}

impl Recorder {
    /// Records ONNX AffineGrid: the base grid of `size` (known while planning) times each
    /// batch item's `theta` transposed, one batched MatMul (f32, f64 for f64).
    pub fn affine_grid_to(
        &mut self,
        theta: &Tensor,
        size: &[i64],
        align_corners: bool,
        out: Out,
    ) -> Result<Tensor> {
        self.check_inputs("AffineGrid", &[("theta", theta)])?;
        let shape = affine_grid_shape((theta.dtype(), theta.shape()), size)?;
        let dtype = theta.dtype();
        if shape.contains(&0) {
            return out.tensor(self, dtype, &shape);
        }
        let dims: Vec<usize> = size[2..].iter().map(|&d| d as usize).collect();
        let k = dims.len();
        let positions: usize = dims.iter().product();
        let wide = if dtype == DType::F64 {
            DType::F64
        } else {
            DType::F32
        };
        // The output first: its size is checked against the memory limit before the base
        // grid (as large, per batch item) is built on the host.
        let product = self.alloc(wide, &[shape[0], positions, k])?;
        let base = self.host_values(
            wide,
            &[positions, k + 1],
            &affine_base_grid(&dims, align_corners),
        )?;
        let theta_t = self.transpose(theta, Some(&[0, 2, 1]))?;
        let theta_t = match dtype == wide {
            true => theta_t,
            false => {
                let t = self.cast(&theta_t, wide)?;
                self.release(theta_t);
                t
            }
        };
        let grid = self.matmul_to(&base, &theta_t, Out::into("the grid", &product))?;
        self.release(base);
        self.release(theta_t);
        let grid = match dtype == wide {
            true => grid,
            false => {
                let g = self.cast(&grid, dtype)?;
                self.release(grid);
                g
            }
        };
        let dims: Vec<i64> = shape.iter().map(|&d| d as i64).collect();
        let y = self.reshape_to(&grid, &dims, false, out)?;
        Ok(y)
    }
}
