//! The strided-gather kernel's special paths: grids folded past 65 535 workgroups, sub-word
//! elements assembled into whole words, empty outputs, and use from several threads.

mod common;
use common::*;
use wgpu_ops::kernels::gather::ITEMS;
use wgpu_ops::{reference, DType, HostTensor, Slice, StridedSlice};

#[test]
fn more_than_65535_workgroups_fold_into_y() {
    // 65 535 workgroups of 64 invocations moving ITEMS elements each, plus 4 097 elements: the
    // grid needs a second row of workgroups, and the reversed axis makes every element's
    // source index depend on the flattened id.
    let per_group = (ctx().workgroup_size() * ITEMS) as usize;
    let n = 65_535 * per_group + 4_097;
    let max_x = ctx().limits().max_compute_workgroups_per_dimension as usize;
    assert!(
        n > max_x * per_group,
        "this adapter allows {max_x} workgroups in x"
    );
    let data = HostTensor::from_vec(vec![n], &(0..n as u32).collect::<Vec<_>>()).unwrap();
    let y = Slice::new([-1], [i64::MIN], [-1])
        .run(&upload(&data))
        .unwrap();
    let got = y.to_host_blocking().unwrap().to_vec::<u32>().unwrap();
    assert_eq!(got.len(), n);
    assert!(got
        .iter()
        .enumerate()
        .all(|(i, &v)| v as usize == n - 1 - i));
}

// 3 x 7 elements with reversed axes; 12, 9 (odd) and 14 outputs, so for 1-byte types the
// last output word is only partly filled and each word mixes elements from apart; every dtype.
dtype_tests!(odd_counts_and_reverse_strides, |dtype: DType| {
    let data = random_tensor(7, dtype, &[3, 7]);
    for op in [
        StridedSlice::new([0, -1], [3, -8]).stride([1, -2]),
        StridedSlice::new([2, 5], [-4, 0]).stride([-1, -2]),
        StridedSlice::new([0, 6], [3, -8]).stride([2, -1]),
    ] {
        let want = reference::strided_slice(&data, &op).unwrap();
        let got = op.run(&upload(&data)).unwrap().to_host_blocking().unwrap();
        assert_eq!(got, want, "{dtype} {op:?}");
    }
});

#[test]
fn words_stored_as_quads() {
    // The GPU kernels store words as 16-byte quads (`main_quads`), loading a quad where four
    // source words are one (1- and 2-byte elements assembled into words first, 8-byte ones
    // two to a quad): rows in
    // order, reversed, every other element and
    // every third reversed, from starts at every alignment, so the source quads are aligned
    // or not and rows end inside a quad; on a context that binds 64 bytes at a time too
    // (chunks whose output starts inside a quad).
    let options = |max_binding_size| wgpu_ops::ContextOptions {
        cpu_kernels: Some(false),
        max_binding_size,
        webgpu_limits: common::ADAPTER_LIMITS,
        ..Default::default()
    };
    let contexts = [
        wgpu_ops::Context::new_blocking(options(None)).unwrap(),
        wgpu_ops::Context::new_blocking(options(Some(64))).unwrap(),
    ];
    for dtype in [DType::U8, DType::I16, DType::U32, DType::F64] {
        for cols in [16i64, 19] {
            let data = random_tensor(cols as u64, dtype, &[6, cols as usize]);
            for start in 0..4i64 {
                for op in [
                    StridedSlice::new([1, start], [6, cols]).stride([1, 1]),
                    StridedSlice::new([0, cols - 1 - start], [6, -cols - 1]).stride([1, -1]),
                    StridedSlice::new([5, cols - 1 - start], [0, start]).stride([-1, -1]),
                    StridedSlice::new([0, start], [6, cols]).stride([1, 2]),
                    StridedSlice::new([0, cols - 1 - start], [6, -cols - 1]).stride([2, -3]),
                ] {
                    let want = reference::strided_slice(&data, &op).unwrap();
                    for c in &contexts {
                        let x = wgpu_ops::Tensor::from_host(c, &data).unwrap();
                        let got = op.run(&x).unwrap().to_host_blocking().unwrap();
                        assert_eq!(got, want, "{dtype} {cols} {op:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn unrolled_quads_move_the_same_bytes() {
    // With `gather_unroll` 2 or 4, each invocation of `main_quads` moves that many 16-byte
    // blocks a workgroup's width apart, all loaded before any is stored: outputs of many
    // workgroups with ragged last ones, rows that end inside a block, every element width and
    // inner step, each against the CPU reference, also on a context that binds 64 bytes at a
    // time (chunks whose output starts inside a quad).
    let options = |unroll, max_binding_size| wgpu_ops::ContextOptions {
        cpu_kernels: Some(false),
        gather_unroll: Some(unroll),
        max_binding_size,
        webgpu_limits: common::ADAPTER_LIMITS,
        ..Default::default()
    };
    for unroll in [2, 4] {
        let contexts = [
            wgpu_ops::Context::new_blocking(options(unroll, None)).unwrap(),
            wgpu_ops::Context::new_blocking(options(unroll, Some(64))).unwrap(),
        ];
        assert_eq!(contexts[0].gather_unroll(), unroll);
        for dtype in [DType::U8, DType::I16, DType::U32, DType::F64] {
            // Every output a multiple of 16 elements, so both windows are whole quads at
            // every width (the quads variant's condition).
            let data = random_tensor(unroll as u64, dtype, &[32, 300]);
            for op in [
                StridedSlice::new([0, 0], [32, 298]).stride([1, 1]),
                StridedSlice::new([0, 297], [32, -301]).stride([1, -1]),
                StridedSlice::new([0, 1], [32, 300]).stride([1, 2]),
                StridedSlice::new([31, 299], [-33, 0]).stride([-2, -3]),
            ] {
                let want = reference::strided_slice(&data, &op).unwrap();
                assert_eq!(want.data.len() % 16, 0);
                for c in &contexts {
                    let x = wgpu_ops::Tensor::from_host(c, &data).unwrap();
                    let got = op.run(&x).unwrap().to_host_blocking().unwrap();
                    assert_eq!(got, want, "unroll {unroll} {dtype} {op:?}");
                }
            }
        }
    }
    let refused = wgpu_ops::Context::new_blocking(options(3, None))
        .err()
        .unwrap();
    assert!(refused.to_string().contains("gather_unroll 3"), "{refused}");
}

#[test]
fn one_byte_elements_reversed_whole() {
    let data = random_tensor(8, DType::U8, &[9]);
    let op = StridedSlice::new([-1], [-10]).stride([-1]);
    let got = op.run(&upload(&data)).unwrap().to_host_blocking().unwrap();
    let mut want = data.data.clone();
    want.reverse();
    assert_eq!(got.data, want);
}

#[test]
fn sub_word_rows_in_and_against_order() {
    // Words of adjacent input elements (inner step 1 or -1) are read as two input words and
    // shifted (and reversed) into place; words that cross a row edge, start or end a chunk, or
    // hold the ragged tail take the element-by-element path. Rows of 37 and 64 elements, starts
    // at every alignment, on the default context and on one that binds 64 bytes at a time.
    let chunked = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        max_binding_size: Some(64),
        webgpu_limits: common::ADAPTER_LIMITS,
        ..Default::default()
    })
    .unwrap();
    for dtype in [DType::U8, DType::I16] {
        for cols in [37i64, 64] {
            let data = random_tensor(cols as u64, dtype, &[5, cols as usize]);
            for start in 0..4i64 {
                for op in [
                    StridedSlice::new([1, start], [5, cols]).stride([1, 1]),
                    StridedSlice::new([0, cols - 1 - start], [5, -cols - 1]).stride([1, -1]),
                    StridedSlice::new([4, cols - 1 - start], [0, start]).stride([-1, -1]),
                ] {
                    let want = reference::strided_slice(&data, &op).unwrap();
                    for c in [ctx(), &chunked] {
                        let x = wgpu_ops::Tensor::from_host(c, &data).unwrap();
                        let got = op.run(&x).unwrap().to_host_blocking().unwrap();
                        assert_eq!(got, want, "{dtype} {cols} {op:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn sub_word_rows_at_other_steps() {
    // Interior runs of 1- and 2-byte elements at inner steps other than 1: every other element
    // (nine input words, shifted and picked; in order and reversed) and steps of 3 and 5
    // (each element's index from the run's first). Rows of 70 and 67 elements, starts at
    // every alignment, so runs begin inside words and the last words of the input are read;
    // both kernel sets, each on the default context and on one that binds 64 bytes at a time.
    let options = |cpu_kernels, max_binding_size| wgpu_ops::ContextOptions {
        cpu_kernels: Some(cpu_kernels),
        max_binding_size,
        webgpu_limits: common::ADAPTER_LIMITS,
        ..Default::default()
    };
    let contexts: Vec<_> = [
        (true, None),
        (true, Some(64)),
        (false, None),
        (false, Some(64)),
    ]
    .into_iter()
    .map(|(cpu, max)| wgpu_ops::Context::new_blocking(options(cpu, max)).unwrap())
    .collect();
    for dtype in [DType::U8, DType::I16] {
        for cols in [70i64, 67] {
            let data = random_tensor(cols as u64 + 1, dtype, &[4, cols as usize]);
            for start in 0..5i64 {
                let end = cols - 1 - start;
                for op in [
                    StridedSlice::new([0, start], [4, cols]).stride([1, 2]),
                    StridedSlice::new([3, end], [-5, -cols - 1]).stride([-1, -2]),
                    StridedSlice::new([1, start], [4, cols]).stride([2, 3]),
                    StridedSlice::new([0, end], [4, -cols - 1]).stride([1, -3]),
                    StridedSlice::new([0, start], [4, cols]).stride([1, 5]),
                ] {
                    let want = reference::strided_slice(&data, &op).unwrap();
                    for c in &contexts {
                        let x = wgpu_ops::Tensor::from_host(c, &data).unwrap();
                        let got = op.run(&x).unwrap().to_host_blocking().unwrap();
                        assert_eq!(got, want, "{dtype} {cols} {op:?}");
                    }
                }
            }
        }
    }
}

#[test]
fn every_workgroup_size_moves_the_same_bytes() {
    // The workgroup size is chosen per adapter (64 here, 256 on GPUs); the kernels' grids and
    // flattened ids must give the same bytes at any size.
    let data = random_tensor(3, DType::U8, &[3, 70, 37]);
    let slice = StridedSlice::new([0, -1, 1], [3, -71, 37]).stride([1, -1, 1]);
    let b2s = wgpu_ops::BatchToSpace::new([1, 1, 1], [0, 0, 0], [0, 0, 0]);
    let wide = random_tensor(4, DType::I16, &[4, 6, 5, 3]);
    let s2b = wgpu_ops::SpaceToBatch::new([1, 2, 3, 1], [0, 1, 0, 0], [0, 1, 1, 0]);
    for size in [1, 32, 256] {
        let c = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            workgroup_size: Some(size),
            ..Default::default()
        })
        .unwrap();
        assert_eq!(c.workgroup_size(), size);
        let up = |h: &HostTensor| wgpu_ops::Tensor::from_host(&c, h).unwrap();
        let got = slice.run(&up(&data)).unwrap().to_host_blocking().unwrap();
        assert_eq!(
            got,
            reference::strided_slice(&data, &slice).unwrap(),
            "{size}"
        );
        let got = b2s.run(&up(&data)).unwrap().to_host_blocking().unwrap();
        assert_eq!(
            got,
            reference::batch_to_space(&data, &b2s).unwrap(),
            "{size}"
        );
        let got = s2b.run(&up(&wide)).unwrap().to_host_blocking().unwrap();
        assert_eq!(
            got,
            reference::space_to_batch(&wide, &s2b).unwrap(),
            "{size}"
        );
    }
}

#[test]
fn empty_outputs_dispatch_nothing() {
    let x = upload(&iota(&[4, 5]));
    let mut rec = ctx().recorder();
    let y = rec.slice(&x, &Slice::new([3], [1], [1])).unwrap();
    assert_eq!(rec.dispatches(), 0);
    pollster::block_on(rec.finish()).unwrap();
    assert_eq!(y.shape(), &[0, 5]);
    assert_eq!(values(&y), Vec::<i64>::new());
    let z = upload(&iota(&[0, 3]));
    assert_eq!(
        StridedSlice::new([0], [1]).run(&z).unwrap().shape(),
        &[0, 3]
    );
}

#[test]
fn one_pipeline_per_element_width() {
    // Variants of one width: the innermost step compiled in (1, -1, or any: a single column
    // leaves the rows' step innermost) and whether every block is interior, and with the GPU
    // kernels whole 16-byte quads or not.
    for (cpu_kernels, variants) in [(true, 6), (false, 12)] {
        // A context of its own, so that no other test has built a pipeline on it before or
        // builds one during this test.
        let ctx = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
            cpu_kernels: Some(cpu_kernels),
            ..Default::default()
        })
        .unwrap();
        let built = || ctx.stats().pipelines_built;
        let x = wgpu_ops::Tensor::from_host(&ctx, &random_tensor(1, DType::F32, &[6, 6])).unwrap();
        assert_eq!(built(), 0);
        // Columns 1..5 of every row: a strided gather of 4-byte elements builds its pipeline.
        Slice::new([1], [5], [1]).axes([1]).run(&x).unwrap();
        assert_eq!(built(), 1, "cpu kernels: {cpu_kernels}");
        // Other shapes and ops of the same width reuse it (or its quad variant).
        let others = || {
            for k in 1..5 {
                Slice::new([k], [6], [1]).axes([1]).run(&x).unwrap();
                StridedSlice::new([0, 5], [6, k - 6])
                    .stride([2, -1])
                    .run(&x)
                    .unwrap();
            }
        };
        others();
        let same_width = built();
        assert!(
            (1..=variants).contains(&same_width),
            "cpu kernels: {cpu_kernels}: {same_width} pipelines"
        );
        others();
        assert_eq!(built(), same_width, "cpu kernels: {cpu_kernels}");
        // Another element width is another pipeline (i16 columns 1..5: not whole words).
        let y = wgpu_ops::Tensor::from_host(&ctx, &random_tensor(2, DType::I16, &[6, 6])).unwrap();
        Slice::new([1], [5], [1]).axes([1]).run(&y).unwrap();
        assert_eq!(built(), same_width + 1, "cpu kernels: {cpu_kernels}");
    }
}

#[test]
fn context_is_shared_across_threads() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<wgpu_ops::Context>();
    assert_send_sync::<wgpu_ops::Tensor>();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            s.spawn(move || {
                for k in 0..10 {
                    let data =
                        random_tensor(t * 100 + k, DType::ALL[(t + k) as usize % 13], &[5, 4, 3]);
                    let op = StridedSlice::new([4, 0], [0, 4]).stride([-1, 2]);
                    let got = op.run(&upload(&data)).unwrap().to_host_blocking().unwrap();
                    assert_eq!(got, reference::strided_slice(&data, &op).unwrap());
                }
            });
        }
    });
}

#[test]
fn large_tensors_of_any_length_move_as_quads() {
    // From 64 KiB up a tensor's buffer holds whole 16-byte quads whatever its length, so the
    // GPU kernels bind both windows as quads and store 16 bytes at a time (`main_quads`):
    // inputs uploaded, outputs of a kernel fed to the next, every width, byte lengths that
    // are not multiples of 16. Below 64 KiB buffers stay whole words, and an odd length takes
    // the word kernel. Every result against the CPU reference, bit for bit.
    let gpu = wgpu_ops::Context::new_blocking(wgpu_ops::ContextOptions {
        cpu_kernels: Some(false),
        ..Default::default()
    })
    .unwrap();
    let quads = || gpu.stats().quad_dispatches;
    for dtype in [DType::U8, DType::I16, DType::F32, DType::F64] {
        for (rows, large) in [((140_000 / (257 * dtype.size())) | 1, true), (5, false)] {
            let data = random_tensor(rows as u64, dtype, &[rows, 257]);
            let reversed = StridedSlice::new([0, -1], [rows as i64, -258]).stride([1, -1]);
            let every_other = Slice::new([-1, 0], [i64::MIN, i64::MAX], [-1, 2]);
            let want = reference::strided_slice(&data, &reversed).unwrap();
            let want = reference::slice(&want, &every_other).unwrap();
            assert_eq!(data.data.len() >= 1 << 16, large);
            assert_eq!(want.data.len() >= 1 << 16, large, "{dtype} {rows}");
            assert_ne!(want.data.len() % 16, 0, "{dtype} {rows}");
            assert_ne!(data.data.len() % 16, 0, "{dtype} {rows}");
            let before = quads();
            let x = wgpu_ops::Tensor::from_host(&gpu, &data).unwrap();
            let got = every_other.run(&reversed.run(&x).unwrap()).unwrap();
            let got = got.to_host_blocking().unwrap();
            assert_eq!(got, want, "{dtype} {rows}");
            let expected = if large { 2 } else { 0 };
            assert_eq!(quads() - before, expected, "{dtype} {rows}");
        }
    }
}
