//! Host cost of encoding a Scan body's dispatches: the recorder's replay of captured commands
//! against bare wgpu encoding the same pipelines and bind groups into one compute pass, in the
//! same process (`cargo run --release --example encode_cost -- [BODY] [TIMES]`). Nothing is
//! submitted: this is the host time per dispatch, which bounds a Scan's iteration rate on a
//! fast GPU.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args()
        .skip(1)
        .map(|a| a.parse())
        .collect::<Result<_, _>>()?;
    let body = args.first().copied().unwrap_or(8);
    let times = args.get(1).copied().unwrap_or(2000);
    let ctx = wgpu_ops::Context::new_blocking(Default::default())?;
    let c = wgpu_ops::recorder::replay_cost(&ctx, body, times, 7)?;
    println!("adapter: {}", ctx.adapter_info().name);
    println!(
        "body of {body} dispatches replayed {times} times, ns per dispatch: replay {:.0}, \
         one error scope per command {:.0}, bare wgpu {:.0}; replay / bare {:.2}, \
         scoped / bare {:.2}; reading an element bound in place (a dynamic offset per \
         iteration): replay {:.0}, bare wgpu {:.0}, replay / bare {:.2}",
        c.replay,
        c.scoped,
        c.bare,
        c.replay / c.bare,
        c.scoped / c.bare,
        c.moving_replay,
        c.moving_bare,
        c.moving_replay / c.moving_bare
    );
    Ok(())
}
