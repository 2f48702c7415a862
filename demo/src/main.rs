//! The image demo on native: runs the demo's ops on a PNG, writes each result as a PNG and
//! prints a table (op, shape, dtype, time, check). Exits 1 if any check fails.

#[cfg(not(target_arch = "wasm32"))]
fn main() {
    native::main()
}

// The browser build has no command; its entry points are in `web.rs`.
#[cfg(target_arch = "wasm32")]
fn main() {}

#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::fs::File;
    use std::io::BufWriter;
    use std::path::{Path, PathBuf};
    use std::process::ExitCode;
    use std::time::Instant;

    use clap::Parser;
    use wgpu_ops::{Context, ContextOptions};
    use wgpu_ops_demo::{pipeline, Image, Settings};

    const SAMPLE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/www/sample.png");
    const OUT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/demo");

    /// Runs StridedSlice, Slice, SpaceToBatch, BatchToSpace and Scan on a picture on the GPU,
    /// checks each against the CPU reference and writes the results as PNG files.
    #[derive(Parser)]
    #[command(name = "image-demo")]
    struct Args {
        /// The picture (PNG); the bundled sample when left out.
        input: Option<PathBuf>,
        /// Folder for the result pictures (created if missing).
        #[arg(long, default_value = OUT)]
        out: PathBuf,
        /// StridedSlice as a numpy expression.
        #[arg(long = "expr")]
        strided_slice: Option<String>,
        /// Slice-8 start, stop, step and axes as comma-separated integers.
        #[arg(long)]
        start: Option<String>,
        #[arg(long)]
        stop: Option<String>,
        #[arg(long)]
        step: Option<String>,
        #[arg(long)]
        axes: Option<String>,
        /// Block size of SpaceToBatch / BatchToSpace along height and width.
        #[arg(long)]
        block: Option<usize>,
    }

    pub fn main() {
        let code = match run() {
            Ok(code) => code,
            Err(e) => {
                eprintln!("error: {e}");
                ExitCode::FAILURE
            }
        };
        std::process::exit(if code == ExitCode::SUCCESS { 0 } else { 1 });
    }

    fn run() -> Result<ExitCode, Box<dyn std::error::Error>> {
        env_logger_init();
        let args = Args::parse();
        let d = Settings::default();
        let settings = Settings {
            strided_slice: args.strided_slice.unwrap_or(d.strided_slice),
            slice_start: args.start.unwrap_or(d.slice_start),
            slice_stop: args.stop.unwrap_or(d.slice_stop),
            slice_step: args.step.unwrap_or(d.slice_step),
            slice_axes: args.axes.unwrap_or(d.slice_axes),
            block: args.block.unwrap_or(d.block),
        };
        let input = args.input.unwrap_or_else(|| SAMPLE.into());
        let image = read_png(&input).map_err(|e| format!("{}: {e}", input.display()))?;
        let ctx = Context::new_blocking(ContextOptions::default())?;
        let info = ctx.adapter_info();
        println!(
            "adapter: {} ({:?}, {:?})",
            info.name, info.backend, info.device_type
        );
        println!(
            "input:   {} ({} x {} RGBA)\n",
            input.display(),
            image.width,
            image.height
        );
        let t0 = Instant::now();
        let clock = move || t0.elapsed().as_secs_f64() * 1e3;
        let outcomes = pollster::block_on(pipeline::run(&ctx, &image, &settings, &clock));

        std::fs::create_dir_all(&args.out)?;
        println!(
            "{:<13} {:<18} {:<5} {:>9}  {:<6} params / check",
            "op", "shape", "dtype", "time", "check"
        );
        let mut failed = 0;
        for o in &outcomes {
            let shape = format!("{:?}", o.shape);
            let status = if o.check.is_ok() { "ok" } else { "FAILED" };
            failed += usize::from(o.check.is_err());
            println!(
                "{:<13} {:<18} {:<5} {:>6.2} ms  {:<6} {}",
                o.op,
                shape,
                o.dtype.name(),
                o.millis,
                status,
                o.params
            );
            match &o.check {
                Ok(m) => println!("{:56}{m}", ""),
                Err(m) => println!("{:56}{m}", ""),
            }
            if let Some(p) = &o.picture {
                write_png(&args.out.join(format!("{}.png", o.name)), p)?;
            }
        }
        println!(
            "\npictures written to {}",
            args.out
                .canonicalize()
                .unwrap_or(args.out.clone())
                .display()
        );
        if failed > 0 {
            eprintln!("error: {failed} check(s) failed");
            return Ok(ExitCode::FAILURE);
        }
        Ok(ExitCode::SUCCESS)
    }

    fn env_logger_init() {
        // Mesa prints a line about XDG_RUNTIME_DIR when it is unset; a private one keeps the
        // output to the table.
        if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
            let dir = std::env::temp_dir().join(format!("image-demo-{}", std::process::id()));
            if std::fs::create_dir_all(&dir).is_ok() {
                std::env::set_var("XDG_RUNTIME_DIR", dir);
            }
        }
    }

    /// Any PNG as 8-bit RGBA (palettes and 16-bit channels converted, gray expanded).
    pub fn read_png(path: &Path) -> Result<Image, Box<dyn std::error::Error>> {
        let mut decoder = png::Decoder::new(File::open(path)?);
        decoder.set_transformations(png::Transformations::normalize_to_color8());
        let mut reader = decoder.read_info()?;
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf)?;
        let bytes = &buf[..info.buffer_size()];
        let rgba: Vec<u8> = match info.color_type {
            png::ColorType::Rgba => bytes.to_vec(),
            png::ColorType::Rgb => bytes
                .chunks_exact(3)
                .flat_map(|p| [p[0], p[1], p[2], 255])
                .collect(),
            png::ColorType::Grayscale => bytes.iter().flat_map(|&g| [g, g, g, 255]).collect(),
            png::ColorType::GrayscaleAlpha => bytes
                .chunks_exact(2)
                .flat_map(|p| [p[0], p[0], p[0], p[1]])
                .collect(),
            png::ColorType::Indexed => return Err("palette not expanded".into()),
        };
        Ok(Image {
            width: info.width as usize,
            height: info.height as usize,
            rgba,
        })
    }

    fn write_png(path: &Path, image: &Image) -> Result<(), Box<dyn std::error::Error>> {
        let file = BufWriter::new(File::create(path)?);
        let mut enc = png::Encoder::new(file, image.width as u32, image.height as u32);
        enc.set_color(png::ColorType::Rgba);
        enc.set_depth(png::BitDepth::Eight);
        enc.set_compression(png::Compression::Best);
        enc.write_header()?.write_image_data(&image.rgba)?;
        Ok(())
    }
}
