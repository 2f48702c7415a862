//! The random ops' generator on the CPU, written from the Philox paper and the definitions in
//! docs/onnx.md ("Random numbers"): the words of every block, and the values the GPU makes of
//! them. Tests compare the GPU's draws with these.

/// Philox4x32 with 10 rounds: the four words of block `counter` under `key`.
pub fn philox4x32_10(counter: [u32; 4], key: [u32; 2]) -> [u32; 4] {
    let (mut x, mut k) = (counter, key);
    for _ in 0..10 {
        let p0 = u64::from(0xD251_1F53u32) * u64::from(x[0]);
        let p1 = u64::from(0xCD9E_8D57u32) * u64::from(x[2]);
        x = [
            (p1 >> 32) as u32 ^ x[1] ^ k[0],
            p1 as u32,
            (p0 >> 32) as u32 ^ x[3] ^ k[1],
            p0 as u32,
        ];
        k = [
            k[0].wrapping_add(0x9E37_79B9),
            k[1].wrapping_add(0xBB67_AE85),
        ];
    }
    x
}

/// Block `block` of draw `draw` of the stream keyed by `key`.
pub fn block(key: u64, draw: u64, block: u32) -> [u32; 4] {
    philox4x32_10(
        [block, 0, draw as u32, (draw >> 32) as u32],
        [key as u32, (key >> 32) as u32],
    )
}

/// The `count` values in `[0, 1)` of one draw as f32 (multiples of 2^-24, four per block).
pub fn units_f32(key: u64, draw: u64, count: usize) -> Vec<f32> {
    (0..count)
        .map(|i| {
            let w = block(key, draw, (i / 4) as u32)[i % 4];
            (w >> 8) as f32 * 2f32.powi(-24)
        })
        .collect()
}

/// The `count` values in `[0, 1)` of one draw as f64 (multiples of 2^-53, two per block).
pub fn units_f64(key: u64, draw: u64, count: usize) -> Vec<f64> {
    (0..count)
        .map(|i| {
            let w = block(key, draw, (i / 2) as u32);
            let (hi, lo) = (w[2 * (i % 2)], w[2 * (i % 2) + 1]);
            (f64::from(hi >> 11) * 4294967296.0 + f64::from(lo)) * 2f64.powi(-53)
        })
        .collect()
}

/// The `count` standard normal values of one draw, computed in f64 from the words the f32
/// kernel uses (radius from words 0 and 2, angle from words 1 and 3 of each block).
pub fn normals_f32(key: u64, draw: u64, count: usize) -> Vec<f64> {
    (0..count)
        .map(|i| {
            let w = block(key, draw, (i / 4) as u32);
            let pair = (i % 4) / 2;
            let (u, v) = (w[2 * pair], w[2 * pair + 1]);
            let radius = (-2.0 * ((f64::from(u) + 1.0) * 2f64.powi(-32)).ln()).sqrt();
            let angle = f64::from(v) * 2f64.powi(-32) * std::f64::consts::TAU;
            match i % 2 {
                0 => radius * angle.cos(),
                _ => radius * angle.sin(),
            }
        })
        .collect()
}

/// The `count` standard normal values of one draw of the f64 kernel (one Box-Muller pair per
/// block).
pub fn normals_f64(key: u64, draw: u64, count: usize) -> Vec<f64> {
    (0..count)
        .map(|i| {
            let w = block(key, draw, (i / 2) as u32);
            let u = (f64::from(w[0] >> 11) * 4294967296.0 + f64::from(w[1]) + 1.0) * 2f64.powi(-53);
            let angle = (f64::from(w[2] >> 11) * 4294967296.0 + f64::from(w[3]))
                * 2f64.powi(-53)
                * std::f64::consts::TAU;
            let radius = (-2.0 * u.ln()).sqrt();
            match i % 2 {
                0 => radius * angle.cos(),
                _ => radius * angle.sin(),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Known answers of Philox4x32-10 (the first from the Random123 distribution's test
    /// vectors; both as the `randomgen` package's Philox(number=4, width=32) gives them).
    #[test]
    fn philox_known_answers() {
        assert_eq!(
            philox4x32_10([0; 4], [0; 2]),
            [0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8]
        );
        assert_eq!(
            philox4x32_10([1, 0, 0, 0], [0; 2]),
            [0xf8e4cca4, 0x5cb200db, 0xb1a574eb, 0x097eff67]
        );
    }

    #[test]
    fn units_cover_the_interval_evenly() {
        let u = units_f32(7, 0, 1 << 16);
        assert!(u.iter().all(|&x| (0.0..1.0).contains(&x)));
        let mean = u.iter().map(|&x| f64::from(x)).sum::<f64>() / u.len() as f64;
        // The mean of 65 536 uniforms has a standard deviation of 0.0011.
        assert!((mean - 0.5).abs() < 0.006, "{mean}");
        let d = units_f64(7, 0, 1 << 16);
        assert!(d.iter().all(|&x| (0.0..1.0).contains(&x)));
        let n = normals_f64(7, 0, 1 << 16);
        let var = n.iter().map(|x| x * x).sum::<f64>() / n.len() as f64;
        assert!((var - 1.0).abs() < 0.03, "{var}");
        // Another draw gives other numbers.
        assert_ne!(units_f32(7, 1, 8), units_f32(7, 0, 8));
    }
}
