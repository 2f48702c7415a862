//! Indices on the GPU that are out of range. A graph's Gather, GatherElements, GatherND,
//! ScatterElements, ScatterND and ArrayFeatureExtractor check the indices they know on the host
//! while the graph is planned; those on the GPU (computed by the graph, or given as GPU tensors
//! to `Session::run_tensors`) are checked by the kernels that read them. The
//! first kernel invocation to find one out of range writes where (its site: the node and op),
//! which element and its value into a small buffer of the recording, and the session reads
//! it back with the run's outputs: no round trip of its own, no host check per op. Rules on
//! other values read on the GPU (`CheckValues` nodes) report into the same buffer.

use crate::{Context, Error, HostTensor, Result, Tensor};

/// Words of the fault buffer: the site (0: none yet), the index's element position, its value
/// (low, high word), and the axis (ScatterND: the tuple's entry); the rest is padding.
pub(crate) const FAULT_WORDS: usize = 8;

/// What an index of a site must keep to.
#[derive(Clone, Debug)]
pub(crate) enum IndexRule {
    /// Each index within `-len..len`, along `axis` of the data.
    Axis { axis: usize, len: usize },
    /// ScatterND: entry `j` of each tuple within `-shape[j]..shape[j]`.
    Entries { shape: Vec<usize> },
    /// GatherND: each tuple within the data's axes from `first` on, of `sizes`.
    Tuples { first: usize, sizes: Vec<usize> },
    /// A rule on values that no index kernel checks (`CheckValues`): the message of a value
    /// that breaks it, with `{i}` for its position and `{v}` for the value.
    Values { message: String },
}

/// A kernel that checks the indices it reads: the graph node (with the nodes that hold it, as
/// a Scan holds its body's), the op and its rule.
#[derive(Clone, Debug)]
struct Site {
    path: Vec<String>,
    op: &'static str,
    /// The op's input holding the indices (`indices`; ArrayFeatureExtractor's `Y`).
    input: String,
    rule: IndexRule,
}

/// A recording's checked sites and the buffer their kernels report into.
#[derive(Default)]
pub(crate) struct IndexChecks {
    /// The names of the graph nodes being recorded, outermost first.
    path: Vec<String>,
    /// While a graph node whose indices are to be checked records its kernels: the name of
    /// its input holding them.
    checking: Option<&'static str>,
    sites: Vec<Site>,
    buffer: Option<Tensor>,
    /// A buffer of an earlier run to report into (zeroed before its first use), so that a
    /// session's runs make none.
    kept: Option<Tensor>,
}

/// The sites of a finished recording and the buffer to read back after its commands ran.
#[derive(Clone, Debug)]
pub(crate) struct IndexFaults {
    sites: Vec<Site>,
    buffer: Tensor,
}

impl IndexChecks {
    /// The depth of the node path: what a graph's recording returns to for each of its nodes.
    pub(crate) fn depth(&self) -> usize {
        self.path.len()
    }

    /// Starts node `name` of a graph recorded at path depth `depth`.
    pub(crate) fn enter(&mut self, depth: usize, name: &str) {
        self.path.truncate(depth);
        self.path.push(name.to_string());
    }

    /// Ends the nodes of a graph recorded at path depth `depth`.
    pub(crate) fn leave(&mut self, depth: usize) {
        self.path.truncate(depth);
    }

    /// The site number of a kernel reading indices by `rule` (0 when its node does not check
    /// them: the ops that read indices of their own making, where one out of range reads
    /// zeros by design) and the buffer to bind for its reports.
    pub(crate) fn site(
        &mut self,
        ctx: &Context,
        op: &'static str,
        rule: IndexRule,
    ) -> Result<(u32, Tensor)> {
        let buffer = self.fault_buffer(ctx)?;
        let Some(input) = self.checking else {
            return Ok((0, buffer));
        };
        Ok((self.add_site(op, input.to_string(), rule), buffer))
    }

    /// The site number of a kernel checking the values of `op`'s input `input` by `rule`
    /// (always checked: see `Recorder::check_values`) and the buffer to bind.
    pub(crate) fn value_site(
        &mut self,
        ctx: &Context,
        op: &'static str,
        input: String,
        message: String,
    ) -> Result<(u32, Tensor)> {
        let buffer = self.fault_buffer(ctx)?;
        let rule = IndexRule::Values { message };
        Ok((self.add_site(op, input, rule), buffer))
    }

    fn add_site(&mut self, op: &'static str, input: String, rule: IndexRule) -> u32 {
        self.sites.push(Site {
            path: self.path.clone(),
            op,
            input,
            rule,
        });
        self.sites.len() as u32
    }

    /// The recording's fault buffer, made (or taken from an earlier run) on first use.
    fn fault_buffer(&mut self, ctx: &Context) -> Result<Tensor> {
        Ok(match &self.buffer {
            Some(b) => b.clone(),
            None if self.kept.is_some() => {
                let b = self.kept.take().expect("checked");
                // Written before the recording's first submission, after the earlier runs'.
                let zeros = [0u8; 4 * FAULT_WORDS];
                ctx.queue()
                    .write_buffer(&b.storage().buffers()[0], 0, &zeros);
                self.buffer = Some(b.clone());
                b
            }
            None => {
                let zeros = HostTensor::from_vec(vec![FAULT_WORDS], &[0u32; FAULT_WORDS])?;
                let b = Tensor::from_host(ctx, &zeros)?;
                self.buffer = Some(b.clone());
                b
            }
        })
    }

    /// Reports into `buffer` (a fault buffer of an earlier recording whose faults are no
    /// longer wanted) instead of a new one.
    pub(crate) fn keep(&mut self, buffer: Tensor) {
        self.kept = Some(buffer);
    }

    /// Whether the index kernels recorded now check their indices.
    pub(crate) fn checking(&self) -> bool {
        self.checking.is_some()
    }

    /// Checks the indices (of the input named `input`) of the index kernels recorded from now
    /// on, or (`None`) not; returns the setting it replaces.
    pub(crate) fn set_checking(&mut self, input: Option<&'static str>) -> Option<&'static str> {
        std::mem::replace(&mut self.checking, input)
    }

    /// The sites so far and the buffer to read back; `None` while no kernel checks indices.
    #[cfg(feature = "native")]
    pub(crate) fn so_far(&self) -> Option<IndexFaults> {
        let buffer = self.buffer.clone()?;
        (!self.sites.is_empty()).then(|| IndexFaults {
            sites: self.sites.clone(),
            buffer,
        })
    }

    /// The buffer that a later recording may report into (see [`IndexChecks::keep`]).
    pub(crate) fn buffer(&self) -> Option<Tensor> {
        self.buffer.clone().or_else(|| self.kept.clone())
    }

    /// The sites and buffer to read back after the recording's last commands; `None` when no
    /// kernel checks indices.
    pub(crate) fn take(&mut self) -> Option<IndexFaults> {
        let sites = std::mem::take(&mut self.sites);
        let buffer = self.buffer.take()?;
        (!sites.is_empty()).then_some(IndexFaults { sites, buffer })
    }
}

/// A value rule's message for the value `value` at position `i` (`{i}` and `{v}` put in),
/// found on the GPU or, by `CheckValues`, on the host.
pub(crate) fn value_message(message: &str, i: usize, value: i64) -> String {
    message
        .replace("{i}", &i.to_string())
        .replace("{v}", &value.to_string())
}

impl IndexFaults {
    /// The buffer to download after the run's commands.
    /// Zeroes the reports before a run that replays the recording's commands (queue writes
    /// come before the commands submitted after them).
    pub(crate) fn reset(&self, ctx: &Context) {
        let zeros = [0u8; 4 * FAULT_WORDS];
        ctx.queue()
            .write_buffer(&self.buffer.storage().buffers()[0], 0, &zeros);
    }

    pub(crate) fn buffer(&self) -> &Tensor {
        &self.buffer
    }

    /// The error the downloaded fault words report, if any.
    pub(crate) fn check(&self, words: &HostTensor) -> Result<()> {
        let words: Vec<u32> = words.to_vec::<u32>()?;
        let [site, position, lo, hi, entry, ..] = words[..] else {
            return Err(Error::Readback(format!(
                "the index fault buffer read back {} words, not {FAULT_WORDS}",
                words.len()
            )));
        };
        let Some(site) = (site as usize)
            .checked_sub(1)
            .and_then(|k| self.sites.get(k))
        else {
            return Ok(());
        };
        let value = (i64::from(hi as i32) << 32) | i64::from(lo);
        let input = &site.input;
        let message = match &site.rule {
            IndexRule::Axis { axis, len } => format!(
                "index {value} (element {position} of {input}, read on the GPU) is out of range for axis {axis} of size {len}"
            ),
            IndexRule::Entries { shape } => {
                let entry = entry as usize;
                let len = shape.get(entry).copied().unwrap_or(0);
                format!(
                    "index {value} (entry {entry} of tuple {position} of {input}, read on the GPU) is out of range for axis {entry} of size {len}"
                )
            }
            IndexRule::Tuples { first, sizes } => format!(
                "tuple {position} of {input} (read on the GPU) is out of range for data's axes from {first} on, of sizes {sizes:?}"
            ),
            IndexRule::Values { message } => value_message(message, position as usize, value),
        };
        Err(Error::IndexOutOfRange {
            nodes: site.path.clone(),
            source: Box::new(Error::invalid(site.op, input.as_str(), message)),
        })
    }
}
