//! The structured allocator: which devices of the ResourceSlices reachable from one node
//! satisfy a pod's claims, as Kubernetes 1.37's (the "incubating" implementation its default
//! gates choose, `k8s.io/dynamic-resource-allocation/structured`): pools in driver and pool
//! order, slices by name, devices in slice order, and the first complete solution of a
//! search that backtracks. See docs/dra.md for the rules it follows.
//!
//! Not yet here (issue 52): consumable capacity (a request for part of a device's capacity
//! is refused, and a device that allows many allocations is given to one claim at a time)
//! and binding conditions (a device with them is not allocated). Both leave a pod pending
//! where kube-scheduler may place it; neither places one wrongly.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, PoisonError, RwLock};

use crate::cache::DynamicResources;
use crate::model::Labels;
use crate::model::dra::Amount;
use crate::model::dra::AttributeValue;
use crate::model::dra::cel::{CelDevice, Selector};
use crate::model::dra::claim::{
    AllocatedDevice, Allocation, AllocationMode, DeviceToleration, ExactRequest, RequestKind,
    ResourceClaimModel,
};
use crate::model::dra::slice::{Device, DeviceNodes, SliceModel, SliceNodes};
use crate::model::selector::{NodeSelector, NodeSelectorTerm, Operator, Requirement};

/// Results a claim may hold at most (Kubernetes' `AllocationResultsMaxSize`).
pub const MAX_RESULTS: usize = 32;

/// A device's identity: driver, pool and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    /// The driver.
    pub driver: String,
    /// The pool.
    pub pool: String,
    /// The device.
    pub device: String,
}

/// What is allocated already: the devices claims hold (admin access aside) and the
/// counters their devices consume, by driver, pool and counter set.
#[derive(Debug, Clone, Default)]
pub struct Allocated {
    /// Devices in use.
    pub devices: HashSet<DeviceId>,
}

impl Allocated {
    /// The devices the allocated claims of `resources` hold, and `extra` (allocations made
    /// but not written yet).
    pub fn of<'a>(
        resources: &'a DynamicResources,
        extra: impl IntoIterator<Item = &'a Allocation>,
    ) -> Allocated {
        let mut devices = HashSet::new();
        let claims = resources.claims().filter_map(|c| c.allocation.as_ref());
        for allocation in claims.chain(extra) {
            for d in allocation.devices.iter().filter(|d| !d.admin_access) {
                devices.insert(DeviceId {
                    driver: d.driver.clone(),
                    pool: d.pool.clone(),
                    device: d.device.clone(),
                });
            }
        }
        Allocated { devices }
    }
}

/// Why an allocation could not be tried: an error, as kube-scheduler's Filter reports it.
pub type AllocError = String;

/// The node an allocation is for.
#[derive(Debug, Clone, Copy)]
pub struct Node<'a> {
    /// Its name.
    pub name: &'a str,
    /// Its labels.
    pub labels: &'a Labels,
}

/// A pool of devices reachable from the node, its newest generation complete or not.
struct Pool<'a> {
    driver: &'a str,
    name: &'a str,
    /// Its slices of the newest generation that reach the node, by name.
    slices: Vec<&'a SliceModel>,
    incomplete: bool,
    /// Why it cannot be used, if it cannot.
    invalid: Option<String>,
}

/// The pools of `slices` reachable from `node`, in the allocator's order.
fn gather_pools<'a>(slices: &[&'a SliceModel], node: Node<'_>) -> Vec<Pool<'a>> {
    // The newest generation of each pool, and how many of its slices exist, over every
    // slice of the cluster: a pool whose newest generation is not complete is not used.
    let mut newest: HashMap<(&str, &str), (i64, i64)> = HashMap::new();
    for s in slices {
        let key = (s.driver.as_str(), s.pool.name.as_str());
        let entry = newest.entry(key).or_insert((s.pool.generation, 0));
        if s.pool.generation > entry.0 {
            *entry = (s.pool.generation, 0);
        }
        if s.pool.generation == entry.0 {
            entry.1 += 1;
        }
    }
    let mut pools: BTreeMap<(&str, &str), Pool<'a>> = BTreeMap::new();
    for s in slices {
        let key = (s.driver.as_str(), s.pool.name.as_str());
        let (generation, count) = newest[&key];
        if s.pool.generation != generation || !reaches(s, node) {
            continue;
        }
        let pool = pools.entry(key).or_insert_with(|| Pool {
            driver: &s.driver,
            name: &s.pool.name,
            slices: Vec::new(),
            incomplete: count != s.pool.slice_count,
            invalid: None,
        });
        pool.slices.push(s);
    }
    let mut pools: Vec<Pool<'a>> = pools.into_values().collect();
    for pool in &mut pools {
        pool.slices.sort_by(|a, b| a.name.cmp(&b.name));
        pool.invalid = duplicate_device(&pool.slices);
    }
    // Pools with devices that wait for binding conditions go last.
    pools.sort_by_key(|p| {
        p.slices
            .iter()
            .any(|s| s.devices.iter().any(|d| !d.binding_conditions.is_empty()))
    });
    pools
}

/// Whether a slice's devices may be reachable from `node`.
fn reaches(slice: &SliceModel, node: Node<'_>) -> bool {
    match &slice.nodes {
        SliceNodes::Node(n) => n == node.name,
        SliceNodes::All => true,
        SliceNodes::Selector(s) => s.matches(node.name, node.labels),
        SliceNodes::PerDevice => slice.devices.iter().any(|d| device_reaches(d, node)),
    }
}

/// Whether a device of a per-device slice is reachable from `node` (any other device is, if
/// its slice is).
fn device_reaches(device: &Device, node: Node<'_>) -> bool {
    match &device.nodes {
        None | Some(DeviceNodes::All) => true,
        Some(DeviceNodes::Node(n)) => n == node.name,
        Some(DeviceNodes::Selector(s)) => s.matches(node.name, node.labels),
    }
}

fn duplicate_device(slices: &[&SliceModel]) -> Option<String> {
    let mut seen = HashSet::new();
    for s in slices {
        for d in &s.devices {
            if !seen.insert(d.name.as_str()) {
                return Some(format!("duplicate device name {}", d.name));
            }
        }
    }
    None
}

/// A device the search may give, with where it comes from.
struct Candidate<'a> {
    id: DeviceId,
    device: &'a Device,
    slice: &'a SliceModel,
    cel: CelDevice,
}

/// One request (or subrequest) to satisfy, compiled.
struct RequestData<'a> {
    /// `request` or `request/subrequest`, as the result names it.
    name: String,
    exact: &'a ExactRequest,
    selectors: Vec<(Arc<Selector>, String)>,
}

/// The claims' requests, compiled, in order; each a list of alternatives (one for an
/// `exactly` request, each subrequest in order for `firstAvailable`).
struct ClaimData<'a> {
    claim: &'a ResourceClaimModel,
    requests: Vec<Vec<RequestData<'a>>>,
}

/// The allocator of one pod's claims: built once per cycle, asked once per node.
pub struct Allocator<'a> {
    slices: Vec<&'a SliceModel>,
    claims: Vec<ClaimData<'a>>,
    allocated: &'a Allocated,
}

/// Compiled selectors by their text, shared by every allocation of a plugin: a selector is
/// compiled once, not once per node (kube-scheduler keeps the last ten; these are few, and
/// the cache starts over past [`Selectors::MAX`]).
#[derive(Debug, Default)]
pub struct Selectors(RwLock<HashMap<String, Arc<Selector>>>);

impl Selectors {
    /// Selectors kept at most.
    pub const MAX: usize = 1024;

    /// `expression` compiled; an error names it by `source`.
    fn compiled(&self, expression: &str, source: &str) -> Result<Arc<Selector>, AllocError> {
        let known = self.0.read().unwrap_or_else(PoisonError::into_inner);
        if let Some(s) = known.get(expression) {
            return Ok(s.clone());
        }
        drop(known);
        let selector = Selector::compile(expression)
            .map(Arc::new)
            .map_err(|e| format!("{source}: CEL compile error: {e}"))?;
        let mut known = self.0.write().unwrap_or_else(PoisonError::into_inner);
        if known.len() >= Self::MAX {
            known.clear();
        }
        known.insert(expression.to_string(), selector.clone());
        Ok(selector)
    }
}

impl<'a> Allocator<'a> {
    /// The allocator of `claims` (those not allocated yet, in the pod's order) over the
    /// objects of `resources`, with `allocated` in use. An error, as kube-scheduler words
    /// it, for a request it cannot handle or a selector that does not compile.
    pub fn new(
        resources: &'a DynamicResources,
        claims: &[&'a ResourceClaimModel],
        allocated: &'a Allocated,
        selectors: &Selectors,
    ) -> Result<Allocator<'a>, AllocError> {
        let claims = claims
            .iter()
            .map(|claim| claim_data(resources, claim, selectors))
            .collect::<Result<_, _>>()?;
        Ok(Allocator {
            slices: resources.slices().map(|s| &**s).collect(),
            claims,
            allocated,
        })
    }

    /// The claims' allocations on `node`, in claim order; `None` when they cannot all be
    /// allocated there; an error for a selector that fails on a device, a request for all
    /// devices of a pool being updated, or a search over invalid pools that found nothing.
    pub fn allocate(&self, node: Node<'_>) -> Result<Option<Vec<Allocation>>, AllocError> {
        let pools = gather_pools(&self.slices, node);
        let candidates = candidates(&pools, node);
        let mut search = Search {
            node,
            candidates: &candidates,
            allocated: self.allocated,
            chosen: Vec::new(),
            in_use: HashSet::new(),
            counters: counters_in_use(&pools, self.allocated),
            claims: &self.claims,
        };
        let mut slots = Vec::new();
        for (c, claim) in self.claims.iter().enumerate() {
            for (r, alternatives) in claim.requests.iter().enumerate() {
                slots.push((c, r, alternatives.len()));
            }
        }
        let all_counts = all_counts(&self.claims, &pools, &candidates)?;
        if search.fill(&slots, 0, &all_counts)? {
            return Ok(Some(search.results(&self.claims)));
        }
        if pools.iter().any(|p| p.invalid.is_some()) {
            return Err("invalid resource pools were encountered".to_string());
        }
        Ok(None)
    }
}

fn claim_data<'a>(
    resources: &'a DynamicResources,
    claim: &'a ResourceClaimModel,
    selectors: &Selectors,
) -> Result<ClaimData<'a>, AllocError> {
    let what = format!("claim {}/{}", claim.namespace, claim.name);
    let mut requests = Vec::new();
    for request in &claim.requests {
        let alternatives = match &request.kind {
            RequestKind::Exactly(e) => vec![(request.name.clone(), e)],
            RequestKind::FirstAvailable(subs) => subs
                .iter()
                .map(|(sub, e)| (format!("{}/{sub}", request.name), e))
                .collect(),
        };
        let data = alternatives
            .into_iter()
            .map(|(name, exact)| request_data(resources, &what, name, exact, selectors))
            .collect::<Result<_, _>>()?;
        requests.push(data);
    }
    Ok(ClaimData { claim, requests })
}

fn request_data<'a>(
    resources: &DynamicResources,
    what: &str,
    name: String,
    exact: &'a ExactRequest,
    cache: &Selectors,
) -> Result<RequestData<'a>, AllocError> {
    let at = format!("{what}, request {name}");
    if !exact.capacity.is_empty() {
        return Err(format!(
            "{at}: has capacity requests, which gantry does not allocate yet"
        ));
    }
    if let AllocationMode::ExactCount(n) = exact.mode
        && (n < 1 || n as usize > MAX_RESULTS)
    {
        return Err(format!("{at}: exact count {n} is too large"));
    }
    let class = resources.class(&exact.class).ok_or_else(|| {
        format!(
            "{at}: could not retrieve device class {}: not found",
            exact.class
        )
    })?;
    let mut selectors = Vec::new();
    for (i, expression) in class.selectors.iter().enumerate() {
        let source = format!("class {}: selector #{i}", class.name);
        selectors.push((cache.compiled(expression, &source)?, source));
    }
    for (i, expression) in exact.selectors.iter().enumerate() {
        let source = format!("{what}: selector #{i}");
        selectors.push((cache.compiled(expression, &source)?, source));
    }
    Ok(RequestData {
        name,
        exact,
        selectors,
    })
}

/// The devices of the usable pools reachable from `node`, in search order.
fn candidates<'a>(pools: &[Pool<'a>], node: Node<'_>) -> Vec<Candidate<'a>> {
    pools
        .iter()
        .filter(|p| !p.incomplete && p.invalid.is_none())
        .flat_map(|p| p.slices.iter().map(move |s| (p, *s)))
        .flat_map(|(p, s)| {
            s.devices
                .iter()
                .filter(move |d| s.nodes != SliceNodes::PerDevice || device_reaches(d, node))
                .map(move |d| Candidate {
                    id: DeviceId {
                        driver: p.driver.to_string(),
                        pool: p.name.to_string(),
                        device: d.name.clone(),
                    },
                    device: d,
                    slice: s,
                    cel: CelDevice::new(p.driver, d),
                })
        })
        .collect()
}

/// How many devices each request with `All` takes, by (claim, request, alternative): every
/// device that matches it. An error when a pool it could draw on is being updated or is
/// invalid.
fn all_counts(
    claims: &[ClaimData<'_>],
    pools: &[Pool<'_>],
    candidates: &[Candidate<'_>],
) -> Result<HashMap<(usize, usize, usize), usize>, AllocError> {
    let mut counts = HashMap::new();
    for (c, claim) in claims.iter().enumerate() {
        for (r, alternatives) in claim.requests.iter().enumerate() {
            for (a, request) in alternatives.iter().enumerate() {
                if request.exact.mode != AllocationMode::All {
                    continue;
                }
                let at = format!(
                    "claim {}/{}, request {}",
                    claim.claim.namespace, claim.claim.name, request.name
                );
                for p in pools {
                    let state = if p.incomplete {
                        "currently being updated"
                    } else if p.invalid.is_some() {
                        "currently invalid"
                    } else {
                        continue;
                    };
                    return Err(format!(
                        "{at}: asks for all devices, but resource pool {}/{} is {state}",
                        p.driver, p.name
                    ));
                }
                let mut n = 0;
                for candidate in candidates {
                    if selectable(request, candidate)? {
                        n += 1;
                    }
                }
                counts.insert((c, r, a), n);
            }
        }
    }
    Ok(counts)
}

/// Whether `request` may have `candidate`: its class's selectors and its own all hold, and
/// it waits for no binding condition.
fn selectable(request: &RequestData<'_>, candidate: &Candidate<'_>) -> Result<bool, AllocError> {
    if !candidate.device.binding_conditions.is_empty() {
        return Ok(false);
    }
    for (selector, source) in &request.selectors {
        let matched = selector.matches(&candidate.cel).map_err(|e| {
            let id = &candidate.id;
            format!(
                "{source} on device {}/{}/{}: CEL runtime error: {e}",
                id.driver, id.pool, id.device
            )
        })?;
        if !matched {
            return Ok(false);
        }
    }
    Ok(true)
}

/// What is left of each shared counter, by (driver, pool, counter set, counter).
type Counters<'a> = HashMap<CounterKey<'a>, Amount>;

/// A shared counter: driver, pool, counter set and counter.
type CounterKey<'a> = (&'a str, &'a str, &'a str, &'a str);

/// What is left of every shared counter of the pools once the devices in use have taken
/// theirs (those of devices that do not reach the node included).
fn counters_in_use<'a>(pools: &[Pool<'a>], allocated: &Allocated) -> Counters<'a> {
    let mut left = Counters::new();
    for p in pools {
        for s in &p.slices {
            for set in &s.shared_counters {
                for (name, value) in &set.counters {
                    left.insert((p.driver, p.name, set.name.as_str(), name.as_str()), *value);
                }
            }
        }
    }
    for p in pools {
        for s in &p.slices {
            for d in &s.devices {
                let id = DeviceId {
                    driver: p.driver.to_string(),
                    pool: p.name.to_string(),
                    device: d.name.clone(),
                };
                if allocated.devices.contains(&id) {
                    take_counters(&mut left, s, d);
                }
            }
        }
    }
    left
}

/// What `device` of `slice` consumes of each shared counter.
fn consumption<'a>(
    slice: &'a SliceModel,
    device: &'a Device,
) -> impl Iterator<Item = (CounterKey<'a>, Amount)> {
    let (driver, pool) = (slice.driver.as_str(), slice.pool.name.as_str());
    device.consumes_counters.iter().flat_map(move |set| {
        set.counters
            .iter()
            .map(move |(name, amount)| ((driver, pool, set.name.as_str(), name.as_str()), *amount))
    })
}

/// Takes what `device` consumes from `left`; false (and nothing taken) when a counter would
/// go below zero or is not there.
fn take_counters<'a>(left: &mut Counters<'a>, slice: &'a SliceModel, device: &'a Device) -> bool {
    let enough = consumption(slice, device)
        .all(|(key, amount)| left.get(&key).is_some_and(|have| *have >= amount));
    if enough {
        for (key, amount) in consumption(slice, device) {
            if let Some(have) = left.get_mut(&key) {
                have.0 -= amount.0;
            }
        }
    }
    enough
}

/// Gives back what `device` consumes to `left`.
fn give_counters<'a>(left: &mut Counters<'a>, slice: &'a SliceModel, device: &'a Device) {
    for (key, amount) in consumption(slice, device) {
        if let Some(have) = left.get_mut(&key) {
            have.0 += amount.0;
        }
    }
}

/// Whether `tolerations` tolerate every taint of `device` that keeps pods off it.
fn tolerated(device: &Device, tolerations: &[DeviceToleration]) -> bool {
    device.taints.iter().all(|taint| {
        tolerations.iter().any(|t| {
            t.effect.as_ref().is_none_or(|e| *e == taint.effect)
                && t.key.as_ref().is_none_or(|k| *k == taint.key)
                && match t.operator.as_str() {
                    "Exists" => true,
                    _ => t.value == taint.value,
                }
        })
    })
}

/// The search: the devices chosen so far, by slot.
struct Search<'s, 'a> {
    node: Node<'s>,
    candidates: &'s [Candidate<'a>],
    allocated: &'s Allocated,
    /// Per chosen device: (claim, request, alternative, candidate index).
    chosen: Vec<(usize, usize, usize, usize)>,
    in_use: HashSet<usize>,
    counters: Counters<'a>,
    claims: &'s [ClaimData<'a>],
}

impl<'a> Search<'_, 'a> {
    /// Fills the slots from `slot` on; true when every request is satisfied.
    fn fill(
        &mut self,
        slots: &[(usize, usize, usize)],
        slot: usize,
        all_counts: &HashMap<(usize, usize, usize), usize>,
    ) -> Result<bool, AllocError> {
        let Some(&(c, r, alternatives)) = slots.get(slot) else {
            return Ok(true);
        };
        for a in 0..alternatives {
            let request = &self.claims[c].requests[r][a];
            let count = match request.exact.mode {
                AllocationMode::ExactCount(n) => n as usize,
                AllocationMode::All => all_counts[&(c, r, a)],
            };
            if count == 0 {
                continue;
            }
            if self.claim_results(c) + count > MAX_RESULTS {
                continue;
            }
            if self.devices(slots, slot, (c, r, a), count, 0, all_counts)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Chooses `count` more devices for request `(c, r, a)`, after candidate `from`, then
    /// the following slots.
    fn devices(
        &mut self,
        slots: &[(usize, usize, usize)],
        slot: usize,
        (c, r, a): (usize, usize, usize),
        count: usize,
        from: usize,
        all_counts: &HashMap<(usize, usize, usize), usize>,
    ) -> Result<bool, AllocError> {
        if count == 0 {
            return self.fill(slots, slot + 1, all_counts);
        }
        for i in from..self.candidates.len() {
            if !self.fits(c, r, a, i)? {
                continue;
            }
            let candidate = &self.candidates[i];
            if !take_counters(&mut self.counters, candidate.slice, candidate.device) {
                continue;
            }
            self.chosen.push((c, r, a, i));
            self.in_use.insert(i);
            if self.devices(slots, slot, (c, r, a), count - 1, i + 1, all_counts)? {
                return Ok(true);
            }
            self.in_use.remove(&i);
            self.chosen.pop();
            give_counters(&mut self.counters, candidate.slice, candidate.device);
        }
        Ok(false)
    }

    /// Whether candidate `i` may go to request `(c, r, a)` with what is chosen so far.
    fn fits(&self, c: usize, r: usize, a: usize, i: usize) -> Result<bool, AllocError> {
        let request = &self.claims[c].requests[r][a];
        let candidate = &self.candidates[i];
        let admin = request.exact.admin_access;
        if self.in_use.contains(&i) {
            // Admin access may share a device with other claims, never within its own.
            let own = self.chosen.iter().any(|&(oc, _, _, oi)| oc == c && oi == i);
            if !admin || own {
                return Ok(false);
            }
        }
        if !admin && self.allocated.devices.contains(&candidate.id) {
            return Ok(false);
        }
        if !selectable(request, candidate)? {
            return Ok(false);
        }
        if !tolerated(candidate.device, &request.exact.tolerations) {
            return Ok(false);
        }
        Ok(self.constraints_hold(c, r, candidate))
    }

    /// Whether giving `candidate` to request `r` of claim `c` keeps its claim's
    /// constraints.
    fn constraints_hold(&self, c: usize, r: usize, candidate: &Candidate<'_>) -> bool {
        let claim = self.claims[c].claim;
        let request_name = &claim.requests[r].name;
        claim.constraints.iter().all(|constraint| {
            let applies = |name: &str| {
                constraint.requests.is_empty() || constraint.requests.iter().any(|n| n == name)
            };
            if !applies(request_name) {
                return true;
            }
            let others = self
                .chosen
                .iter()
                .filter(|&&(oc, or, _, _)| oc == c && applies(&claim.requests[or].name))
                .map(|&(_, _, _, oi)| &self.candidates[oi]);
            if let Some(attribute) = &constraint.match_attribute {
                let Some(value) = attribute_of(candidate, attribute) else {
                    return false;
                };
                return others
                    .into_iter()
                    .all(|o| attribute_of(o, attribute) == Some(value));
            }
            if let Some(attribute) = &constraint.distinct_attribute {
                let Some(value) = attribute_of(candidate, attribute) else {
                    return false;
                };
                return others
                    .into_iter()
                    .all(|o| attribute_of(o, attribute) != Some(value));
            }
            true
        })
    }

    /// How many devices claim `c` holds so far.
    fn claim_results(&self, c: usize) -> usize {
        self.chosen.iter().filter(|&&(oc, ..)| oc == c).count()
    }

    /// The allocation of every claim, from the devices chosen.
    fn results(&self, claims: &[ClaimData<'_>]) -> Vec<Allocation> {
        (0..claims.len())
            .map(|c| {
                let chosen: Vec<_> = self.chosen.iter().filter(|&&(oc, ..)| oc == c).collect();
                let devices = chosen
                    .iter()
                    .map(|&&(_, r, a, i)| {
                        let request = &claims[c].requests[r][a];
                        let candidate = &self.candidates[i];
                        AllocatedDevice {
                            request: request.name.clone(),
                            driver: candidate.id.driver.clone(),
                            pool: candidate.id.pool.clone(),
                            device: candidate.id.device.clone(),
                            admin_access: request.exact.admin_access,
                            share_id: None,
                            consumed_capacity: BTreeMap::new(),
                            binding_conditions: Vec::new(),
                            binding_failure_conditions: Vec::new(),
                        }
                    })
                    .collect();
                let slices: Vec<&SliceModel> = chosen
                    .iter()
                    .map(|&&(.., i)| self.candidates[i].slice)
                    .collect();
                let devices_of: Vec<&Device> = chosen
                    .iter()
                    .map(|&&(.., i)| self.candidates[i].device)
                    .collect();
                Allocation {
                    devices,
                    config: Vec::new(),
                    node_selector: node_selector(self.node, &slices, &devices_of),
                }
            })
            .collect()
    }
}

/// The value of `attribute` (`domain/id`) of a device, whose attributes are read qualified
/// with their domain (an attribute without one is its driver's).
fn attribute_of<'c>(candidate: &'c Candidate<'_>, attribute: &str) -> Option<&'c AttributeValue> {
    candidate.device.attributes.get(attribute)
}

/// The nodes an allocation's devices are reachable from: none (every node) when all reach
/// every node; otherwise the node itself. kube-scheduler writes the slices' own selectors
/// where none is local to the node, letting a claim shared by pods go to other nodes they
/// select; gantry's narrower choice holds a shared claim to one node (issue 52).
fn node_selector(
    node: Node<'_>,
    slices: &[&SliceModel],
    devices: &[&Device],
) -> Option<NodeSelector> {
    let everywhere = slices.iter().zip(devices).all(|(s, d)| match &s.nodes {
        SliceNodes::All => !d.binds_to_node,
        SliceNodes::PerDevice => matches!(d.nodes, Some(DeviceNodes::All)) && !d.binds_to_node,
        _ => false,
    });
    if everywhere {
        return None;
    }
    Some(NodeSelector {
        terms: vec![NodeSelectorTerm {
            expressions: Vec::new(),
            fields: vec![Requirement {
                key: "metadata.name".to_string(),
                operator: Operator::In,
                values: vec![node.name.to_string()],
                bound: 0,
            }],
        }],
    })
}

#[cfg(test)]
#[path = "allocator_tests.rs"]
mod tests;
