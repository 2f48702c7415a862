//! The strided-gather kernel's special paths: grids folded past 65 535 workgroups, sub-word
//! elements assembled into whole words, empty outputs, and use from several threads.

mod common;
use common::*;
use wgpu_ops::kernels::gather::{ITEMS, WORKGROUP_SIZE};
use wgpu_ops::{reference, DType, HostTensor, Slice, StridedSlice};

#[test]
fn more_than_65535_workgroups_fold_into_y() {
    // 65 535 workgroups of 64 invocations moving ITEMS elements each, plus 4 097 elements: the
    // grid needs a second row of workgroups, and the reversed axis makes every element's
    // source index depend on the flattened id.
    let per_group = (WORKGROUP_SIZE * ITEMS) as usize;
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

#[test]
fn one_byte_elements_odd_count_reverse_strides() {
    // 3 x 7 elements with reversed axes; 12, 9 (odd) and 14 outputs, so for 1-byte types the
    // last output word is only partly filled and each word mixes elements from apart.
    for dtype in [DType::U8, DType::I8, DType::Bool, DType::U16, DType::F16] {
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
    }
    let data = random_tensor(8, DType::U8, &[9]);
    let op = StridedSlice::new([-1], [-10]).stride([-1]);
    let got = op.run(&upload(&data)).unwrap().to_host_blocking().unwrap();
    let mut want = data.data.clone();
    want.reverse();
    assert_eq!(got.data, want);
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
    let x = upload(&random_tensor(1, DType::F32, &[6, 6]));
    StridedSlice::new([1], [5]).run(&x).unwrap();
    let built = ctx().stats().pipelines_built;
    for k in 0..5 {
        Slice::new([k], [6], [1]).axes([1]).run(&x).unwrap();
    }
    // Other shapes and ops of the same width reuse the pipeline.
    assert_eq!(ctx().stats().pipelines_built, built);
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
