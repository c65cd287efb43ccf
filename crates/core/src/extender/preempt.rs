//! The preempt verb, as kube-scheduler calls it (`callExtenders` of its preemption): once a
//! preemption found its candidates, every interested extender with a preempt verb is asked
//! in order, each about what the one before it left, and may drop candidates or change
//! their victims; the node is then chosen among what is left. An extender answers with
//! victims by uid, which are looked up among the pods on the node it names: a node or pod
//! that is not there is an error, and so is a candidate left without victims (dropped
//! instead when the extender is ignorable). An ignorable extender's error skips it; another
//! one's fails the preemption.
//!
//! [`PreemptRound`] holds one preemption's round; the front end makes the calls it asks
//! for and feeds the answers back, as for [`super::combine::Exchange`].

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;

use super::combine::CallError;
use super::protocol::{MetaPod, MetaVictims};
use super::{Extenders, Verb};
use crate::framework::PreemptionCandidate;
use crate::model::PodInfo;

/// One preemption's round of preempt calls.
#[derive(Debug, Clone)]
pub struct PreemptRound {
    extenders: Extenders,
    order: VecDeque<usize>,
    candidates: Vec<PreemptionCandidate>,
    /// Every pod on each candidate node, by uid: where an answer's victims are found.
    pods: HashMap<Arc<str>, HashMap<String, Arc<PodInfo>>>,
    failure: Option<CallError>,
}

impl PreemptRound {
    /// The round for `pod`'s `candidates`, `pods` being every pod on their nodes.
    pub fn new(
        extenders: &Extenders,
        pod: &PodInfo,
        candidates: Vec<PreemptionCandidate>,
        pods: HashMap<Arc<str>, Vec<Arc<PodInfo>>>,
    ) -> Self {
        let pods = pods
            .into_iter()
            .map(|(node, list)| {
                let by_uid = list.into_iter().map(|p| (p.uid.clone(), p)).collect();
                (node, by_uid)
            })
            .collect();
        PreemptRound {
            extenders: extenders.clone(),
            order: extenders.interested(pod, Verb::Preempt).into(),
            candidates,
            pods,
            failure: None,
        }
    }

    /// The extender to ask next, and the candidates to send it; none once every interested
    /// one answered, no candidate is left, or one failed the preemption.
    pub fn next_call(&mut self) -> Option<(usize, &[PreemptionCandidate])> {
        if self.failure.is_some() || self.candidates.is_empty() {
            return None;
        }
        let next = self.order.pop_front()?;
        Some((next, &self.candidates))
    }

    /// Takes extender `i`'s answer. Returns the error of an ignorable extender, which is
    /// skipped, for the caller to log.
    pub fn answered(
        &mut self,
        i: usize,
        answer: Result<BTreeMap<String, MetaVictims>, String>,
    ) -> Option<CallError> {
        let ignorable = self.extenders.all()[i].ignorable;
        let error = |message| CallError {
            extender: i,
            verb: Verb::Preempt,
            message,
        };
        match answer.and_then(|map| self.convert(map, ignorable)) {
            Ok(candidates) => {
                self.candidates = candidates;
                None
            }
            Err(message) if ignorable => Some(error(message)),
            Err(message) => {
                self.failure = Some(error(message));
                None
            }
        }
    }

    /// The candidates left, or the failure of a non-ignorable extender.
    pub fn finish(self) -> Result<Vec<PreemptionCandidate>, CallError> {
        match self.failure {
            Some(failure) => Err(failure),
            None => Ok(self.candidates),
        }
    }

    /// An answer's victims as the pods on their nodes.
    fn convert(
        &self,
        answer: BTreeMap<String, MetaVictims>,
        ignorable: bool,
    ) -> Result<Vec<PreemptionCandidate>, String> {
        let mut candidates = Vec::with_capacity(answer.len());
        for (node, meta) in answer {
            let Some((name, on_node)) = self.pods.get_key_value(node.as_str()) else {
                return Err(format!(
                    "node {node:?} is not a candidate of this preemption"
                ));
            };
            if meta.pods.is_empty() {
                if ignorable {
                    continue;
                }
                return Err(format!("expected at least one victim pod on node {node:?}"));
            }
            let victims = meta
                .pods
                .iter()
                .map(|MetaPod { uid }| {
                    on_node.get(uid).cloned().ok_or_else(|| {
                        format!(
                            "claims to preempt pod (UID: {uid}) on node {node:?}, \
                             but the pod is not found on that node"
                        )
                    })
                })
                .collect::<Result<Vec<_>, String>>()?;
            candidates.push(PreemptionCandidate {
                node: name.clone(),
                victims,
                pdb_violations: usize::try_from(meta.num_pdb_violations).unwrap_or(0),
            });
        }
        Ok(candidates)
    }
}

/// The candidates by node, victims by uid, as a node-cache-capable extender is sent them
/// (and as every extender answers).
pub fn meta_victims(candidates: &[PreemptionCandidate]) -> BTreeMap<String, MetaVictims> {
    candidates
        .iter()
        .map(|c| {
            let pods = c
                .victims
                .iter()
                .map(|p| MetaPod { uid: p.uid.clone() })
                .collect();
            let meta = MetaVictims {
                pods,
                num_pdb_violations: i64::try_from(c.pdb_violations).unwrap_or(i64::MAX),
            };
            (c.node.to_string(), meta)
        })
        .collect()
}
