//! wgpu error scopes around device and encoder calls: validation and out-of-memory errors
//! come back as [`Error`]s naming the op instead of being printed or panicking.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context as TaskContext, Poll, Waker};

use super::Context;
use crate::{Error, Result};

impl Context {
    /// Runs `f` inside validation and out-of-memory error scopes attributed to `op`.
    pub(crate) fn scoped<T>(&self, op: &str, f: impl FnOnce() -> T) -> (T, ScopeCheck) {
        let oom = self
            .inner
            .device
            .push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let validation = self
            .inner
            .device
            .push_error_scope(wgpu::ErrorFilter::Validation);
        let value = f();
        let v = validation.pop();
        let o = oom.pop();
        (
            value,
            ScopeCheck {
                op: op.to_string(),
                futures: vec![Box::pin(v), Box::pin(o)],
            },
        )
    }
}

// browser futures are not Send.
#[cfg(not(target_arch = "wasm32"))]
type ErrorFuture = Pin<Box<dyn Future<Output = Option<wgpu::Error>> + Send>>;
#[cfg(target_arch = "wasm32")]
type ErrorFuture = Pin<Box<dyn Future<Output = Option<wgpu::Error>>>>;

/// The popped error scopes of one recorded step. On native wgpu the result is known at once;
/// in the browser it arrives later and is awaited by [`Recorder::finish`].
pub(crate) struct ScopeCheck {
    pub(super) op: String,
    pub(super) futures: Vec<ErrorFuture>,
}

fn to_error(op: &str, e: wgpu::Error) -> Error {
    match e {
        wgpu::Error::OutOfMemory { .. } => Error::OutOfMemory {
            op: op.to_string(),
            message: e.to_string(),
        },
        _ => Error::Validation {
            op: op.to_string(),
            message: e.to_string(),
        },
    }
}

impl ScopeCheck {
    pub(crate) fn op(&self) -> &str {
        &self.op
    }

    /// Returns the first error already known; keeps the still-pending scopes in `self`.
    pub(crate) fn poll_now(&mut self) -> Result<()> {
        let mut cx = TaskContext::from_waker(Waker::noop());
        let mut first = None;
        self.futures.retain_mut(|f| match f.as_mut().poll(&mut cx) {
            Poll::Ready(e) => {
                if first.is_none() {
                    first = e;
                }
                false
            }
            Poll::Pending => true,
        });
        match first {
            Some(e) => Err(to_error(&self.op, e)),
            None => Ok(()),
        }
    }

    /// True when every scope has answered (always so on native wgpu).
    pub(crate) fn is_settled(&self) -> bool {
        self.futures.is_empty()
    }

    /// Fails with the scope's error if it is already known (always the case on native);
    /// otherwise `ctx`'s next `Recorder::finish` awaits it.
    pub(crate) fn now(mut self, ctx: &Context) -> Result<()> {
        self.poll_now().map_err(|e| ctx.explain_loss(&self.op, e))?;
        if !self.futures.is_empty() {
            ctx.inner
                .unchecked_builds
                .lock()
                .unwrap()
                .push((None, self));
        }
        Ok(())
    }

    pub(crate) async fn wait(self) -> Result<()> {
        for f in self.futures {
            if let Some(e) = f.await {
                return Err(to_error(&self.op, e));
            }
        }
        Ok(())
    }
}

impl Context {
    /// Awaits the error scopes of pipeline builds and buffer creations that had not answered
    /// when they were made (the browser answers later). A pipeline that failed to build makes
    /// a submission fail too; its own error (the shader compiler's message) is the one worth
    /// reporting, so these are awaited before the recorder's own scopes.
    pub(crate) async fn await_deferred_checks(&self) -> Result<()> {
        let builds = std::mem::take(&mut *self.inner.unchecked_builds.lock().unwrap());
        for (key, check) in builds {
            if let Err(e) = check.wait().await {
                if let Some(key) = key {
                    self.inner.pipelines.lock().unwrap().remove(&key);
                }
                return Err(e);
            }
        }
        Ok(())
    }
}
