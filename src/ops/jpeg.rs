//! A JPEG decoder whose output is libjpeg-turbo's default decode bit for bit (the decoder of
//! Pillow, which the ONNX reference runs for ImageDecoder). The JPEG standard lets decoders
//! round the inverse DCT and the chroma upsampling as they like, so other decoders differ by a
//! level or two; this one follows libjpeg's choices: the "islow" integer inverse DCT (13-bit
//! fixed point, 2 extra bits between the passes), triangular ("fancy") chroma upsampling with
//! alternating rounding biases, and YCbCr to RGB in 16-bit fixed point.
//!
//! Reads 8-bit Huffman-coded JPEGs, sequential (baseline or extended) and progressive, with one
//! component (gray) or three (YCbCr, or RGB when an Adobe marker or the component ids say so),
//! any sampling factors, and restart intervals. Arithmetic coding, lossless, 12-bit and CMYK
//! files are refused. All coefficients are kept until the end of the file (a progressive file
//! refines them scan by scan), so memory is about 2 bytes per sample plus the output; the caller
//! bounds it with `max_bytes` before anything is allocated.

/// Zigzag position -> natural (row-major) position in an 8 x 8 block.
const ZIGZAG: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

/// A decoded image: `channels` (1 = gray, 3 = RGB) interleaved u8 samples, row by row.
pub(crate) struct Decoded {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub pixels: Vec<u8>,
}

pub(crate) fn is_jpeg(bytes: &[u8]) -> bool {
    bytes.starts_with(&[0xFF, 0xD8, 0xFF])
}

#[derive(Clone, Default)]
struct Huffman {
    /// Per code length 1..=16: the largest code (-1 when none), the first code, and where its
    /// symbols start in `symbols`.
    max_code: [i32; 17],
    min_code: [i32; 17],
    first_symbol: [usize; 17],
    symbols: Vec<u8>,
}

impl Huffman {
    fn new(counts: &[u8], symbols: &[u8]) -> Result<Self, String> {
        let mut t = Huffman {
            max_code: [-1; 17],
            symbols: symbols.to_vec(),
            ..Default::default()
        };
        let (mut code, mut k) = (0i32, 0usize);
        for len in 1..=16 {
            let n = counts[len - 1] as i32;
            t.first_symbol[len] = k;
            t.min_code[len] = code;
            code += n;
            k += n as usize;
            if code > 1 << len {
                return Err("a Huffman table has more codes than its lengths allow".into());
            }
            if n > 0 {
                t.max_code[len] = code - 1;
            }
            code <<= 1;
        }
        Ok(t)
    }
}

/// The entropy-coded bits of a scan: `0xFF 0x00` is a stuffed `0xFF`; at a marker the data
/// ends and zeros are read (as libjpeg does), and running off the end of the file is an error.
struct Bits<'a> {
    data: &'a [u8],
    pos: usize,
    acc: u64,
    count: u32,
    at_marker: bool,
    truncated: bool,
}

impl<'a> Bits<'a> {
    fn new(data: &'a [u8], pos: usize) -> Self {
        Bits {
            data,
            pos,
            acc: 0,
            count: 0,
            at_marker: false,
            truncated: false,
        }
    }

    fn fill(&mut self) {
        while self.count <= 56 {
            let mut byte = 0u8;
            if !self.at_marker {
                match self.data.get(self.pos) {
                    None => self.truncated = true,
                    Some(&0xFF) => match self.data.get(self.pos + 1) {
                        Some(0) => {
                            byte = 0xFF;
                            self.pos += 2;
                        }
                        None => self.truncated = true,
                        Some(_) => self.at_marker = true,
                    },
                    Some(&b) => {
                        byte = b;
                        self.pos += 1;
                    }
                }
            }
            self.acc |= u64::from(byte) << (56 - self.count);
            self.count += 8;
        }
    }

    fn bits(&mut self, n: u32) -> i32 {
        if n == 0 {
            return 0;
        }
        if self.count < n {
            self.fill();
        }
        let v = (self.acc >> (64 - n)) as i32;
        self.acc <<= n;
        self.count -= n;
        v
    }

    fn bit(&mut self) -> bool {
        self.bits(1) != 0
    }

    /// A value of `s` bits in JPEG's sign-magnitude form.
    fn signed(&mut self, s: u32) -> i32 {
        let v = self.bits(s);
        if s > 0 && v < 1 << (s - 1) {
            v - (1 << s) + 1
        } else {
            v
        }
    }

    fn decode(&mut self, t: &Huffman) -> Result<u8, String> {
        let mut code = 0i32;
        for len in 1..=16 {
            code = (code << 1) | self.bits(1);
            if code <= t.max_code[len] {
                let i = t.first_symbol[len] + (code - t.min_code[len]) as usize;
                return t
                    .symbols
                    .get(i)
                    .copied()
                    .ok_or_else(|| "a Huffman table is shorter than its counts".to_string());
            }
        }
        Err("the entropy-coded data has a code no Huffman table holds".into())
    }

    /// At a restart interval's end: drop the padding bits and step over the RSTn marker.
    fn restart(&mut self) -> Result<(), String> {
        self.acc = 0;
        self.count = 0;
        if !self.at_marker {
            // The interval's data ended exactly before the marker without a prefetch.
            if self.data.get(self.pos) != Some(&0xFF) {
                return Err("a restart marker is missing".into());
            }
        }
        match self.data.get(self.pos + 1) {
            Some(0xD0..=0xD7) => {
                self.pos += 2;
                self.at_marker = false;
                Ok(())
            }
            _ => Err("a restart marker is missing".into()),
        }
    }
}

struct Component {
    id: u8,
    h: usize,
    v: usize,
    quant_slot: usize,
    /// The table this component's blocks are dequantized with, taken at its first scan.
    quant: Option<[u16; 64]>,
    /// Blocks allocated (whole MCUs) and blocks that hold the image (a single-component scan
    /// codes only these).
    blocks_w: usize,
    blocks_h: usize,
    real_w: usize,
    real_h: usize,
    coefs: Vec<i16>,
    dc_pred: i32,
}

struct Frame {
    width: usize,
    height: usize,
    progressive: bool,
    comps: Vec<Component>,
    mcus_x: usize,
    mcus_y: usize,
    h_max: usize,
    v_max: usize,
}

struct ScanParams {
    /// A progressive scan's end-of-block codes carry runs over several blocks.
    progressive: bool,
    comps: Vec<(usize, usize, usize)>,
    ss: usize,
    se: usize,
    ah: u32,
    al: u32,
}

fn be16(b: &[u8], i: usize) -> usize {
    usize::from(b[i]) << 8 | usize::from(b[i + 1])
}

/// Decodes `bytes`; `max_bytes` bounds what the decode allocates (checked from the frame header).
pub(crate) fn decode(bytes: &[u8], max_bytes: u64) -> Result<Decoded, String> {
    if !is_jpeg(bytes) {
        return Err("it does not start with a JPEG SOI marker".into());
    }
    let mut pos = 2;
    let mut quant: [Option<[u16; 64]>; 4] = [None; 4];
    let mut dc_tables: [Option<Huffman>; 4] = Default::default();
    let mut ac_tables: [Option<Huffman>; 4] = Default::default();
    let mut frame: Option<Frame> = None;
    let mut restart_interval = 0usize;
    let mut adobe_transform: Option<u8> = None;
    let mut jfif = false;
    let mut eobrun = 0u32;
    loop {
        // Fill bytes (0xFF runs) may precede a marker.
        while bytes.get(pos) == Some(&0xFF) && bytes.get(pos + 1) == Some(&0xFF) {
            pos += 1;
        }
        if pos + 2 > bytes.len() {
            return Err("the file ends before its EOI marker (truncated)".into());
        }
        if bytes[pos] != 0xFF {
            return Err(format!("a marker was expected at byte {pos}"));
        }
        let marker = bytes[pos + 1];
        pos += 2;
        if marker == 0xD9 {
            break;
        }
        if (0xD0..=0xD7).contains(&marker) || marker == 0x01 {
            continue;
        }
        if pos + 2 > bytes.len() {
            return Err("the file ends inside a marker segment (truncated)".into());
        }
        let len = be16(bytes, pos);
        if len < 2 || pos + len > bytes.len() {
            return Err("a marker segment runs past the end of the file (truncated)".into());
        }
        let seg = &bytes[pos + 2..pos + len];
        pos += len;
        match marker {
            0xC0..=0xC2 => {
                if frame.is_some() {
                    return Err("the file has more than one frame header".into());
                }
                frame = Some(read_frame(seg, marker == 0xC2, max_bytes)?);
            }
            0xC3 | 0xC5..=0xC7 | 0xC9..=0xCB | 0xCD..=0xCF => {
                let kind = if marker >= 0xC9 {
                    "arithmetic-coded"
                } else if marker == 0xC3 {
                    "lossless"
                } else {
                    "hierarchical"
                };
                return Err(format!("{kind} JPEG is not supported"));
            }
            0xC4 => read_huffman(seg, &mut dc_tables, &mut ac_tables)?,
            0xDB => read_quant(seg, &mut quant)?,
            0xDD => {
                if seg.len() < 2 {
                    return Err("a DRI segment is too short".into());
                }
                restart_interval = be16(seg, 0);
            }
            0xE0 if seg.starts_with(b"JFIF\0") => jfif = true,
            0xEE if seg.len() >= 12 && seg.starts_with(b"Adobe") => {
                adobe_transform = Some(seg[11]);
            }
            0xDC => {
                return Err("DNL markers (height given after the scan) are not supported".into())
            }
            0xDA => {
                let f = frame
                    .as_mut()
                    .ok_or("a scan comes before the frame header")?;
                let scan = read_scan(seg, f)?;
                for &(c, _, _) in &scan.comps {
                    let comp = &mut f.comps[c];
                    if comp.quant.is_none() {
                        comp.quant = Some(quant[comp.quant_slot].ok_or_else(|| {
                            format!(
                                "component {} uses a quantization table never defined",
                                comp.id
                            )
                        })?);
                    }
                }
                let mut bits = Bits::new(bytes, pos);
                decode_scan(
                    f,
                    &scan,
                    &dc_tables,
                    &ac_tables,
                    restart_interval,
                    &mut bits,
                    &mut eobrun,
                )?;
                if bits.truncated {
                    return Err("the scan data runs past the end of the file (truncated)".into());
                }
                pos = bits.pos;
                // Skip what remains of the scan's data up to the next marker.
                while pos + 1 < bytes.len()
                    && !(bytes[pos] == 0xFF
                        && bytes[pos + 1] != 0
                        && !(0xD0..=0xD7).contains(&bytes[pos + 1]))
                {
                    pos += 1;
                }
            }
            _ => {}
        }
    }
    let f = frame.ok_or("the file has no frame header")?;
    if f.comps.iter().any(|c| c.quant.is_none()) {
        return Err("a component has no scan".into());
    }
    // libjpeg's guess of the color space: JFIF means YCbCr, then an Adobe marker's transform
    // flag, then component ids 'R', 'G', 'B'.
    let rgb_already = f.comps.len() == 3
        && !jfif
        && match adobe_transform {
            Some(t) => t == 0,
            None => f.comps.iter().map(|c| c.id).eq([b'R', b'G', b'B']),
        };
    Ok(finish(&f, rgb_already))
}

fn read_frame(seg: &[u8], progressive: bool, max_bytes: u64) -> Result<Frame, String> {
    if seg.len() < 6 {
        return Err("the frame header is too short".into());
    }
    if seg[0] != 8 {
        return Err(format!(
            "{}-bit samples are not supported (8-bit only)",
            seg[0]
        ));
    }
    let (height, width, n) = (be16(seg, 1), be16(seg, 3), usize::from(seg[5]));
    if height == 0 || width == 0 {
        return Err("the frame's width or height is 0".into());
    }
    if n != 1 && n != 3 {
        return Err(format!(
            "the frame has {n} components; 1 (gray) or 3 (color) are supported"
        ));
    }
    if seg.len() < 6 + 3 * n {
        return Err("the frame header is too short".into());
    }
    let mut comps = Vec::with_capacity(n);
    for i in 0..n {
        let c = &seg[6 + 3 * i..9 + 3 * i];
        let (h, v) = (usize::from(c[1] >> 4), usize::from(c[1] & 15));
        if !(1..=4).contains(&h) || !(1..=4).contains(&v) || c[2] > 3 {
            return Err(format!(
                "component {} has a bad sampling factor or table",
                c[0]
            ));
        }
        comps.push(Component {
            id: c[0],
            h,
            v,
            quant_slot: usize::from(c[2]),
            quant: None,
            blocks_w: 0,
            blocks_h: 0,
            real_w: 0,
            real_h: 0,
            coefs: Vec::new(),
            dc_pred: 0,
        });
    }
    let h_max = comps.iter().map(|c| c.h).max().unwrap_or(1);
    let v_max = comps.iter().map(|c| c.v).max().unwrap_or(1);
    if comps.iter().any(|c| h_max % c.h != 0 || v_max % c.v != 0) {
        return Err("fractional sampling ratios are not supported (as in libjpeg)".into());
    }
    let mcus_x = width.div_ceil(8 * h_max);
    let mcus_y = height.div_ceil(8 * v_max);
    // Coefficients (2 bytes a sample), the component planes (1 byte) and the upsampled output
    // (3 bytes a pixel), counted before any of it is allocated.
    let samples: u64 = comps
        .iter()
        .map(|c| (mcus_x * c.h * 8) as u64 * (mcus_y * c.v * 8) as u64)
        .sum();
    let need = samples * 3 + (width as u64 * height as u64) * 3 * 2;
    if need > max_bytes {
        return Err(format!(
            "decoding its {width} x {height} pixels needs {need} bytes, over the limit of {max_bytes}"
        ));
    }
    for c in &mut comps {
        c.blocks_w = mcus_x * c.h;
        c.blocks_h = mcus_y * c.v;
        c.real_w = (width * c.h).div_ceil(h_max).div_ceil(8);
        c.real_h = (height * c.v).div_ceil(v_max).div_ceil(8);
        c.coefs = vec![0; c.blocks_w * c.blocks_h * 64];
    }
    Ok(Frame {
        width,
        height,
        progressive,
        comps,
        mcus_x,
        mcus_y,
        h_max,
        v_max,
    })
}

fn read_huffman(
    mut seg: &[u8],
    dc: &mut [Option<Huffman>; 4],
    ac: &mut [Option<Huffman>; 4],
) -> Result<(), String> {
    while !seg.is_empty() {
        if seg.len() < 17 {
            return Err("a DHT segment is too short".into());
        }
        let (class, slot) = (seg[0] >> 4, usize::from(seg[0] & 15));
        if class > 1 || slot > 3 {
            return Err("a DHT segment names a bad table".into());
        }
        let counts = &seg[1..17];
        let n: usize = counts.iter().map(|&c| usize::from(c)).sum();
        if n > 256 || seg.len() < 17 + n {
            return Err("a DHT segment is too short".into());
        }
        let table = Huffman::new(counts, &seg[17..17 + n])?;
        if class == 0 {
            dc[slot] = Some(table);
        } else {
            ac[slot] = Some(table);
        }
        seg = &seg[17 + n..];
    }
    Ok(())
}

fn read_quant(mut seg: &[u8], quant: &mut [Option<[u16; 64]>; 4]) -> Result<(), String> {
    while !seg.is_empty() {
        let (wide, slot) = (seg[0] >> 4, usize::from(seg[0] & 15));
        let size = if wide == 0 { 64 } else { 128 };
        if wide > 1 || slot > 3 || seg.len() < 1 + size {
            return Err("a DQT segment is too short or names a bad table".into());
        }
        let mut table = [0u16; 64];
        for (k, &natural) in ZIGZAG.iter().enumerate() {
            table[natural] = if wide == 0 {
                u16::from(seg[1 + k])
            } else {
                be16(seg, 1 + 2 * k) as u16
            };
        }
        quant[slot] = Some(table);
        seg = &seg[1 + size..];
    }
    Ok(())
}

fn read_scan(seg: &[u8], f: &Frame) -> Result<ScanParams, String> {
    let n = usize::from(*seg.first().ok_or("a scan header is empty")?);
    if n == 0 || n > 4 || seg.len() < 4 + 2 * n {
        return Err("a scan header is too short".into());
    }
    let mut comps = Vec::with_capacity(n);
    for i in 0..n {
        let (id, tables) = (seg[1 + 2 * i], seg[2 + 2 * i]);
        let c = f
            .comps
            .iter()
            .position(|c| c.id == id)
            .ok_or_else(|| format!("a scan names component {id}, which the frame lacks"))?;
        comps.push((c, usize::from(tables >> 4), usize::from(tables & 15)));
    }
    let tail = &seg[1 + 2 * n..];
    let (ss, se, ah, al) = (
        usize::from(tail[0]),
        usize::from(tail[1]),
        u32::from(tail[2] >> 4),
        u32::from(tail[2] & 15),
    );
    if f.progressive {
        let bad =
            se > 63 || ss > se || (ss == 0 && se != 0) || (ss > 0 && n != 1) || ah > 13 || al > 13;
        if bad {
            return Err("a progressive scan has bad spectral or approximation parameters".into());
        }
        Ok(ScanParams {
            progressive: true,
            comps,
            ss,
            se,
            ah,
            al,
        })
    } else {
        Ok(ScanParams {
            progressive: false,
            comps,
            ss: 0,
            se: 63,
            ah: 0,
            al: 0,
        })
    }
}

fn table<'t>(
    tables: &'t [Option<Huffman>; 4],
    slot: usize,
    kind: &str,
) -> Result<&'t Huffman, String> {
    tables
        .get(slot)
        .and_then(|t| t.as_ref())
        .ok_or_else(|| format!("a scan uses {kind} Huffman table {slot}, never defined"))
}

fn decode_scan(
    f: &mut Frame,
    scan: &ScanParams,
    dc_tables: &[Option<Huffman>; 4],
    ac_tables: &[Option<Huffman>; 4],
    restart_interval: usize,
    bits: &mut Bits,
    eobrun: &mut u32,
) -> Result<(), String> {
    // Only the tables a scan's blocks read must exist.
    let needs_dc = scan.ss == 0 && scan.ah == 0;
    let needs_ac = scan.se > 0;
    let mut tabs = Vec::with_capacity(scan.comps.len());
    for &(c, dc, ac) in &scan.comps {
        let dc = if needs_dc {
            Some(table(dc_tables, dc, "DC")?)
        } else {
            None
        };
        let ac = if needs_ac {
            Some(table(ac_tables, ac, "AC")?)
        } else {
            None
        };
        tabs.push((c, dc, ac));
    }
    for c in &mut f.comps {
        c.dc_pred = 0;
    }
    *eobrun = 0;
    let single = scan.comps.len() == 1;
    let units = if single {
        let c = &f.comps[scan.comps[0].0];
        c.real_w * c.real_h
    } else {
        f.mcus_x * f.mcus_y
    };
    for unit in 0..units {
        if restart_interval > 0 && unit > 0 && unit % restart_interval == 0 {
            bits.restart()?;
            for c in &mut f.comps {
                c.dc_pred = 0;
            }
            *eobrun = 0;
        }
        if single {
            let (ci, dc, ac) = tabs[0];
            let c = &mut f.comps[ci];
            let (bx, by) = (unit % c.real_w, unit / c.real_w);
            decode_block(c, bx, by, scan, dc, ac, bits, eobrun)?;
        } else {
            let (mx, my) = (unit % f.mcus_x, unit / f.mcus_x);
            for &(ci, dc, ac) in &tabs {
                let c = &mut f.comps[ci];
                for v in 0..c.v {
                    for h in 0..c.h {
                        decode_block(c, mx * c.h + h, my * c.v + v, scan, dc, ac, bits, eobrun)?;
                    }
                }
            }
        }
        if bits.truncated {
            return Ok(());
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn decode_block(
    c: &mut Component,
    bx: usize,
    by: usize,
    scan: &ScanParams,
    dc: Option<&Huffman>,
    ac: Option<&Huffman>,
    bits: &mut Bits,
    eobrun: &mut u32,
) -> Result<(), String> {
    let at = (by * c.blocks_w + bx) * 64;
    let block = &mut c.coefs[at..at + 64];
    let (ss, se, ah, al) = (scan.ss, scan.se, scan.ah, scan.al);
    if ss == 0 {
        if ah == 0 {
            let s = u32::from(bits.decode(dc.ok_or("internal: no DC table")?)?);
            if s > 15 {
                return Err("a DC difference has more than 15 bits".into());
            }
            c.dc_pred = c.dc_pred.wrapping_add(bits.signed(s));
            block[0] = (c.dc_pred << al) as i16;
        } else if bits.bit() {
            block[0] |= 1 << al;
        }
        if se == 0 {
            return Ok(());
        }
    }
    let ac = ac.ok_or("internal: no AC table")?;
    let first = ss.max(1);
    if ah == 0 {
        // Sequential, or the first pass of a progressive band.
        if *eobrun > 0 {
            *eobrun -= 1;
            return Ok(());
        }
        let mut k = first;
        while k <= se {
            let rs = bits.decode(ac)?;
            let (r, s) = (usize::from(rs >> 4), u32::from(rs & 15));
            if s == 0 {
                if r == 15 {
                    k += 16;
                    continue;
                }
                if scan.progressive {
                    *eobrun = (1 << r) - 1;
                    if r > 0 {
                        *eobrun += bits.bits(r as u32) as u32;
                    }
                }
                break;
            }
            k += r;
            // libjpeg's zigzag table has spare entries for 63 past the end; corrupt runs land there.
            block[ZIGZAG[k.min(63)]] = (bits.signed(s) << al) as i16;
            k += 1;
        }
        return Ok(());
    }
    // Refinement: one more bit of every coefficient already nonzero, and new coefficients of
    // magnitude 1 << al placed among the zero ones.
    let (p1, m1) = (1i16 << al, (-1i16) << al);
    let refine = |coef: &mut i16, bits: &mut Bits| {
        if bits.bit() && *coef & p1 == 0 {
            *coef = coef.wrapping_add(if *coef >= 0 { p1 } else { m1 });
        }
    };
    let mut k = first;
    if *eobrun == 0 {
        while k <= se {
            let rs = bits.decode(ac)?;
            let (mut r, s) = (i32::from(rs >> 4), rs & 15);
            let mut value = 0i16;
            if s != 0 {
                value = if bits.bit() { p1 } else { m1 };
            } else if r != 15 {
                *eobrun = 1 << r;
                if r > 0 {
                    *eobrun += bits.bits(r as u32) as u32;
                }
                break;
            }
            while k <= se {
                let coef = &mut block[ZIGZAG[k]];
                if *coef != 0 {
                    refine(coef, bits);
                } else {
                    r -= 1;
                    if r < 0 {
                        break;
                    }
                }
                k += 1;
            }
            if value != 0 && k <= se {
                block[ZIGZAG[k]] = value;
            }
            k += 1;
        }
    }
    if *eobrun > 0 {
        while k <= se {
            let coef = &mut block[ZIGZAG[k]];
            if *coef != 0 {
                refine(coef, bits);
            }
            k += 1;
        }
        *eobrun -= 1;
    }
    Ok(())
}

/// libjpeg's post-IDCT range limit: the value's low 10 bits, read as signed, centered and
/// clamped (so wild values from corrupt data wrap as libjpeg's table makes them).
fn idct_limit(v: i64) -> u8 {
    let s = ((v & 1023) ^ 512) - 512;
    (s + 128).clamp(0, 255) as u8
}

/// The "islow" inverse DCT of one dequantized block into 8 x 8 samples at `out[.. stride ..]`.
fn idct_islow(coefs: &[i16], quant: &[u16; 64], out: &mut [u8], stride: usize) {
    const CONST_BITS: u32 = 13;
    const PASS1_BITS: u32 = 2;
    // Cosine constants in 13-bit fixed point: round(x * 8192).
    const F0_298: i64 = 2446;
    const F0_390: i64 = 3196;
    const F0_541: i64 = 4433;
    const F0_765: i64 = 6270;
    const F0_899: i64 = 7373;
    const F1_175: i64 = 9633;
    const F1_501: i64 = 12299;
    const F1_847: i64 = 15137;
    const F1_961: i64 = 16069;
    const F2_053: i64 = 16819;
    const F2_562: i64 = 20995;
    const F3_072: i64 = 25172;
    fn descale(x: i64, n: u32) -> i64 {
        (x + (1 << (n - 1))) >> n
    }
    /// One 1-D pass over 8 values `x` (spaced in the caller), giving 8 outputs before descaling.
    fn pass(x: [i64; 8]) -> [i64; 8] {
        let z1 = (x[2] + x[6]) * F0_541;
        let tmp2 = z1 - x[6] * F1_847;
        let tmp3 = z1 + x[2] * F0_765;
        let tmp0 = (x[0] + x[4]) << CONST_BITS;
        let tmp1 = (x[0] - x[4]) << CONST_BITS;
        let (t10, t13, t11, t12) = (tmp0 + tmp3, tmp0 - tmp3, tmp1 + tmp2, tmp1 - tmp2);
        let (o0, o1, o2, o3) = (x[7], x[5], x[3], x[1]);
        let z1 = o0 + o3;
        let z2 = o1 + o2;
        let z3 = o0 + o2;
        let z4 = o1 + o3;
        let z5 = (z3 + z4) * F1_175;
        let (mut a0, mut a1, mut a2, mut a3) = (o0 * F0_298, o1 * F2_053, o2 * F3_072, o3 * F1_501);
        let z1 = -z1 * F0_899;
        let z2 = -z2 * F2_562;
        let z3 = -z3 * F1_961 + z5;
        let z4 = -z4 * F0_390 + z5;
        a0 += z1 + z3;
        a1 += z2 + z4;
        a2 += z2 + z3;
        a3 += z1 + z4;
        [
            t10 + a3,
            t11 + a2,
            t12 + a1,
            t13 + a0,
            t13 - a0,
            t12 - a1,
            t11 - a2,
            t10 - a3,
        ]
    }
    let mut ws = [0i64; 64];
    for col in 0..8 {
        let x: [i64; 8] =
            std::array::from_fn(|r| i64::from(coefs[r * 8 + col]) * i64::from(quant[r * 8 + col]));
        let y = pass(x);
        for r in 0..8 {
            ws[r * 8 + col] = descale(y[r], CONST_BITS - PASS1_BITS);
        }
    }
    for row in 0..8 {
        let x: [i64; 8] = std::array::from_fn(|c| ws[row * 8 + c]);
        let y = pass(x);
        for c in 0..8 {
            out[row * stride + c] = idct_limit(descale(y[c], CONST_BITS + PASS1_BITS + 3));
        }
    }
}

/// A component's samples after the inverse DCT: `w x h` real samples in rows of `stride`.
struct Plane {
    samples: Vec<u8>,
    stride: usize,
    w: usize,
    h: usize,
}

impl Plane {
    fn at(&self, x: usize, y: usize) -> i32 {
        i32::from(self.samples[y * self.stride + x])
    }
}

/// The component upsampled to the image's size, as libjpeg-turbo does by default: triangular
/// filters for 2x horizontal, 2x2 and 2x vertical (with biases that alternate so rounding
/// does not drift), replication for every other ratio or for planes 2 samples wide or less.
fn upsample(p: &Plane, hr: usize, vr: usize, width: usize, height: usize) -> Vec<u8> {
    let mut out = vec![0u8; width * height];
    let fancy_h = hr == 2 && p.w > 2;
    // Rows above the first and below the last real row repeat them.
    let near_rows = |y: usize, below: bool| -> usize {
        if below {
            (y + 1).min(p.h - 1)
        } else {
            y.saturating_sub(1)
        }
    };
    for oy in 0..height {
        let row = &mut out[oy * width..(oy + 1) * width];
        if hr == 2 && vr == 2 && fancy_h {
            let y = oy / 2;
            let y2 = near_rows(y, oy % 2 == 1);
            let col = |x: usize| p.at(x, y) * 3 + p.at(x, y2);
            let last = p.w - 1;
            for (ox, o) in row.iter_mut().enumerate() {
                let x = ox / 2;
                let this = col(x);
                let v = if ox % 2 == 0 {
                    if x == 0 {
                        (this * 4 + 8) >> 4
                    } else {
                        (this * 3 + col(x - 1) + 8) >> 4
                    }
                } else if x == last {
                    (this * 4 + 7) >> 4
                } else {
                    (this * 3 + col(x + 1) + 7) >> 4
                };
                *o = v as u8;
            }
        } else if hr == 2 && vr == 1 && fancy_h {
            let last = p.w - 1;
            for (ox, o) in row.iter_mut().enumerate() {
                let x = ox / 2;
                let this = p.at(x, oy) * 3;
                let v = if ox % 2 == 0 {
                    if x == 0 {
                        p.at(0, oy)
                    } else {
                        (this + p.at(x - 1, oy) + 1) >> 2
                    }
                } else if x == last {
                    p.at(x, oy)
                } else {
                    (this + p.at(x + 1, oy) + 2) >> 2
                };
                *o = v as u8;
            }
        } else if hr == 1 && vr == 2 {
            let y = oy / 2;
            let below = oy % 2 == 1;
            let y2 = near_rows(y, below);
            let bias = if below { 2 } else { 1 };
            for (x, o) in row.iter_mut().enumerate() {
                *o = ((p.at(x, y) * 3 + p.at(x, y2) + bias) >> 2) as u8;
            }
        } else {
            let y = oy / vr;
            for (ox, o) in row.iter_mut().enumerate() {
                *o = p.samples[y * p.stride + ox / hr];
            }
        }
    }
    out
}

fn finish(f: &Frame, rgb_already: bool) -> Decoded {
    let planes: Vec<Plane> = f
        .comps
        .iter()
        .map(|c| {
            let stride = c.blocks_w * 8;
            let mut samples = vec![0u8; stride * c.blocks_h * 8];
            let quant = c
                .quant
                .as_ref()
                .expect("checked: every component has a scan");
            for by in 0..c.blocks_h {
                for bx in 0..c.blocks_w {
                    let at = (by * c.blocks_w + bx) * 64;
                    idct_islow(
                        &c.coefs[at..at + 64],
                        quant,
                        &mut samples[by * 8 * stride + bx * 8..],
                        stride,
                    );
                }
            }
            Plane {
                samples,
                stride,
                w: (f.width * c.h).div_ceil(f.h_max),
                h: (f.height * c.v).div_ceil(f.v_max),
            }
        })
        .collect();
    let (w, h) = (f.width, f.height);
    let full: Vec<Vec<u8>> = f
        .comps
        .iter()
        .zip(&planes)
        .map(|(c, p)| upsample(p, f.h_max / c.h, f.v_max / c.v, w, h))
        .collect();
    if full.len() == 1 {
        return Decoded {
            width: w,
            height: h,
            channels: 1,
            pixels: full.into_iter().next().unwrap_or_default(),
        };
    }
    let mut pixels = vec![0u8; w * h * 3];
    let (a, b, c) = (&full[0], &full[1], &full[2]);
    for (i, px) in pixels.chunks_exact_mut(3).enumerate() {
        if rgb_already {
            px.copy_from_slice(&[a[i], b[i], c[i]]);
        } else {
            px.copy_from_slice(&ycc_to_rgb(a[i], b[i], c[i]));
        }
    }
    Decoded {
        width: w,
        height: h,
        channels: 3,
        pixels,
    }
}

/// YCbCr to RGB in libjpeg's 16-bit fixed point (JFIF's full-range coefficients).
fn ycc_to_rgb(y: u8, cb: u8, cr: u8) -> [u8; 3] {
    const HALF: i32 = 1 << 15;
    let fix = |x: f64| (x * 65536.0 + 0.5) as i32;
    let (y, cb, cr) = (i32::from(y), i32::from(cb) - 128, i32::from(cr) - 128);
    let r = y + ((fix(1.402) * cr + HALF) >> 16);
    let g = y + ((-fix(0.34414) * cb + HALF - fix(0.71414) * cr) >> 16);
    let b = y + ((fix(1.772) * cb + HALF) >> 16);
    [r, g, b].map(|v| v.clamp(0, 255) as u8)
}
