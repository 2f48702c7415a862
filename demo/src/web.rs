//! Entry points for the browser page (wasm-bindgen). The page decodes pictures with a canvas
//! and hands RGBA bytes over; results come back as plain JS objects with RGBA pixels.

use js_sys::{Array, Object, Reflect, Uint8ClampedArray};
use wasm_bindgen::prelude::*;
use wgpu_ops::{Context, ContextOptions};

use crate::pipeline::{self, Image, Settings};

/// A GPU context for the page.
#[wasm_bindgen]
pub struct Demo {
    ctx: Context,
}

/// Opens the browser's WebGPU adapter; rejects with the reason when there is none.
#[wasm_bindgen(js_name = createDemo)]
pub async fn create_demo() -> Result<Demo, JsError> {
    let ctx = Context::new(ContextOptions::default())
        .await
        .map_err(|e| JsError::new(&e.to_string()))?;
    Ok(Demo { ctx })
}

fn set(obj: &Object, key: &str, value: impl Into<JsValue>) {
    Reflect::set(obj, &key.into(), &value.into()).expect("setting a field of a plain object");
}

#[wasm_bindgen]
impl Demo {
    /// The adapter's name and kind, as wgpu reports them, and how f16 is converted there.
    pub fn adapter(&self) -> String {
        let i = self.ctx.adapter_info();
        let name = if i.name.is_empty() { "WebGPU" } else { &i.name };
        let mut s = format!("{name} ({:?}, {:?})", i.backend, i.device_type);
        if !i.driver_info.is_empty() {
            s.push_str(&format!(", {}", i.driver_info));
        }
        s.push_str(match self.ctx.native_f16_conversions() {
            true => ", f16 by the built-in conversions",
            false => ", f16 by integer arithmetic",
        });
        s
    }

    /// Runs every op on the picture. `settings` holds the page's fields by the names of
    /// [`Settings`]' members; missing ones keep their defaults. Resolves to an array of
    /// `{name, op, params, shape, dtype, millis, ok, check, picture: {width, height, rgba}?}`.
    pub fn run(
        &self,
        rgba: Vec<u8>,
        width: usize,
        height: usize,
        settings: JsValue,
    ) -> js_sys::Promise {
        let ctx = self.ctx.clone();
        wasm_bindgen_futures::future_to_promise(async move {
            if rgba.len() != width * height * 4 {
                return Err(JsError::new("the picture must be width * height * 4 bytes").into());
            }
            let settings = read_settings(&settings);
            let image = Image {
                width,
                height,
                rgba,
            };
            let performance = web_sys::window()
                .and_then(|w| w.performance())
                .ok_or_else(|| JsError::new("no window.performance"))?;
            let clock = move || performance.now();
            let outcomes = pipeline::run(&ctx, &image, &settings, &clock).await;
            let out = Array::new();
            for o in outcomes {
                let obj = Object::new();
                set(&obj, "name", o.name);
                set(&obj, "op", o.op);
                set(&obj, "params", o.params);
                let shape: Array = o.shape.iter().map(|&d| JsValue::from(d as f64)).collect();
                set(&obj, "shape", shape);
                set(&obj, "dtype", o.dtype.name());
                set(&obj, "millis", o.millis);
                set(&obj, "ok", o.check.is_ok());
                set(&obj, "check", o.check.unwrap_or_else(|e| e));
                if let Some(p) = o.picture {
                    let pic = Object::new();
                    set(&pic, "width", p.width as f64);
                    set(&pic, "height", p.height as f64);
                    set(&pic, "rgba", Uint8ClampedArray::from(p.rgba.as_slice()));
                    set(&obj, "picture", pic);
                }
                out.push(&obj);
            }
            Ok(out.into())
        })
    }
}

fn read_settings(v: &JsValue) -> Settings {
    let mut s = Settings::default();
    let text = |key: &str| {
        Reflect::get(v, &key.into())
            .ok()
            .and_then(|x| x.as_string())
    };
    if let Some(t) = text("strided_slice") {
        s.strided_slice = t;
    }
    if let Some(t) = text("slice_start") {
        s.slice_start = t;
    }
    if let Some(t) = text("slice_stop") {
        s.slice_stop = t;
    }
    if let Some(t) = text("slice_step") {
        s.slice_step = t;
    }
    if let Some(t) = text("slice_axes") {
        s.slice_axes = t;
    }
    if let Some(b) = Reflect::get(v, &"block".into())
        .ok()
        .and_then(|x| x.as_f64())
    {
        s.block = b as usize;
    }
    s
}
