//! Plugin results with kube-scheduler's status codes and their exact meanings.

use std::borrow::Cow;
use std::fmt;

use smallvec::SmallVec;

/// What a plugin says about a pod (and, for filters, a node).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// The plugin is satisfied.
    Success,
    /// Something is broken (not a property of the pod or node); the attempt fails and the pod
    /// is retried with backoff.
    Error,
    /// The pod does not fit here, but might after preemption or other changes.
    Unschedulable,
    /// The pod does not fit here, and preemption would not help.
    UnschedulableAndUnresolvable,
    /// A Permit plugin asks the pod to wait.
    Wait,
    /// The plugin has nothing to do for this pod: its later extension points are skipped
    /// (PreFilter, PreScore), or the next plugin decides (Bind).
    Skip,
    /// The pod waits for something outside the scheduler; retried when it happens.
    Pending,
}

/// A plugin's result: a code, the reasons shown to users, and the plugin that said it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    code: Code,
    /// Held inline when there is one: most rejections give one reason, and a cycle may
    /// reject thousands of nodes.
    reasons: SmallVec<[Cow<'static, str>; 1]>,
    plugin: Option<&'static str>,
}

impl Status {
    /// Success, with no reasons. Does not allocate.
    pub const fn success() -> Self {
        Status {
            code: Code::Success,
            reasons: SmallVec::new_const(),
            plugin: None,
        }
    }

    /// A status with one reason.
    pub fn new(code: Code, reason: impl Into<Cow<'static, str>>) -> Self {
        Status {
            code,
            reasons: SmallVec::from_buf([reason.into()]),
            plugin: None,
        }
    }

    /// A status with several reasons (e.g. `Insufficient cpu` and `Insufficient memory`).
    pub fn with_reasons(code: Code, reasons: Vec<Cow<'static, str>>) -> Self {
        Status {
            code,
            reasons: SmallVec::from_vec(reasons),
            plugin: None,
        }
    }

    /// `Unschedulable` with one reason.
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Self {
        Status::new(Code::Unschedulable, reason)
    }

    /// `UnschedulableAndUnresolvable` with one reason.
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Self {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }

    /// `Error` with one reason.
    pub fn error(reason: impl Into<Cow<'static, str>>) -> Self {
        Status::new(Code::Error, reason)
    }

    /// `Skip`.
    pub const fn skip() -> Self {
        Status {
            code: Code::Skip,
            reasons: SmallVec::new_const(),
            plugin: None,
        }
    }

    /// Records which plugin produced the status.
    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.set_plugin(plugin);
        self
    }

    /// Names the plugin that said it, in place.
    pub fn set_plugin(&mut self, plugin: &'static str) {
        self.plugin = Some(plugin);
    }

    /// The code.
    pub fn code(&self) -> Code {
        self.code
    }

    /// The reasons, as shown to users.
    pub fn reasons(&self) -> &[Cow<'static, str>] {
        &self.reasons
    }

    /// The plugin that produced the status, once the framework has recorded it.
    pub fn plugin(&self) -> Option<&'static str> {
        self.plugin
    }

    /// True for `Success`.
    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    /// True for `Skip`.
    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// True for either unschedulable code.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// The reasons joined with `, `.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }

    /// The message of an attempt that failed with this error, as kube-scheduler writes it
    /// in the pod's condition and event: the reasons, after the plugin that failed if one
    /// did (an extender's or the scheduler's own error names its source in its reasons).
    pub fn error_message(&self) -> String {
        match self.plugin {
            Some(p) => format!("running plugin {p:?}: {}", self.message()),
            None => self.message(),
        }
    }
}

impl Default for Status {
    fn default() -> Self {
        Status::success()
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?}", self.code)?;
        if let Some(p) = self.plugin {
            write!(f, " ({p})")?;
        }
        if !self.reasons.is_empty() {
            write!(f, ": {}", self.message())?;
        }
        Ok(())
    }
}
