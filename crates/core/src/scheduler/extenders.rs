//! Scheduler extenders: pods parked while their extenders are asked (off the scheduling
//! thread), and the cycle resumed with the answers.

use super::*;

/// What a pod asks the extenders, for the front end to carry out.
#[derive(Debug)]
pub struct ExtenderRequest {
    /// The pod.
    pub pod: Arc<PodInfo>,
    /// Its attempt number, given back with the answer.
    pub attempt: u32,
    /// What to ask.
    pub ask: ExtenderAsk,
}

/// The round of calls a request asks for.
#[derive(Debug)]
pub enum ExtenderAsk {
    /// Filter and score the nodes the Filter plugins found.
    Place {
        /// The calls to make, and how their answers combine.
        exchange: Exchange,
        /// The feasible nodes as the cache has them, for extenders sent Node objects
        /// (empty when every interested extender is node-cache capable).
        nodes: Vec<Arc<NodeModel>>,
        /// How many nodes the Filter plugins examined, for the decision log.
        evaluated: usize,
    },
    /// Cut a preemption's candidates (the preempt verb).
    Preempt(PreemptRound),
}

/// What the extenders decided, by the request's kind.
#[derive(Debug)]
pub enum ExtenderReply {
    /// The nodes they kept and their scores.
    Placed(ExtenderVerdict),
    /// The preemption's candidates they left.
    Preempt(Vec<PreemptionCandidate>),
}

/// The extenders' answer about a pod.
#[derive(Debug)]
pub struct ExtenderAnswer {
    /// The pod's namespace.
    pub namespace: String,
    /// The pod's name.
    pub name: String,
    /// The attempt of the request.
    pub attempt: u32,
    /// What they decided, or why a non-ignorable one failed the attempt.
    pub verdict: Result<ExtenderReply, String>,
}

/// A pod whose extenders have not answered yet.
pub(super) struct Asking {
    queued: QueuedPod,
    profile: Arc<Profile>,
    stage: AskingStage,
}

/// Where a pod's cycle stopped for the extenders.
pub(super) enum AskingStage {
    /// After the Filter plugins.
    Place(Filtered),
    /// In PostFilter: a preemption found candidates; `diagnosis` is the cycle's, and
    /// `plugin` the PostFilter plugin that chooses among what the extenders leave.
    Preempt {
        diagnosis: Box<Diagnosis>,
        plugin: &'static str,
    },
}

impl Scheduler {
    /// Holds the pod until its extenders answered, and says what to ask them.
    pub(super) fn ask_extenders(
        &mut self,
        profile: Arc<Profile>,
        queued: QueuedPod,
        filtered: Filtered,
    ) -> Attempt {
        let extenders = &self.config.extenders;
        let exchange = Exchange::new(extenders, &queued.pod, filtered.feasible.clone());
        let full_nodes = extenders.all().iter().any(|e| {
            !e.node_cache_capable
                && (e.filter_verb.is_some() || e.prioritize_verb.is_some())
                && e.is_interested(&queued.pod)
        });
        let nodes = if full_nodes {
            filtered
                .feasible
                .iter()
                .filter_map(|n| self.snapshot.get(n).map(|i| i.node.clone()))
                .collect()
        } else {
            Vec::new()
        };
        let ask = ExtenderAsk::Place {
            exchange,
            nodes,
            evaluated: filtered.evaluated,
        };
        self.hold_for_extenders(profile, queued, AskingStage::Place(filtered), ask)
    }

    /// Parks the pod at `stage` until the extenders answered `ask`, which the front end is
    /// handed.
    pub(super) fn hold_for_extenders(
        &mut self,
        profile: Arc<Profile>,
        queued: QueuedPod,
        stage: AskingStage,
        ask: ExtenderAsk,
    ) -> Attempt {
        let request = ExtenderRequest {
            pod: queued.pod.clone(),
            attempt: queued.attempts,
            ask,
        };
        let key = (queued.pod.namespace.clone(), queued.pod.name.clone());
        self.asking.insert(
            key,
            Asking {
                queued,
                profile,
                stage,
            },
        );
        Attempt::Extending(Box::new(request))
    }

    /// Holds the pod until the extenders cut its preemption's candidates, and says what to
    /// ask them: the candidates, with every pod on their nodes to find the victims they
    /// name.
    pub(super) fn ask_preempt_extenders(
        &mut self,
        profile: Arc<Profile>,
        queued: QueuedPod,
        diagnosis: Box<Diagnosis>,
        pending: PendingCandidates,
    ) -> Attempt {
        let pods = pending
            .candidates
            .iter()
            .filter_map(|c| {
                let node = self.snapshot.get(&c.node)?;
                Some((c.node.clone(), node.pods.iter().cloned().collect()))
            })
            .collect();
        let round = PreemptRound::new(
            &self.config.extenders,
            &queued.pod,
            pending.candidates,
            pods,
        );
        let stage = AskingStage::Preempt {
            diagnosis,
            plugin: pending.plugin,
        };
        self.hold_for_extenders(profile, queued, stage, ExtenderAsk::Preempt(round))
    }

    /// The extenders answered about a pod: it resumes at the next
    /// [`Scheduler::schedule_next`].
    pub fn extenders_answered(&mut self, answer: ExtenderAnswer) {
        self.answers.push_back(answer);
    }

    /// Whether some answer waits to be acted on.
    pub fn has_answers(&self) -> bool {
        !self.answers.is_empty()
    }

    /// Resumes the next pod whose extenders answered, if any (answers about pods gone or
    /// retried meanwhile are dropped).
    pub(super) fn resume_answered(&mut self, now: Duration) -> Option<Attempt> {
        while let Some(answer) = self.answers.pop_front() {
            let key = (answer.namespace, answer.name);
            let asking = match self.asking.remove(&key) {
                Some(a) if a.queued.attempts == answer.attempt => a,
                Some(a) => {
                    self.asking.insert(key, a);
                    continue;
                }
                None => continue,
            };
            let Asking {
                queued,
                profile,
                stage,
            } = asking;
            let (filtered, verdict) =
                match (stage, answer.verdict) {
                    (AskingStage::Place(filtered), Ok(ExtenderReply::Placed(verdict))) => {
                        (filtered, verdict)
                    }
                    (AskingStage::Place(_), Err(message)) => {
                        return Some(self.failed(queued, Status::error(message), now));
                    }
                    (AskingStage::Preempt { diagnosis, plugin }, reply) => {
                        let candidates = match reply {
                            Ok(ExtenderReply::Preempt(candidates)) => Ok(candidates),
                            Ok(ExtenderReply::Placed(_)) => Err("a filter answer to a preemption"),
                            Err(ref message) => Err(message.as_str()),
                        };
                        return Some(self.resume_preemption(
                            &profile, queued, *diagnosis, plugin, candidates, now,
                        ));
                    }
                    (AskingStage::Place(_), Ok(ExtenderReply::Preempt(_))) => {
                        let status = Status::error("the extenders answered a preemption");
                        return Some(self.failed(queued, status, now));
                    }
                };
            self.cache.update_snapshot(&mut self.snapshot);
            self.snapshot.set_now(now);
            let preemption_running = self.preemption_running(&queued.pod);
            let options = cycle_options(
                &self.config,
                &self.pool,
                &self.nominated,
                &self.waiting,
                &queued.pod,
                preemption_running,
            );
            let result = cycle::resume_after_extenders(
                &profile,
                &self.snapshot,
                &queued.pod,
                &mut self.memory,
                &options,
                &filtered,
                &verdict,
            );
            return Some(self.conclude(&profile, queued, result, now));
        }
        None
    }

    /// The extenders cut a preemption's candidates (or failed, `Err`): the PostFilter
    /// plugin that found them chooses among what is left, and the attempt ends as an
    /// unschedulable one does, with the preemption it decided. A failure decides nothing,
    /// as in kube-scheduler: the pod stays unschedulable, the failure in its message.
    pub(super) fn resume_preemption(
        &mut self,
        profile: &Arc<Profile>,
        queued: QueuedPod,
        mut diagnosis: Diagnosis,
        plugin: &'static str,
        candidates: Result<Vec<PreemptionCandidate>, &str>,
        now: Duration,
    ) -> Attempt {
        let chooser = profile
            .post_filter
            .iter()
            .find(|p| p.name() == plugin)
            .and_then(|p| p.as_post_filter());
        let (result, status) = match (candidates, chooser) {
            (Ok(candidates), Some(chooser)) => {
                chooser.choose(&queued.pod, candidates, &self.nominated)
            }
            (Err(message), _) => (
                PostFilterResult::default(),
                Status::error(format!("preemption: {message}")),
            ),
            (Ok(_), None) => (
                PostFilterResult::default(),
                Status::error(format!("preemption: no PostFilter plugin {plugin}")),
            ),
        };
        let kept = &mut *diagnosis.post_filter;
        kept.nomination = result.nomination;
        kept.preemption = result.preemption;
        diagnosis.post_filter_msg = (!status.reasons().is_empty()).then(|| status.message());
        self.conclude(
            profile,
            queued,
            Err(CycleError::Unschedulable(diagnosis)),
            now,
        )
    }

    /// A pod waiting for its extenders is gone or bound by someone else: their answer will
    /// be dropped.
    pub(super) fn stop_asking(&mut self, namespace: &str, name: &str) {
        self.asking
            .remove(&(namespace.to_string(), name.to_string()));
    }
}
