//! The class index's own bookkeeping: when a class is kept, what it follows, and how much
//! it holds. That its decisions are the plain cycle's is the reference test's
//! (`a_stream_of_pods_alike_matches_the_plain_cycle`).

use std::sync::LazyLock;

use super::*;
use crate::cache::Cache;
use crate::config::{Config, DEFAULT_SCHEDULER_NAME};
use crate::cycle::{CycleMemory, schedule_one};
use crate::testing::{node, pod};

static CONFIG: LazyLock<Config> = LazyLock::new(|| {
    Config::default_with(&crate::plugins::registry()).expect("the default configuration builds")
});

const OPTIONS: CycleOptions<'static> = CycleOptions {
    pool: None,
    percentage_of_nodes_to_score: 100,
    top_scores: 3,
    nominated: None,
    waiting: None,
    preempt_extenders: false,
    preemption_running: false,
};

fn profile() -> &'static Profile {
    CONFIG
        .profile(DEFAULT_SCHEDULER_NAME)
        .expect("the default profile")
}

fn cluster(nodes: usize) -> (Cache, Snapshot) {
    let mut cache = Cache::new();
    for i in 0..nodes {
        cache.upsert_node(node(&format!("n{i:03}")).capacity("8", "16Gi").build());
    }
    let mut snapshot = Snapshot::default();
    cache.update_snapshot(&mut snapshot);
    (cache, snapshot)
}

/// Schedules a pod of `cpu` named `name`; places it where the cycle chose, as the scheduler
/// would, when `bind`.
fn cycle(
    cache: &mut Cache,
    snapshot: &mut Snapshot,
    memory: &mut CycleMemory,
    name: &str,
    cpu: &str,
    bind: bool,
) {
    let p = pod(name).req("cpu", cpu).build();
    let placement = schedule_one(profile(), snapshot, &p, memory, &OPTIONS).expect("placed");
    if bind {
        let placed = pod(name).req("cpu", cpu).on(&placement.node).build();
        cache.add_bound_pod(placed).expect("bound");
        cache.update_snapshot(snapshot);
    }
}

#[test]
fn a_class_follows_the_changed_nodes() {
    let (mut cache, mut snapshot) = cluster(40);
    let mut memory = CycleMemory::default();
    cycle(&mut cache, &mut snapshot, &mut memory, "a", "1", true);
    assert_eq!(memory.classes.classes.len(), 1);
    for i in 0..300 {
        cycle(
            &mut cache,
            &mut snapshot,
            &mut memory,
            &format!("p{i}"),
            "1",
            true,
        );
        // A pod of the class looks, without being placed: the class is then true to
        // the nodes as they are, a node rejected exactly when 8 pods of 1 cpu fill it.
        cycle(&mut cache, &mut snapshot, &mut memory, "probe", "1", false);
        let class = memory.classes.classes.values().next().expect("the class");
        assert_eq!(class.synced, snapshot.generation());
        for (p, n) in snapshot.nodes().iter().enumerate() {
            let full = n.requested.milli_cpu + 1000 > 8000;
            assert_eq!(class.totals[p] < 0, full, "node {p} after pod {i}");
        }
        let rejected: usize = class.rejected.iter().map(|(_, n)| n).sum();
        assert_eq!(rejected, class.totals.iter().filter(|&&t| t < 0).count());
        if class.feasible() <= 1 {
            break;
        }
    }
}

#[test]
fn a_node_added_lays_the_list_out_again_and_the_class_starts_over() {
    let (mut cache, mut snapshot) = cluster(10);
    let mut memory = CycleMemory::default();
    for name in ["a", "b", "c"] {
        cycle(&mut cache, &mut snapshot, &mut memory, name, "1", true);
    }
    let layout = snapshot.changes().layout();
    cache.upsert_node(node("n999").capacity("8", "16Gi").build());
    cache.update_snapshot(&mut snapshot);
    assert_ne!(snapshot.changes().layout(), layout);
    cycle(&mut cache, &mut snapshot, &mut memory, "d", "1", true);
    let class = memory.classes.classes.values().next().expect("the class");
    assert_eq!(class.layout, snapshot.changes().layout());
    assert_eq!(class.totals.len(), 11);
}

#[test]
fn the_least_recently_used_class_goes_first() {
    let (mut cache, mut snapshot) = cluster(10);
    let mut memory = CycleMemory::default();
    for i in 0..4 {
        let cpu = format!("{}m", 100 + i);
        cycle(
            &mut cache,
            &mut snapshot,
            &mut memory,
            &format!("s{i}"),
            &cpu,
            false,
        );
    }
    assert_eq!(memory.classes.classes.len(), 4);
    // Room for two classes of this cluster's size: one more would leave the last used.
    memory.classes.max_cells = 20;
    memory.classes.make_room(10);
    assert_eq!(memory.classes.classes.len(), 1);
    let kept = memory.classes.classes.values().next().expect("a class");
    assert_eq!(kept.key.requests.milli_cpu, 103);
}

#[test]
fn once_full_a_class_is_kept_from_its_second_pod() {
    let (mut cache, mut snapshot) = cluster(10);
    let mut memory = CycleMemory::default();
    // Room for one class of ten nodes.
    memory.classes.max_cells = 10;
    let kept = |memory: &CycleMemory| -> Vec<i64> {
        let mut cpu: Vec<i64> = memory
            .classes
            .classes
            .values()
            .map(|c| c.key.requests.milli_cpu)
            .collect();
        cpu.sort_unstable();
        cpu
    };
    cycle(&mut cache, &mut snapshot, &mut memory, "a", "100m", false);
    assert_eq!(kept(&memory), [100], "kept at once while there is room");
    cycle(&mut cache, &mut snapshot, &mut memory, "b", "200m", false);
    assert_eq!(kept(&memory), [100], "a new class waits for its second pod");
    cycle(&mut cache, &mut snapshot, &mut memory, "c", "200m", false);
    assert_eq!(
        kept(&memory),
        [200],
        "and takes the place of the least recently used"
    );
}

#[test]
fn a_class_whose_totals_would_not_fit_its_entries_runs_plainly() {
    let config = Config::parse(
        "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
profiles:
- plugins:
    score:
      enabled: [{name: NodeResourcesFit, weight: 30000000}]
",
        &crate::plugins::registry(),
    )
    .expect("config");
    let profile = config
        .profile(DEFAULT_SCHEDULER_NAME)
        .expect("the default profile");
    let (_cache, snapshot) = cluster(4);
    let mut memory = CycleMemory::default();
    let p = pod("p").req("cpu", "1").build();
    let placement = schedule_one(profile, &snapshot, &p, &mut memory, &OPTIONS).expect("placed");
    // NodeResourcesFit's score times its weight is past 32 bits: the plain cycle scored it.
    assert!(placement.scores[0].total > i64::from(Total::MAX));
    assert!(
        memory
            .classes
            .classes
            .values()
            .all(|c| c.scored_by.is_empty())
    );
}

#[test]
fn the_tie_break_reads_the_tied_nodes_alone() {
    // Every length a span's part can have, with tied nodes scattered and at both ends, and
    // the vector kernel's remainder (lengths not a multiple of eight) among them.
    let mut seed = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for len in 0..=SPAN {
        for _ in 0..20 {
            let hashes: Vec<u64> = (0..len).map(|_| next()).collect();
            let (tied, pod_hash) = (next() & low_bits(len), next());
            let plain = (0..len)
                .filter(|&i| tied & (1 << i) != 0)
                .map(|i| tie_key(hashes[i], pod_hash))
                .min()
                .unwrap_or(u64::MAX);
            assert_eq!(
                least_tied_key(&hashes, tied, pod_hash),
                plain,
                "{len} nodes"
            );
            assert_eq!(
                bit_positions(tied).collect::<Vec<_>>(),
                (0..len)
                    .filter(|&i| tied & (1 << i) != 0)
                    .collect::<Vec<_>>()
            );
        }
    }
    assert_eq!(low_bits(0), 0);
    assert_eq!(low_bits(3), 0b111);
    assert_eq!(low_bits(64), u64::MAX);
}

#[test]
fn a_span_keeps_its_largest_total_and_the_positions_holding_it() {
    let (_cache, snapshot) = cluster(2 * SPAN + 5);
    let mut memory = CycleMemory::default();
    let p = pod("p").req("cpu", "1").build();
    schedule_one(profile(), &snapshot, &p, &mut memory, &OPTIONS).expect("placed");
    let class = memory.classes.classes.values_mut().next().expect("a class");
    let summed_up = |class: &Class| {
        (0..class.span_max.len())
            .map(|b| {
                let totals = &class.totals[b * SPAN..((b + 1) * SPAN).min(class.totals.len())];
                let max = totals.iter().copied().max().unwrap_or(-1);
                let ties = (0..totals.len())
                    .filter(|&i| totals[i] == max)
                    .fold(0u64, |m, i| m | 1 << i);
                (max, ties)
            })
            .collect::<Vec<_>>()
    };
    let kept = |class: &Class| {
        class
            .span_max
            .iter()
            .copied()
            .zip(class.span_ties.iter().copied())
            .collect::<Vec<_>>()
    };
    assert_eq!(kept(class), summed_up(class));
    // Raised, lowered to below the rest, lowered back to a tie, and every node of the
    // last span lowered one by one: the span is summed up again when its last best goes.
    let best = class.span_max[0];
    for (position, total) in [(3, best + 7), (3, best - 5), (3, best), (SPAN, best - 1)] {
        class.totals[position] = total;
        class.note_total(position);
        assert_eq!(
            kept(class),
            summed_up(class),
            "position {position} to {total}"
        );
    }
    for position in 2 * SPAN..2 * SPAN + 5 {
        class.totals[position] = best - 1 - position as Total;
        class.note_total(position);
        assert_eq!(kept(class), summed_up(class), "position {position}");
    }
}
