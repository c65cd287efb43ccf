//! The resource vector the scheduler does arithmetic on.

use std::fmt;
use std::sync::Arc;

use super::echo::{echo, echo_name};
use super::quantity::{Quantity, QuantityError};

/// Name of the cpu resource.
pub const CPU: &str = "cpu";
/// Name of the memory resource.
pub const MEMORY: &str = "memory";
/// Name of the ephemeral-storage resource.
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
/// Name of the pod-count resource.
pub const PODS: &str = "pods";

/// cpu assumed for a container that requests none, when scoring (kube-scheduler's default).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// Memory assumed for a container that requests none, when scoring (kube-scheduler's default).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// The largest amount of one resource a list may give (2^53: in millicores 9.0e12 cores, in
/// bytes 8 PiB), far beyond any machine. Larger amounts are errors rather than numbers to add
/// up: sums over a pod's containers and over a node's pods, and the scorers' products of an
/// amount and a score, then stay within 64 bits.
pub const MAX_AMOUNT: i64 = 1 << 53;

/// A resource name, shared rather than copied: a cluster has few distinct extended resources.
pub type ResourceName = Arc<str>;

/// Amounts of every resource the scheduler accounts for: cpu in millicores, memory and
/// ephemeral storage in bytes, a pod count, and extended resources (`nvidia.com/gpu`,
/// `hugepages-2Mi`, ...) in their base units, kept sorted by name.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Resources {
    /// cpu in millicores.
    pub milli_cpu: i64,
    /// Memory in bytes.
    pub memory: i64,
    /// Ephemeral storage in bytes.
    pub ephemeral_storage: i64,
    /// Number of pods (allocatable `pods` on a node; 1 per pod on the request side is implicit).
    pub allowed_pods: i64,
    /// Extended and hugepages resources, sorted by name, no zero entries required.
    pub scalar: Vec<(ResourceName, i64)>,
}

impl Resources {
    /// Reads a `ResourceList` (name -> quantity); cpu as millicores, everything else as values.
    /// `what` names the field in errors, e.g. `spec.containers[0].resources.requests`.
    pub fn from_list<'a>(
        list: impl IntoIterator<Item = (&'a String, &'a str)>,
        what: &str,
    ) -> Result<Self, ResourceError> {
        let mut r = Resources::default();
        for (name, text) in list {
            let field = || format!("{what}[{}]", echo_name(name));
            let q = Quantity::parse(text).map_err(|error| ResourceError::Quantity {
                field: field(),
                error,
            })?;
            if q.is_negative() {
                return Err(ResourceError::Negative {
                    field: field(),
                    value: echo(text).to_string(),
                });
            }
            let amount = if name == CPU {
                q.milli_value()
            } else {
                q.value()
            };
            if amount > MAX_AMOUNT {
                return Err(ResourceError::TooLarge {
                    field: format!("{what}[{name}]"),
                    value: text.to_string(),
                });
            }
            r.set(name, amount);
        }
        Ok(r)
    }

    /// Sets the amount of `name` (millicores for cpu, base units for the rest).
    fn set(&mut self, name: &str, amount: i64) {
        match name {
            CPU => self.milli_cpu = amount,
            MEMORY => self.memory = amount,
            EPHEMERAL_STORAGE => self.ephemeral_storage = amount,
            PODS => self.allowed_pods = amount,
            _ if is_scalar_resource(name) => self.set_scalar(name, amount),
            // Other native resources (storage, ...) are not scheduled on.
            _ => {}
        }
    }

    /// Amount of the named resource, zero when absent.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pods,
            _ => self.scalar(name),
        }
    }

    /// Amount of an extended resource, zero when absent.
    pub fn scalar(&self, name: &str) -> i64 {
        match self.scalar.binary_search_by(|(n, _)| (**n).cmp(name)) {
            Ok(i) => self.scalar[i].1,
            Err(_) => 0,
        }
    }

    /// Sets an extended resource, keeping the list sorted.
    pub fn set_scalar(&mut self, name: &str, value: i64) {
        match self.scalar.binary_search_by(|(n, _)| (**n).cmp(name)) {
            Ok(i) => self.scalar[i].1 = value,
            Err(i) => self.scalar.insert(i, (Arc::from(name), value)),
        }
    }

    /// Adds `other` to `self`, resource by resource.
    pub fn add(&mut self, other: &Resources) {
        self.milli_cpu += other.milli_cpu;
        self.memory += other.memory;
        self.ephemeral_storage += other.ephemeral_storage;
        self.allowed_pods += other.allowed_pods;
        for (name, v) in &other.scalar {
            let cur = self.scalar(name);
            self.set_scalar(name, cur + v);
        }
    }

    /// Subtracts `other` from `self`, resource by resource.
    pub fn sub(&mut self, other: &Resources) {
        self.milli_cpu -= other.milli_cpu;
        self.memory -= other.memory;
        self.ephemeral_storage -= other.ephemeral_storage;
        self.allowed_pods -= other.allowed_pods;
        for (name, v) in &other.scalar {
            let cur = self.scalar(name);
            self.set_scalar(name, cur - v);
        }
    }

    /// Raises each resource of `self` to at least the amount in `other`.
    pub fn max_with(&mut self, other: &Resources) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pods = self.allowed_pods.max(other.allowed_pods);
        for (name, v) in &other.scalar {
            let cur = self.scalar(name);
            if *v > cur {
                self.set_scalar(name, *v);
            }
        }
    }

    /// True when every amount is zero.
    pub fn is_zero(&self) -> bool {
        self.milli_cpu == 0
            && self.memory == 0
            && self.ephemeral_storage == 0
            && self.allowed_pods == 0
            && self.scalar.iter().all(|(_, v)| *v == 0)
    }
}

impl fmt::Display for Resources {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "cpu={}m memory={}", self.milli_cpu, self.memory)?;
        if self.ephemeral_storage != 0 {
            write!(f, " ephemeral-storage={}", self.ephemeral_storage)?;
        }
        for (n, v) in &self.scalar {
            write!(f, " {n}={v}")?;
        }
        Ok(())
    }
}

/// True for resources the scheduler treats as opaque counters: extended resources
/// (`example.com/foo`, outside the `kubernetes.io/` namespace), `hugepages-*` and
/// `attachable-volumes-*`.
pub fn is_scalar_resource(name: &str) -> bool {
    is_extended_resource(name)
        || name.starts_with("hugepages-")
        || name.starts_with("attachable-volumes-")
}

/// True for a domain-qualified resource name outside `kubernetes.io/`, such as `nvidia.com/gpu`.
pub fn is_extended_resource(name: &str) -> bool {
    match name.split_once('/') {
        Some((domain, _)) => {
            !(domain == "kubernetes.io"
                || domain.ends_with(".kubernetes.io")
                || name.starts_with("requests."))
        }
        None => false,
    }
}

/// A resource amount that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResourceError {
    /// The text is not a quantity.
    #[error("{field}: {error}")]
    Quantity {
        /// The field holding the quantity.
        field: String,
        /// What is wrong with it.
        error: QuantityError,
    },
    /// Requests and capacities cannot be negative.
    #[error("{field}: must be non-negative, got {value}")]
    Negative {
        /// The field holding the quantity.
        field: String,
        /// The value given, quoted and cut as [`echo`] shows it.
        value: String,
    },
    /// An amount above [`MAX_AMOUNT`].
    #[error(
        "{field}: {value:?} is more than any machine has (at most 2^53 bytes, units or millicores)"
    )]
    TooLarge {
        /// The field holding the quantity.
        field: String,
        /// The value given.
        value: String,
    },
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
        pairs
            .iter()
            .map(|(a, b)| (a.to_string(), b.to_string()))
            .collect()
    }

    fn parse(pairs: &[(&str, &str)]) -> Result<Resources, ResourceError> {
        let l = list(pairs);
        Resources::from_list(l.iter().map(|(a, b)| (a, b.as_str())), "requests")
    }

    #[test]
    fn amounts_beyond_any_machine_are_errors() {
        // Found by fuzz_sim_structured_clusters_fit: two containers of "9223372036854775807"
        // memory overflowed the pod's sums.
        assert_eq!(parse(&[("memory", "8Pi")]).unwrap().memory, MAX_AMOUNT);
        assert_eq!(
            parse(&[("cpu", "9e12")]).unwrap().milli_cpu,
            9_000_000_000_000_000
        );
        for (name, value) in [
            ("memory", "9223372036854775807"),
            ("memory", "9Pi"),
            ("cpu", "1e13"),
            ("nvidia.com/gpu", "1Ei"),
        ] {
            assert_eq!(
                parse(&[(name, value)]),
                Err(ResourceError::TooLarge {
                    field: format!("requests[{name}]"),
                    value: value.to_string()
                })
            );
        }
    }

    #[test]
    fn reads_every_kind() {
        let r = parse(&[
            ("cpu", "250m"),
            ("memory", "1Gi"),
            ("ephemeral-storage", "10G"),
            ("pods", "110"),
            ("nvidia.com/gpu", "2"),
            ("hugepages-2Mi", "4Mi"),
            ("storage", "1Ti"),
        ])
        .unwrap();
        assert_eq!(r.milli_cpu, 250);
        assert_eq!(r.memory, 1 << 30);
        assert_eq!(r.ephemeral_storage, 10_000_000_000);
        assert_eq!(r.allowed_pods, 110);
        assert_eq!(r.scalar("nvidia.com/gpu"), 2);
        assert_eq!(r.scalar("hugepages-2Mi"), 4 << 20);
        assert_eq!(r.scalar.len(), 2, "storage is not scheduled on");
    }

    #[test]
    fn names_the_field_on_error() {
        let e = parse(&[("cpu", "lots")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "requests[cpu]: invalid quantity \"lots\": must start with a number"
        );
        let e = parse(&[("memory", "-1Gi")]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "requests[memory]: must be non-negative, got \"-1Gi\""
        );
    }

    #[test]
    fn arithmetic() {
        let mut a = parse(&[("cpu", "1"), ("example.com/x", "1")]).unwrap();
        let b = parse(&[("cpu", "2"), ("example.com/y", "3")]).unwrap();
        a.add(&b);
        assert_eq!(a.milli_cpu, 3000);
        assert_eq!(a.scalar("example.com/y"), 3);
        a.sub(&b);
        assert_eq!(a.milli_cpu, 1000);
        a.max_with(&b);
        assert_eq!(a.milli_cpu, 2000);
        assert_eq!(a.scalar("example.com/x"), 1);
    }

    #[test]
    fn extended_resource_names() {
        assert!(is_extended_resource("nvidia.com/gpu"));
        assert!(!is_extended_resource("kubernetes.io/foo"));
        assert!(!is_extended_resource("cpu"));
        assert!(is_scalar_resource("hugepages-1Gi"));
    }
}
