//! `--layout auto`: the per-GPU layouts that serve the pending queue best.
//!
//! Objective, in one sentence (also in `docs/mig-layouts.md` §auto and the
//! admin guide): **auto picks the layouts under which the fewest pending jobs
//! are left with nowhere to run, and then, with jobs started in queue order on
//! the instances that free up first, the pending jobs wait least in all.**
//! Ties go to more instances of the demanded types (room for more of the same
//! work), then to fewer unused memory slices, then to catalog order (fuller,
//! larger layouts first; MIG off last).
//!
//! A job asking for type `t` runs only on an instance of `t` (Slurm matches
//! GRES types exactly): a MIG profile (`1g.5gb`), or a whole GPU (`a100`, MIG
//! off on that GPU). Requests for several instances, requested times and the
//! queue order all enter through [`Demand::cost`], which simulates each type's
//! queue on this node's instances plus those other nodes already offer.
//!
//! The cost is a sum over types of a function of this node's instance count of
//! that type, and unused slices are a sum over GPUs, so a dynamic programme
//! over the GPUs, on the vector of instances per demanded type, is exact:
//! each GPU's layouts are projected on the demanded types (counts capped where
//! more instances stop helping), dominated ones are dropped, and the states
//! after each GPU are merged by vector. See `docs/mig-layouts.md` for figures.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};

use serde::Serialize;

use super::catalog::LayoutCatalog;
use super::demand::{Demand, QueueCost};
use super::layout::ProfileCounts;
use super::planner::{totals, GpuTarget};

/// How one demanded type is served by an auto plan.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServedKind {
    /// A MIG profile, or a whole-GPU type such as `a100`.
    pub kind: String,
    pub jobs: u64,
    /// Instances of the type on this node after the change.
    pub instances: u32,
    /// Of `instances`, those on GPUs the plan leaves as they are (a GPU
    /// without MIG such as a V100, or one another layout entry selects).
    pub fixed: u32,
    /// Instances of the type on other nodes.
    pub elsewhere: u32,
    /// Pending jobs that no instance here or elsewhere can run.
    pub never_start: u64,
    /// Mean simulated wait of the jobs that start, seconds.
    pub mean_wait_s: u64,
}

/// The layouts `auto` chose for a node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AutoPlan {
    /// One target per GPU, in the order the catalogs were given.
    pub gpus: Vec<GpuTarget>,
    /// MIG instances over the whole node.
    pub instances: ProfileCounts,
    /// GPUs left whole (MIG off).
    pub whole_gpus: u32,
    /// Each demanded type some GPU here can offer.
    pub served: Vec<ServedKind>,
    /// Pending jobs for types no GPU here has (another model's, typos), by type.
    pub not_offered: BTreeMap<String, u64>,
    /// The objective's value: jobs that never start, then the sum of waits.
    pub cost: QueueCost,
    pub unused_slices: u32,
    /// Proven best; false only when so many types are demanded that the
    /// programme kept its best-bounded states (`MAX_STATES`).
    pub exact: bool,
}

impl AutoPlan {
    /// Demanded types that pending jobs ask for but nothing will run.
    pub fn unserved(&self) -> impl Iterator<Item = &ServedKind> {
        self.served.iter().filter(|s| s.never_start > 0)
    }
}

/// What one GPU can become.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shape {
    /// The catalog's layout at this index.
    Layout(usize),
    /// MIG off.
    Whole,
}

/// A shape projected on the demanded types.
#[derive(Debug, Clone)]
struct Candidate {
    shape: Shape,
    serves: Vec<u16>,
    /// Instances of demanded types, uncapped.
    room: u32,
    unused: u32,
}

/// Choose a target for each GPU of a node (`gpus[i]` is GPU i's catalog) that
/// best serves `demand` (module comment). Types only the node's fixed
/// instances serve ([`Demand::offer_fixed`]) count in the cost and the
/// report, not in the choice. `None` when none of these GPUs can offer any
/// type with pending jobs: there is nothing to plan from.
pub fn plan_auto(gpus: &[&LayoutCatalog], demand: &Demand) -> Option<AutoPlan> {
    let offers = |c: &LayoutCatalog, kind: &str| {
        c.geometry.profile(kind).is_some() || c.whole_type() == Some(kind)
    };
    let planned = |k: &str| gpus.iter().any(|c| offers(c, k));
    let kinds: Vec<&str> = demand
        .iter()
        .map(|(k, _)| k)
        .filter(|k| planned(k) || demand.fixed(k) > 0)
        .collect();
    let not_offered: BTreeMap<String, u64> = demand
        .iter()
        .filter(|(k, _)| !kinds.contains(k))
        .map(|(k, n)| (k.to_string(), n))
        .collect();
    if !kinds.iter().any(|k| planned(k)) {
        return None;
    }

    let raw: Vec<Vec<Candidate>> = gpus.iter().map(|c| candidates(c, &kinds)).collect();
    // The most instances of each type the node can hold, and what each count costs.
    let most: Vec<u32> = (0..kinds.len())
        .map(|k| {
            raw.iter()
                .map(|cs| cs.iter().map(|c| u32::from(c.serves[k])).max().unwrap_or(0))
                .sum()
        })
        .collect();
    let costs = cost_tables(demand, &kinds, &most);
    // Beyond the cap an instance more changes no cost: states merge there.
    let caps: Vec<u16> = costs
        .iter()
        .map(|t| {
            let last = t[t.len() - 1];
            t.iter().position(|c| *c == last).unwrap_or(0) as u16
        })
        .collect();
    let pruned: Vec<Vec<Candidate>> = raw.iter().map(|cs| pareto(cs, &caps)).collect();

    let (picks, exact) = search(&pruned, &costs, &caps);
    let mut targets = Vec::with_capacity(gpus.len());
    let mut instances = ProfileCounts::new();
    let mut whole_gpus = 0;
    let mut unused_slices = 0;
    for ((catalog, cands), &pick) in gpus.iter().zip(&pruned).zip(&picks) {
        let cand = &cands[pick];
        unused_slices += cand.unused;
        match cand.shape {
            Shape::Layout(i) => {
                let plan = catalog.plans[i].clone();
                for (name, n) in plan.counts().iter() {
                    instances.add(name, n);
                }
                targets.push(GpuTarget::Enabled(plan));
            }
            Shape::Whole => {
                whole_gpus += 1;
                targets.push(GpuTarget::Disabled);
            }
        }
    }
    let here = |kind: &str| -> u32 {
        gpus.iter()
            .zip(&targets)
            .map(|(c, t)| match t {
                GpuTarget::Enabled(p) => p.counts().get(kind),
                GpuTarget::Disabled => u32::from(c.whole_type() == Some(kind)),
            })
            .sum()
    };
    let mut cost = QueueCost::default();
    let served = kinds
        .iter()
        .map(|&kind| {
            let n = here(kind);
            let fixed = demand.fixed(kind);
            let c = demand.cost(kind, n);
            cost = cost + c;
            let jobs = demand.jobs(kind);
            let started = jobs - c.never_start;
            ServedKind {
                kind: kind.to_string(),
                jobs,
                instances: n.saturating_add(fixed),
                fixed,
                elsewhere: demand.elsewhere(kind).len() as u32,
                never_start: c.never_start,
                mean_wait_s: if started == 0 {
                    0
                } else {
                    u64::try_from(c.wait_s / u128::from(started)).unwrap_or(u64::MAX)
                },
            }
        })
        .collect();
    Some(AutoPlan {
        gpus: targets,
        instances,
        whole_gpus,
        served,
        not_offered,
        cost,
        unused_slices,
        exact,
    })
}

/// Every shape of one GPU projected on `kinds`, in catalog order, MIG off last.
fn candidates(catalog: &LayoutCatalog, kinds: &[&str]) -> Vec<Candidate> {
    let geometry = &catalog.geometry;
    let index: Vec<Option<usize>> = kinds.iter().map(|k| geometry.profile_index(k)).collect();
    let memory = u32::from(geometry.memory_slices());
    let mut out: Vec<Candidate> = catalog
        .needs
        .iter()
        .enumerate()
        .map(|(i, need)| {
            let serves: Vec<u16> = index
                .iter()
                .map(|ix| ix.map_or(0, |j| u16::from(need[j])))
                .collect();
            Candidate {
                shape: Shape::Layout(i),
                room: serves.iter().map(|&s| u32::from(s)).sum(),
                serves,
                unused: memory - totals(geometry, need).0,
            }
        })
        .collect();
    if let Some(whole) = catalog.whole_type() {
        let serves: Vec<u16> = kinds.iter().map(|k| u16::from(*k == whole)).collect();
        out.push(Candidate {
            shape: Shape::Whole,
            room: serves.iter().map(|&s| u32::from(s)).sum(),
            serves,
            unused: 0,
        });
    }
    out
}

/// [`cost_table`] of each of `kinds` (`most[k]` instances at most), the
/// types spread over threads by their work (jobs × instance counts): each
/// count is a simulation of the type's queue.
fn cost_tables(demand: &Demand, kinds: &[&str], most: &[u32]) -> Vec<Vec<QueueCost>> {
    let work: Vec<usize> = kinds
        .iter()
        .zip(most)
        .map(|(k, &m)| demand.jobs(k) as usize * (m as usize + 1))
        .collect();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let threads =
        (work.iter().sum::<usize>() / SIMULATED_PER_THREAD).clamp(1, cores.min(kinds.len().max(1)));
    if threads == 1 {
        return kinds
            .iter()
            .zip(most)
            .map(|(k, &m)| cost_table(demand, k, m))
            .collect();
    }
    // Largest first, each to the thread with the least work so far.
    let mut order: Vec<usize> = (0..kinds.len()).collect();
    order.sort_by_key(|&k| Reverse(work[k]));
    let mut shares: Vec<(usize, Vec<usize>)> = vec![(0, Vec::new()); threads];
    for k in order {
        let share = shares
            .iter_mut()
            .min_by_key(|(w, _)| *w)
            .expect("at least one thread");
        share.0 += work[k];
        share.1.push(k);
    }
    let mut tables: Vec<Vec<QueueCost>> = vec![Vec::new(); kinds.len()];
    let done: Vec<Vec<(usize, Vec<QueueCost>)>> = std::thread::scope(|scope| {
        let run = |ks: &[usize]| -> Vec<(usize, Vec<QueueCost>)> {
            ks.iter()
                .map(|&k| (k, cost_table(demand, kinds[k], most[k])))
                .collect()
        };
        let handles: Vec<_> = shares[1..]
            .iter()
            .map(|(_, ks)| scope.spawn(move || run(ks)))
            .collect();
        let mut done = vec![run(&shares[0].1)];
        // A panic in a thread is a bug here: pass it on.
        done.extend(
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e))),
        );
        done
    });
    for (k, table) in done.into_iter().flatten() {
        tables[k] = table;
    }
    tables
}

/// Simulated job starts below which one thread makes the cost tables.
const SIMULATED_PER_THREAD: usize = 50_000;

/// The cost of `kind`'s queue for 0..=most instances here. An instance more
/// never counts as worse (it could stay idle), so the table is a running minimum.
fn cost_table(demand: &Demand, kind: &str, most: u32) -> Vec<QueueCost> {
    let mut table: Vec<QueueCost> = Vec::with_capacity(most as usize + 1);
    for n in 0..=most {
        let c = demand.cost(kind, n);
        let c = table.last().map_or(c, |prev| c.min(*prev));
        table.push(c);
        // Every job starts at once: more instances cannot help.
        if c == QueueCost::default() {
            break;
        }
    }
    table
}

/// Drop shapes that another shape equals or beats on every demanded type (up to
/// the caps), in room and in unused slices; the earlier one wins a tie.
fn pareto(all: &[Candidate], caps: &[u16]) -> Vec<Candidate> {
    let capped: Vec<Candidate> = all
        .iter()
        .map(|c| Candidate {
            serves: c.serves.iter().zip(caps).map(|(s, m)| *s.min(m)).collect(),
            ..c.clone()
        })
        .collect();
    let dominates = |a: &Candidate, b: &Candidate| {
        a.room >= b.room
            && a.unused <= b.unused
            && a.serves.iter().zip(&b.serves).all(|(x, y)| x >= y)
    };
    capped
        .iter()
        .enumerate()
        .filter(|(i, c)| {
            !capped
                .iter()
                .enumerate()
                .any(|(j, o)| j != *i && dominates(o, c) && (!dominates(c, o) || j < *i))
        })
        .map(|(_, c)| c.clone())
        .collect()
}

/// States kept after one GPU; beyond, the best-bounded states are kept and
/// the plan says it is not proven exact. Before the Lagrangian bound, six
/// demanded types on eight GPUs needed up to 60,664 and seven 106,754; with
/// it, eight H200s with all seven profiles and 10,000 jobs stay below.
const MAX_STATES: usize = 65_536;

/// Tie keys of a partial choice: more room first, then fewer unused slices.
type Ties = (Reverse<u32>, u32);

/// The objective of a full choice, best first.
type Value = (QueueCost, Ties);

/// Instance counts per demanded type, packed into one integer, so a state
/// hashes and compares as one word. Where they fit, every type gets a lane
/// of the same width with a spare top bit, and a candidate is added to a
/// state in a few word operations for all types at once ([`Lanes`]);
/// otherwise each type gets just the bits its cap needs and is added alone.
struct Packing {
    shifts: Vec<u32>,
    masks: Vec<u128>,
    caps: Vec<u16>,
    lanes: Option<Lanes>,
    /// Bits a key uses, from the lowest: at most 64 lets a map key it as a `u64`.
    bits: u32,
}

/// Equal lanes of `width` bits: a count and what a candidate adds to it stay
/// below the lane's top bit (each at most its cap), so one addition adds
/// every type without a carry between lanes, and the top bits then say in
/// which lanes the sum reached the cap.
#[derive(Clone, Copy)]
struct Lanes {
    width: u32,
    /// Each lane's top bit.
    tops: u128,
    /// The caps, packed.
    caps: u128,
}

impl Packing {
    /// `None` when the counts do not fit in 128 bits (dozens of demanded types).
    fn new(caps: &[u16]) -> Option<Packing> {
        let most = caps.iter().copied().max().unwrap_or(0);
        // Room for twice the largest cap, and the top bit.
        let width = 32 - (2 * u32::from(most)).leading_zeros() + 1;
        if caps.len() as u32 * width <= 128 {
            let shifts: Vec<u32> = (0..caps.len() as u32).map(|k| k * width).collect();
            let lanes = Lanes {
                width,
                tops: shifts
                    .iter()
                    .fold(0, |t, &at| t | 1u128 << (at + width - 1)),
                caps: shifts
                    .iter()
                    .zip(caps)
                    .fold(0, |t, (&at, &c)| t | u128::from(c) << at),
            };
            return Some(Packing {
                masks: vec![(1u128 << (width - 1)) - 1; caps.len()],
                shifts,
                caps: caps.to_vec(),
                lanes: Some(lanes),
                bits: caps.len() as u32 * width,
            });
        }
        let mut shifts = Vec::with_capacity(caps.len());
        let mut masks = Vec::with_capacity(caps.len());
        let mut at = 0u32;
        for &cap in caps {
            let bits = 16 - cap.leading_zeros();
            shifts.push(at);
            masks.push((1u128 << bits) - 1);
            at += bits;
        }
        (at <= 128).then(|| Packing {
            shifts,
            masks,
            caps: caps.to_vec(),
            lanes: None,
            bits: at,
        })
    }

    fn get(&self, key: u128, k: usize) -> u16 {
        ((key >> self.shifts[k]) & self.masks[k]) as u16
    }

    /// `serves`, each type clamped at its cap, as a key: what [`Packing::add`]
    /// adds.
    fn pack(&self, serves: &[u16]) -> u128 {
        serves
            .iter()
            .zip(&self.caps)
            .zip(&self.shifts)
            .fold(0, |t, ((&s, &c), &at)| t | u128::from(s.min(c)) << at)
    }

    /// `key` plus `serves` (`packed` is `pack(serves)`), each type clamped at
    /// its cap.
    fn add(&self, key: u128, serves: &[u16], packed: u128) -> u128 {
        if let Some(l) = self.lanes {
            let sum = key + packed;
            // A lane's top bit survives the subtraction where sum ≥ cap.
            let reached = (((sum | l.tops) - l.caps) & l.tops) >> (l.width - 1);
            let lane = (1u128 << l.width) - 1;
            let at_cap = reached * lane;
            return (sum & !at_cap) | (l.caps & at_cap);
        }
        let mut out = 0u128;
        for (k, &s) in serves.iter().enumerate() {
            let n = (self.get(key, k) + s).min(self.caps[k]);
            out |= u128::from(n) << self.shifts[k];
        }
        out
    }
}

/// A fast hash for packed states (the programme hashes millions of them).
#[derive(Default)]
struct StateHasher(u64);

impl std::hash::Hasher for StateHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    fn write_u64(&mut self, n: u64) {
        // A folded multiply: every bit of `n` reaches the low bits, which
        // pick the bucket (a plain product leaves them to the low bits of `n`).
        let p = u128::from(self.0 ^ n) * 0x51_7c_c1_b7_27_22_0a_95;
        self.0 = (p as u64) ^ (p >> 64) as u64;
    }
    fn write_u128(&mut self, n: u128) {
        self.write_u64(n as u64);
        self.write_u64((n >> 64) as u64);
    }
}

type StateMap<K> = HashMap<K, u32, std::hash::BuildHasherDefault<StateHasher>>;

/// One state after some GPUs: the packed counts, the best tie keys reaching
/// them, and how (the previous state's index and this GPU's candidate).
struct State {
    key: u128,
    ties: Ties,
    from: u32,
    pick: u16,
    /// The first candidate the next GPU may take: where it is a twin of
    /// this one ([`twins`]), only picks in catalog order are followed.
    low: u16,
}

/// Marks a state in the programme's map that the bound dropped, so that the
/// other ways of reaching it are dropped without asking the bound again.
const DROPPED: u32 = u32::MAX;

/// `twins[g]`: GPU `g + 1` has the same candidates as GPU `g` (a node of one
/// model). Twins are interchangeable, so of the orders that give twins the
/// same candidates only one is followed, the one whose picks never go back
/// in catalog order: every choice of the node is still reached (sorted), the
/// programme expands about half the pairs.
fn twins(gpus: &[Vec<Candidate>]) -> Vec<bool> {
    let same = |a: &Candidate, b: &Candidate| {
        a.serves == b.serves && a.room == b.room && a.unused == b.unused
    };
    (0..gpus.len())
        .map(|g| {
            gpus.get(g + 1).is_some_and(|next| {
                next.len() == gpus[g].len() && next.iter().zip(&gpus[g]).all(|(a, b)| same(a, b))
            })
        })
        .collect()
}

/// The value of a full choice given its capped counts.
fn value_of(counts: impl Iterator<Item = u16>, costs: &[Vec<QueueCost>], ties: Ties) -> Value {
    let cost = counts.zip(costs).fold(QueueCost::default(), |acc, (n, t)| {
        acc + t[usize::from(n).min(t.len() - 1)]
    });
    (cost, ties)
}

fn add_ties(t: Ties, c: &Candidate) -> Ties {
    (Reverse(t.0 .0 + c.room), t.1 + c.unused)
}

/// The exact dynamic programme over GPUs; returns a candidate index per GPU.
///
/// States are merged by their capped counts (the cost depends on nothing
/// else; the tie keys add up, so the best ones per state suffice). A state
/// whose lower bound ([`Bound`]) exceeds the incumbent's cost (greedy plus
/// single-GPU moves) is dropped, and the last GPU is evaluated without
/// building its layer.
fn search(gpus: &[Vec<Candidate>], costs: &[Vec<QueueCost>], caps: &[u16]) -> (Vec<usize>, bool) {
    let (mut best_value, mut picks) = local(gpus, costs, caps);
    let Some(packing) = Packing::new(caps) else {
        return (picks, false);
    };
    if gpus.is_empty() {
        return (Vec::new(), true);
    }
    let mut bounds = Bound::new(gpus, costs, caps, best_value.0, &picks);
    // A narrow pass first, unless the incumbent is already within
    // `NEAR_BOUND` of the bound: a better incumbent drops more states in
    // the full pass, but a near one leaves few to drop.
    let near = bounds.usable
        && bounds.lower(0, 0, |_| 0).approx() >= Lex::exact(best_value.0).approx() * NEAR_BOUND;
    let beam = if near {
        None
    } else {
        programme(gpus, costs, &packing, &bounds, BEAM_STATES).0
    };
    if let Some((v, p)) = beam {
        if v < best_value {
            (best_value, picks) = (v, p);
            bounds.tighten(best_value.0);
        }
    }
    let (found, truncated) = programme(gpus, costs, &packing, &bounds, MAX_STATES);
    match found {
        // The incumbent is as good (the programme only confirms it).
        Some((v, p)) if v < best_value => (p, !truncated),
        _ => (picks, !truncated),
    }
}

/// What the programme needs to expand one GPU's layer.
struct Layer<'a> {
    cands: &'a [Candidate],
    /// Each candidate's counts, packed.
    packed: &'a [u128],
    /// The next GPU is a twin of this one ([`twins`]).
    twin: bool,
    /// GPUs chosen once this one is.
    chosen: usize,
    packing: &'a Packing,
    bounds: &'a Bound,
}

impl Layer<'_> {
    /// The states this GPU's candidates lead to from `prev`, in the order
    /// first reached, less those the bound drops. `seen` maps each key
    /// (`narrow(key)`: as few bits as the packing needs) to its state.
    fn expand<K: std::hash::Hash + Eq>(
        &self,
        prev: &[State],
        room: usize,
        seen: &mut StateMap<K>,
        narrow: impl Fn(u128) -> K,
    ) -> Vec<State> {
        let mut next: Vec<State> = Vec::with_capacity(room);
        seen.clear();
        seen.reserve(room);
        for (si, s) in prev.iter().enumerate() {
            for (ci, c) in self.cands.iter().enumerate().skip(usize::from(s.low)) {
                let key = self.packing.add(s.key, &c.serves, self.packed[ci]);
                let ties = add_ties(s.ties, c);
                let low = if self.twin { ci as u16 } else { 0 };
                let at = *seen.entry(narrow(key)).or_insert_with(|| {
                    // The bound for any pick of the next GPU: `low` may
                    // still fall when another pair reaches this state.
                    if self
                        .bounds
                        .exceeds(self.chosen, 0, |k| self.packing.get(key, k))
                    {
                        return DROPPED;
                    }
                    next.push(State {
                        key,
                        ties,
                        from: si as u32,
                        pick: ci as u16,
                        low,
                    });
                    (next.len() - 1) as u32
                });
                if at == DROPPED {
                    continue;
                }
                let state = &mut next[at as usize];
                // The lowest pick that reaches a state bounds its twin's.
                state.low = state.low.min(low);
                // First reached wins a tie: the earlier (fuller) shapes.
                if ties < state.ties {
                    state.ties = ties;
                    state.from = si as u32;
                    state.pick = ci as u16;
                }
            }
        }
        next
    }
}

/// The programme's map from packed counts to a layer's states: keys of 64
/// bits where the packing fits (half the memory, so fewer cache misses).
enum Seen {
    Narrow(StateMap<u64>),
    Wide(StateMap<u128>),
}

/// The share of the incumbent's cost the bound of the empty state must
/// reach for [`search`] to skip its narrow pass.
const NEAR_BOUND: f64 = 0.98;

/// States kept per GPU by the narrow first pass of [`search`].
const BEAM_STATES: usize = 512;

/// The programme over GPUs keeping at most `limit` states per GPU (the best
/// bounded ones; `true` when some were dropped so). The best full choice it
/// reaches that the bound lets through, with a candidate index per GPU.
fn programme(
    gpus: &[Vec<Candidate>],
    costs: &[Vec<QueueCost>],
    packing: &Packing,
    bounds: &Bound,
    limit: usize,
) -> (Option<(Value, Vec<usize>)>, bool) {
    let Some((last, rest)) = gpus.split_last() else {
        return (None, false);
    };
    let kinds = costs.len();
    let twins = twins(gpus);
    let packed: Vec<Vec<u128>> = gpus
        .iter()
        .map(|cands| cands.iter().map(|c| packing.pack(&c.serves)).collect())
        .collect();
    let mut truncated = false;
    // One map for every layer: it keeps its memory from one to the next.
    let mut seen = if packing.bits <= 64 {
        Seen::Narrow(StateMap::default())
    } else {
        Seen::Wide(StateMap::default())
    };
    let mut layers: Vec<Vec<State>> = vec![vec![State {
        key: 0,
        ties: (Reverse(0), 0),
        from: 0,
        pick: 0,
        low: 0,
    }]];
    for (g, cands) in rest.iter().enumerate() {
        let prev = layers.last().expect("starts with one layer");
        let layer = Layer {
            cands,
            packed: &packed[g],
            twin: twins[g],
            chosen: g + 1,
            packing,
            bounds,
        };
        // Layers grow a few times over at first: room for that, no more.
        let room = (prev.len() * 4).min(limit);
        let mut next = match &mut seen {
            Seen::Narrow(map) => layer.expand(prev, room, map, |k| k as u64),
            Seen::Wide(map) => layer.expand(prev, room, map, |k| k),
        };
        if twins[g] {
            // Each state's `low` is now final: the next twins pick from it on.
            next.retain(|s| !bounds.exceeds(g + 1, s.low, |k| packing.get(s.key, k)));
        }
        if next.len() > limit {
            // Keep the states with the best bounds: the answer is then the best
            // found, no longer proven best.
            truncated = true;
            next.sort_by_cached_key(|s| {
                (
                    bounds.lower(g + 1, s.low, |k| packing.get(s.key, k)),
                    s.ties,
                )
            });
            next.truncate(limit);
        }
        layers.push(next);
    }
    // The last GPU: evaluate every completion directly, skipping the states
    // whose bound already exceeds the best completion found.
    let mut best: Option<(Value, usize, usize)> = None;
    let at_last = rest.len();
    for (si, s) in layers
        .last()
        .expect("at least one layer")
        .iter()
        .enumerate()
    {
        if let Some((b, _, _)) = &best {
            if bounds.usable
                && bounds.lower(at_last, s.low, |k| packing.get(s.key, k)) > Lex::exact(b.0)
            {
                continue;
            }
        }
        for (ci, c) in last.iter().enumerate().skip(usize::from(s.low)) {
            let key = packing.add(s.key, &c.serves, packed[at_last][ci]);
            let v = value_of(
                (0..kinds).map(|k| packing.get(key, k)),
                costs,
                add_ties(s.ties, c),
            );
            if best.as_ref().is_none_or(|(b, _, _)| v < *b) {
                best = Some((v, si, ci));
            }
        }
    }
    let Some((value, mut at, pick)) = best else {
        return (None, truncated);
    };
    let mut picks = vec![0; gpus.len()];
    picks[gpus.len() - 1] = pick;
    for g in (0..rest.len()).rev() {
        let s = &layers[g + 1][at];
        picks[g] = usize::from(s.pick);
        at = s.from as usize;
    }
    (Some((value, picks)), truncated)
}

/// A cost that may go below zero, ordered as [`QueueCost`]: jobs that never
/// start, then seconds of waiting (the Lagrangian bound subtracts).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Lex(i128, i128);

impl std::ops::Add for Lex {
    type Output = Lex;
    fn add(self, o: Lex) -> Lex {
        Lex(self.0 + o.0, self.1 + o.1)
    }
}

impl std::ops::Sub for Lex {
    type Output = Lex;
    fn sub(self, o: Lex) -> Lex {
        Lex(self.0 - o.0, self.1 - o.1)
    }
}

impl Lex {
    /// Beyond these the bound is not used (no overflow can occur below them).
    const MOST_JOBS: u64 = 1 << 40;
    const MOST_WAIT: u128 = 1 << 96;

    fn of(c: QueueCost) -> Option<Lex> {
        (c.never_start < Lex::MOST_JOBS && c.wait_s < Lex::MOST_WAIT)
            .then(|| Lex(i128::from(c.never_start), c.wait_s as i128))
    }

    /// Any cost the programme sums (within i128: at most 2^64 jobs and 2^128 s).
    fn exact(c: QueueCost) -> Lex {
        Lex(
            i128::from(c.never_start),
            i128::try_from(c.wait_s).unwrap_or(i128::MAX),
        )
    }

    fn times(self, n: u16) -> Lex {
        Lex(self.0 * i128::from(n), self.1 * i128::from(n))
    }

    /// The cost as one number, for the search of prices only.
    fn approx(self) -> f64 {
        self.0 as f64 * Bound::JOB + self.1 as f64
    }

    /// The price nearest below `x` (an `approx` value), clamped where the
    /// arithmetic of the bound stays far from overflow.
    fn from_approx(x: f64) -> Lex {
        if !x.is_finite() || x <= 0.0 {
            return Lex(0, 0);
        }
        let jobs = (x / Bound::JOB).floor().min(2f64.powi(32));
        let wait = (x - jobs * Bound::JOB).clamp(0.0, 2f64.powi(63));
        Lex(jobs as i128, wait as i128)
    }
}

/// Lower bounds on the best cost a state can still reach, by how many GPUs
/// are chosen (`g`: GPUs `g..` remain). The larger of two counts:
///
/// - *reach*: every type gets the most instances the remaining GPUs could
///   give it, all at once;
/// - *Lagrangian*: with a price `λ_k ≥ 0` per instance of type `k`, any
///   choice of the remaining GPUs that adds `x` instances costs
///   `Σ_k F_k(n_k + x_k) ≥ Σ_k min_{0≤y≤reach_k} (F_k(n_k + y) + λ_k·y) −
///   Σ_remaining GPUs max_candidate λ·serves`, since `λ·x` is at most that
///   last sum. It holds for any prices; good ones (found by subgradient
///   ascent on the bound of the empty state) make it close to the optimum,
///   so few states survive. Exactness never depends on the prices.
struct Bound {
    /// `reach[g][k][n]`, `lagrange[g][k][n]`: the per-type terms above for a
    /// state with `n` instances of type `k` (`n` up to its cap).
    reach: Vec<Vec<Vec<Lex>>>,
    lagrange: Vec<Vec<Vec<Lex>>>,
    /// `offset[g][l]`: `Σ_{h≥g} max_c λ·serves` of GPU `h`, where the twins
    /// of GPU `g` that follow it ([`twins`]) take only candidates `c ≥ l`
    /// (the programme expands twins in catalog order): any `l` gives a valid
    /// bound, a later one a tighter bound.
    offset: Vec<Vec<Lex>>,
    /// The incumbent's cost: a state whose bound exceeds it is dropped.
    best: Lex,
    /// False when the costs are too large for the arithmetic: nothing is dropped.
    usable: bool,
}

impl Bound {
    /// The weight of a job that never starts in `Lex::approx`.
    const JOB: f64 = 18_446_744_073_709_551_616.0; // 2^64

    /// `picks`: the incumbent (a candidate per GPU), where the prices start.
    fn new(
        gpus: &[Vec<Candidate>],
        costs: &[Vec<QueueCost>],
        caps: &[u16],
        best: QueueCost,
        picks: &[usize],
    ) -> Bound {
        let kinds = caps.len();
        let table: Option<Vec<Vec<Lex>>> = costs
            .iter()
            .zip(caps)
            .map(|(t, &cap)| {
                (0..=usize::from(cap))
                    .map(|n| Lex::of(t[n.min(t.len() - 1)]))
                    .collect()
            })
            .collect();
        let (Some(table), Some(best)) = (table, Lex::of(best)) else {
            return Bound {
                reach: Vec::new(),
                lagrange: Vec::new(),
                offset: Vec::new(),
                best: Lex(0, 0),
                usable: false,
            };
        };
        let usable = kinds < (1 << 20) && gpus.len() < (1 << 16);
        // The most instances of each type GPUs g.. can add (capped).
        let mut reach = vec![vec![0u16; kinds]; gpus.len() + 1];
        for g in (0..gpus.len()).rev() {
            for k in 0..kinds {
                let most = gpus[g].iter().map(|c| c.serves[k]).max().unwrap_or(0);
                reach[g][k] = reach[g + 1][k].saturating_add(most).min(caps[k]);
            }
        }
        let prices = if usable {
            let mut at = vec![0u16; kinds];
            for (cands, &p) in gpus.iter().zip(picks) {
                for (n, (&s, &cap)) in at.iter_mut().zip(cands[p].serves.iter().zip(caps)) {
                    *n = n.saturating_add(s).min(cap);
                }
            }
            prices(gpus, &table, &reach[0], best, &at)
        } else {
            vec![Lex(0, 0); kinds]
        };
        let offset = offsets(gpus, &prices);
        let per_layer = |lagrangian: bool| -> Vec<Vec<Vec<Lex>>> {
            reach
                .iter()
                .map(|r| {
                    (0..kinds)
                        .map(|k| {
                            let cap = usize::from(caps[k]);
                            let f = &table[k];
                            (0..=cap)
                                .map(|n| {
                                    let r = usize::from(r[k]);
                                    if lagrangian {
                                        (0..=r)
                                            .map(|y| {
                                                f[(n + y).min(cap)] + prices[k].times(y as u16)
                                            })
                                            .min()
                                            .unwrap_or_default()
                                    } else {
                                        f[(n + r).min(cap)]
                                    }
                                })
                                .collect()
                        })
                        .collect()
                })
                .collect()
        };
        Bound {
            reach: per_layer(false),
            lagrange: per_layer(true),
            offset,
            best,
            usable,
        }
    }

    /// The bound for a state after `g` GPUs with `count(k)` instances of type
    /// `k`, whose next GPU (and its twins after it) picks from candidate `low` on.
    fn lower(&self, g: usize, low: u16, count: impl Fn(usize) -> u16) -> Lex {
        if !self.usable {
            return Lex(i128::MIN / 2, 0);
        }
        let (mut reach, mut lagrange) = (Lex(0, 0), Lex(0, 0));
        for (k, (r, l)) in self.reach[g].iter().zip(&self.lagrange[g]).enumerate() {
            let n = usize::from(count(k));
            reach = reach + r[n];
            lagrange = lagrange + l[n];
        }
        let offset = self.offset[g]
            .get(usize::from(low))
            .copied()
            .unwrap_or(self.offset[g][0]);
        reach.max(lagrange - offset)
    }

    /// A better incumbent's cost: more states are dropped.
    fn tighten(&mut self, best: QueueCost) {
        if let Some(b) = Lex::of(best) {
            self.best = self.best.min(b);
        }
    }

    /// Whether no completion of the state can cost as little as the incumbent.
    fn exceeds(&self, g: usize, low: u16, count: impl Fn(usize) -> u16) -> bool {
        self.usable && self.lower(g, low, count) > self.best
    }
}

/// [`Bound::offset`]: by GPU and first candidate, the most any remaining
/// choice can be worth at `prices`.
fn offsets(gpus: &[Vec<Candidate>], prices: &[Lex]) -> Vec<Vec<Lex>> {
    let priced = |c: &Candidate| {
        c.serves
            .iter()
            .zip(prices)
            .fold(Lex(0, 0), |acc, (&s, p)| acc + p.times(s))
    };
    // `from[g][l]`: the most a candidate `c ≥ l` of GPU `g` is worth.
    let from: Vec<Vec<Lex>> = gpus
        .iter()
        .map(|cands| {
            let mut most = vec![Lex(0, 0); cands.len() + 1];
            for (c, cand) in cands.iter().enumerate().rev() {
                most[c] = most[c + 1].max(priced(cand));
            }
            most.pop();
            most
        })
        .collect();
    let twins = twins(gpus);
    let mut offset: Vec<Vec<Lex>> = vec![vec![Lex(0, 0)]; gpus.len() + 1];
    for g in (0..gpus.len()).rev() {
        // GPU g and the twins after it, then whatever follows them, unrestricted.
        let run = 1 + twins[g..].iter().take_while(|&&t| t).count();
        let after = offset[g + run][0];
        offset[g] = from[g]
            .iter()
            .map(|&m| m.times(run as u16) + after)
            .collect();
        if offset[g].is_empty() {
            offset[g].push(after);
        }
    }
    offset
}

/// Prices per instance of each type for [`Bound`]: projected subgradient
/// ascent on the Lagrangian bound of the empty state, with Polyak steps
/// towards the incumbent's cost, from two starts: no prices, and each type's
/// marginal cost at the incumbent's counts `at`. The better bound wins. Any
/// prices give a valid bound; these only make it tight.
fn prices(
    gpus: &[Vec<Candidate>],
    table: &[Vec<Lex>],
    reach: &[u16],
    best: Lex,
    at: &[u16],
) -> Vec<Lex> {
    let f: Vec<Vec<f64>> = table
        .iter()
        .map(|t| t.iter().map(|c| c.approx()).collect())
        .collect();
    // The marginal cost around the incumbent's count (half the two sides).
    let marginal: Vec<f64> = f
        .iter()
        .zip(at)
        .map(|(f, &n)| {
            let n = usize::from(n).min(f.len() - 1);
            let left = if n > 0 { f[n - 1] - f[n] } else { 0.0 };
            let right = if n + 1 < f.len() {
                f[n] - f[n + 1]
            } else {
                0.0
            };
            ((left + right) / 2.0).max(0.0)
        })
        .collect();
    // GPUs with the same candidates (a node of one model) price alike.
    let distinct: Vec<(&Vec<Candidate>, f64)> = {
        let mut out: Vec<(&Vec<Candidate>, f64)> = Vec::new();
        for cands in gpus {
            match out.iter_mut().find(|(c, _)| {
                c.len() == cands.len() && c.iter().zip(cands).all(|(a, b)| a.serves == b.serves)
            }) {
                Some((_, n)) => *n += 1.0,
                None => out.push((cands, 1.0)),
            }
        }
        out
    };
    let dual = Dual {
        f: &f,
        reach,
        distinct: &distinct,
        target: best.approx(),
    };
    let from_zero = dual.ascend(vec![0.0; f.len()]);
    let from_marginal = dual.ascend(marginal);
    let (_, lambda) = if from_zero.0 >= from_marginal.0 {
        from_zero
    } else {
        from_marginal
    };
    lambda.into_iter().map(Lex::from_approx).collect()
}

/// The Lagrangian bound of the empty state as a function of the prices, in
/// floating point (only the search for prices uses it).
struct Dual<'a> {
    /// Each type's cost by count (`Lex::approx`).
    f: &'a [Vec<f64>],
    reach: &'a [u16],
    /// Each distinct GPU's candidates and how many GPUs have them.
    distinct: &'a [(&'a Vec<Candidate>, f64)],
    /// The incumbent's cost: the bound never exceeds it.
    target: f64,
}

impl Dual<'_> {
    /// Iterations of one ascent: about a millisecond on 8 GPUs and 7 types.
    const STEPS: usize = 1000;
    /// Steps without a better bound before the step size halves.
    const PATIENCE: u32 = 40;

    /// The bound at `lambda` and a subgradient there.
    fn at(&self, lambda: &[f64], grad: &mut [f64]) -> f64 {
        let mut bound = 0.0;
        for (k, f) in self.f.iter().enumerate() {
            let cap = f.len() - 1;
            let (mut at, mut low) = (0, f64::INFINITY);
            for y in 0..=usize::from(self.reach[k]) {
                let v = f[y.min(cap)] + lambda[k] * y as f64;
                if v < low {
                    (at, low) = (y, v);
                }
            }
            bound += low;
            grad[k] = at as f64;
        }
        for (cands, times) in self.distinct {
            let (mut top, mut pick) = (f64::NEG_INFINITY, None);
            for c in cands.iter() {
                let v: f64 = c
                    .serves
                    .iter()
                    .zip(lambda)
                    .map(|(&s, l)| f64::from(s) * l)
                    .sum();
                if v > top {
                    (top, pick) = (v, Some(c));
                }
            }
            if let Some(c) = pick {
                bound -= top * times;
                for (gk, &s) in grad.iter_mut().zip(&c.serves) {
                    *gk -= f64::from(s) * times;
                }
            }
        }
        bound
    }

    /// Projected subgradient ascent from `lambda` with Polyak steps towards
    /// the target; the best bound met and its prices.
    fn ascend(&self, mut lambda: Vec<f64>) -> (f64, Vec<f64>) {
        let mut best = (f64::NEG_INFINITY, lambda.clone());
        let mut theta = 2.0;
        let mut stale = 0;
        let mut grad = vec![0f64; lambda.len()];
        for _ in 0..Self::STEPS {
            let bound = self.at(&lambda, &mut grad);
            if bound > best.0 {
                best = (bound, lambda.clone());
                stale = 0;
            } else {
                stale += 1;
                if stale >= Self::PATIENCE {
                    (theta, stale) = (theta / 2.0, 0);
                }
            }
            let norm: f64 = grad.iter().map(|g| g * g).sum();
            if bound >= self.target || norm == 0.0 || theta < 1e-6 {
                break;
            }
            let step = theta * (self.target - bound).max(self.target.abs() * 1e-9 + 1.0) / norm;
            for (l, g) in lambda.iter_mut().zip(&grad) {
                *l = (*l + step * g).max(0.0);
            }
        }
        best
    }
}

/// A good first answer: GPU by GPU the candidate that helps most, then single-GPU
/// changes while they improve the value. Its value bounds the programme.
fn local(gpus: &[Vec<Candidate>], costs: &[Vec<QueueCost>], caps: &[u16]) -> (Value, Vec<usize>) {
    let kinds = caps.len();
    let value = |picks: &[usize]| -> Value {
        let mut counts = vec![0u32; kinds];
        let mut ties: Ties = (Reverse(0), 0);
        for (g, &c) in picks.iter().enumerate() {
            let cand = &gpus[g][c];
            for (n, s) in counts.iter_mut().zip(&cand.serves) {
                *n += u32::from(*s);
            }
            ties = add_ties(ties, cand);
        }
        value_of(
            counts
                .iter()
                .zip(caps)
                .map(|(&n, &m)| n.min(u32::from(m)) as u16),
            costs,
            ties,
        )
    };
    let mut picks: Vec<usize> = Vec::with_capacity(gpus.len());
    for cands in gpus {
        let mut best = (None, 0);
        for c in 0..cands.len() {
            picks.push(c);
            let v = value(&picks);
            picks.pop();
            if best.0.as_ref().is_none_or(|b| v < *b) {
                best = (Some(v), c);
            }
        }
        picks.push(best.1);
    }
    let mut current = value(&picks);
    // Each accepted change strictly improves the value, so this ends.
    loop {
        let mut improved = false;
        for g in 0..gpus.len() {
            for c in 0..gpus[g].len() {
                let old = picks[g];
                if c == old {
                    continue;
                }
                picks[g] = c;
                let v = value(&picks);
                if v < current {
                    current = v;
                    improved = true;
                } else {
                    picks[g] = old;
                }
            }
        }
        if !improved {
            return (current, picks);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::builtin;

    fn demand(items: &[(&str, u64)]) -> Demand {
        let mut d = Demand::new();
        for (k, n) in items {
            d.add_jobs(k, *n);
        }
        d
    }

    fn layout(t: &GpuTarget) -> String {
        match t {
            GpuTarget::Enabled(p) => p.counts().to_string(),
            GpuTarget::Disabled => "whole".into(),
        }
    }

    /// The lanes' word arithmetic adds and clamps as type-by-type arithmetic
    /// does, for every count up to the cap and every addition up to it; and
    /// types too many for equal lanes are packed one by one.
    #[test]
    fn packed_counts_add_and_clamp_type_by_type() {
        for caps in [
            vec![56u16, 8, 32, 24, 16, 8, 8],
            vec![0, 1, 3],
            vec![300, 7],
        ] {
            let p = Packing::new(&caps).unwrap();
            assert!(p.lanes.is_some(), "{caps:?}");
            let mut seed = 7u64;
            let mut next = |below: u16| {
                seed = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
                ((seed >> 33) % (u64::from(below) + 1)) as u16
            };
            for _ in 0..5_000 {
                let counts: Vec<u16> = caps.iter().map(|&c| next(c)).collect();
                let serves: Vec<u16> = caps.iter().map(|&c| next(c)).collect();
                let key = p.pack(&counts);
                let sum = p.add(key, &serves, p.pack(&serves));
                for (k, &cap) in caps.iter().enumerate() {
                    assert_eq!(p.get(sum, k), (counts[k] + serves[k]).min(cap), "{caps:?}");
                }
            }
        }
        // Forty types of cap 3 would need 40 × 4 bits in lanes: they get the
        // narrow packing, 2 bits each.
        let forty = vec![3u16; 40];
        let p = Packing::new(&forty).unwrap();
        assert!(p.lanes.is_none());
        let serves = vec![2u16; 40];
        let twice = p.add(p.add(0, &serves, p.pack(&serves)), &serves, p.pack(&serves));
        assert!((0..40).all(|k| p.get(twice, k) == 3));
        // Eight types of the largest cap: 16 bits each, one by one; nine do
        // not fit.
        assert!(Packing::new(&[u16::MAX; 8]).is_some_and(|p| p.lanes.is_none()));
        assert!(Packing::new(&[u16::MAX; 9]).is_none());
    }

    #[test]
    fn many_small_jobs_fill_one_gpu_with_small_slices() {
        let cat = LayoutCatalog::build(&builtin::a100_40gb());
        let plan = plan_auto(&[&cat], &demand(&[("1g.5gb", 5)])).unwrap();
        assert_eq!(layout(&plan.gpus[0]), "1g.5gb*7");
        // Only a big profile: two of them run at once.
        let plan = plan_auto(&[&cat], &demand(&[("3g.20gb", 4)])).unwrap();
        assert_eq!(layout(&plan.gpus[0]), "3g.20gb*2");
    }

    /// The case the old objective got wrong: 1 job ran where 7 could.
    #[test]
    fn a_big_backlog_of_whole_gpu_slices_does_not_starve_the_small_jobs() {
        let cat = LayoutCatalog::build(&builtin::a100_40gb());
        let d = demand(&[("1g.5gb", 24), ("3g.20gb", 19), ("7g.40gb", 39)]);
        let plan = plan_auto(&[&cat], &d).unwrap();
        let got = plan.instances.clone();
        assert_eq!(got.get("7g.40gb"), 0, "{plan:?}");
        assert!(got.get("1g.5gb") >= 1 && got.get("3g.20gb") >= 1, "{got}");
        let unserved: Vec<&str> = plan.unserved().map(|s| s.kind.as_str()).collect();
        assert_eq!(unserved, ["7g.40gb"]);
        assert_eq!(plan.cost.never_start, 39);
    }

    #[test]
    fn whole_gpu_demand_competes_with_slices() {
        let cat = LayoutCatalog::build(&builtin::a100_40gb());
        let d = demand(&[("a100", 3), ("1g.5gb", 2)]);
        let plan = plan_auto(&[&cat], &d).unwrap();
        assert_eq!(layout(&plan.gpus[0]), "whole", "{plan:?}");
        let unserved: Vec<&str> = plan.unserved().map(|s| s.kind.as_str()).collect();
        assert_eq!(unserved, ["1g.5gb"], "the slice jobs are reported");
        // Two GPUs: one stays whole, the other serves the slices.
        let plan = plan_auto(&[&cat, &cat], &d).unwrap();
        let mut shapes: Vec<String> = plan.gpus.iter().map(layout).collect();
        shapes.sort();
        assert_eq!(shapes[1], "whole");
        assert!(shapes[0].contains("1g.5gb"), "{shapes:?}");
        assert_eq!(plan.cost.never_start, 0);
        // Without a whole-GPU type (not a candidate), the slices win.
        let no_whole = cat.clone().with_whole_type(None);
        let plan = plan_auto(&[&no_whole], &d).unwrap();
        assert_eq!(plan.not_offered.get("a100"), Some(&3));
    }

    #[test]
    fn a_job_asking_for_two_instances_needs_two() {
        let cat = LayoutCatalog::build(&builtin::h200());
        let mut d = Demand::new();
        d.add("3g.71gb", 2, 3600);
        d.add("1g.18gb", 1, 3600);
        d.add("1g.18gb", 1, 3600);
        let plan = plan_auto(&[&cat], &d).unwrap();
        // One GPU holds at most two 3g.71gb, and then no 1g: the pair job and the
        // two small ones cannot all run; leaving the pair out loses fewer jobs.
        assert_eq!(plan.cost.never_start, 1, "{plan:?}");
        assert!(plan.instances.get("3g.71gb") <= 1);
        // On two GPUs everything runs at once.
        let plan = plan_auto(&[&cat, &cat], &d).unwrap();
        assert_eq!(plan.cost, QueueCost::default(), "{plan:?}");
        assert!(plan.instances.get("3g.71gb") >= 2);
    }

    #[test]
    fn requested_times_weigh() {
        let cat = LayoutCatalog::build(&builtin::a100_40gb());
        let pick = |long: &str, short: &str| {
            let mut d = Demand::new();
            for _ in 0..3 {
                d.add(long, 1, 10 * 3600);
                d.add(short, 1, 60);
            }
            plan_auto(&[&cat], &d).unwrap().instances
        };
        // Long 2g jobs get an instance each; the minute-long 1g jobs can queue.
        let a = pick("2g.10gb", "1g.5gb");
        assert_eq!(a.get("2g.10gb"), 3, "{a}");
        let b = pick("1g.5gb", "2g.10gb");
        assert!(b.get("1g.5gb") >= 3, "{b}");
        assert!(b.get("2g.10gb") < 3, "{b}");
    }

    #[test]
    fn demand_is_net_of_what_other_nodes_offer() {
        let cat = LayoutCatalog::build(&builtin::a100_40gb());
        let mut d = demand(&[("1g.5gb", 14), ("3g.20gb", 2)]);
        let alone = plan_auto(&[&cat], &d).unwrap();
        assert!(alone.instances.get("1g.5gb") > 0, "{alone:?}");
        for _ in 0..14 {
            d.offer_elsewhere("1g.5gb", 0);
        }
        let plan = plan_auto(&[&cat], &d).unwrap();
        assert_eq!(layout(&plan.gpus[0]), "3g.20gb*2", "{plan:?}");
        assert_eq!(plan.served[0].elsewhere, 14);
    }

    #[test]
    fn eight_gpus_split_between_profiles() {
        let cat = LayoutCatalog::build(&builtin::h200());
        let gpus: Vec<&LayoutCatalog> = vec![&cat; 8];
        let d = demand(&[("1g.18gb", 700), ("7g.141gb", 100), ("9g.999gb", 4)]);
        let plan = plan_auto(&gpus, &d).unwrap();
        assert_eq!(plan.not_offered.get("9g.999gb"), Some(&4));
        let n1 = plan.instances.get("1g.18gb");
        let n7 = plan.instances.get("7g.141gb") + plan.whole_gpus;
        // Total wait ~ d²/n per type: 700²/(7k) = 100²/(8-k) at k ≈ 5.
        assert!(n1 >= 28 && n7 >= 2, "{plan:?}");
        assert_eq!(plan.cost.never_start, 0);
    }

    /// docs/mig-layouts.md: up to six demanded types on eight GPUs of one
    /// model, the programme is proven best. With 15,000 states per GPU this
    /// case (10 jobs of each of six H200 profiles) said `"exact": false`.
    #[test]
    fn six_demanded_types_on_eight_gpus_are_planned_exactly() {
        let cat = LayoutCatalog::build(&builtin::h200());
        let gpus: Vec<&LayoutCatalog> = vec![&cat; 8];
        let mut d = Demand::new();
        for name in [
            "7g.141gb",
            "4g.71gb",
            "2g.35gb",
            "1g.35gb",
            "1g.18gb",
            "1g.18gb+me",
        ] {
            for _ in 0..10 {
                d.add(name, 1, 3600);
            }
        }
        let plan = plan_auto(&gpus, &d).unwrap();
        assert_eq!(plan.served.len(), 6);
        assert!(plan.exact, "{plan:?}");
        assert_eq!(plan.cost.never_start, 0);
    }

    #[test]
    fn nothing_to_plan_from() {
        let cat = LayoutCatalog::build(&builtin::a100_40gb());
        assert!(plan_auto(&[&cat], &Demand::new()).is_none());
        assert!(plan_auto(&[&cat], &demand(&[("1g.18gb", 10)])).is_none());
    }

    /// Issue 22, item 13: a V100 beside MIG GPUs serves its own jobs as it
    /// is; they count in the cost (and a queue of only them is no error for
    /// the caller to plan from) but never change the MIG GPUs' choice.
    #[test]
    fn fixed_whole_gpus_count_in_the_cost_but_not_the_choice() {
        let h = LayoutCatalog::build(&builtin::h200());
        let mut d = demand(&[("1g.18gb", 7), ("v100", 3)]);
        let without = plan_auto(&[&h], &d).unwrap();
        assert_eq!(without.not_offered.get("v100"), Some(&3));
        d.offer_fixed("v100", 1);
        let plan = plan_auto(&[&h], &d).unwrap();
        assert!(plan.not_offered.is_empty(), "{plan:?}");
        assert_eq!(plan.gpus, without.gpus, "the fixed GPU changes no choice");
        let v = plan.served.iter().find(|s| s.kind == "v100").unwrap();
        assert_eq!((v.instances, v.fixed, v.never_start), (1, 1, 0));
        // Three one-hour jobs on one V100: waits 0, 1 h, 2 h.
        assert_eq!(v.mean_wait_s, 3600);
        assert_eq!(plan.cost.wait_s, without.cost.wait_s + 3 * 3600);
        // Only V100 jobs: nothing for the MIG GPUs to plan from.
        let mut only = demand(&[("v100", 2)]);
        only.offer_fixed("v100", 1);
        assert!(plan_auto(&[&h], &only).is_none());
    }

    #[test]
    fn mixed_node_plans_each_model_for_its_own_profiles() {
        let a = LayoutCatalog::build(&builtin::a100_40gb());
        let h = LayoutCatalog::build(&builtin::h200());
        let d = demand(&[("1g.5gb", 50), ("3g.71gb", 50)]);
        let plan = plan_auto(&[&a, &h, &a], &d).unwrap();
        assert_eq!(layout(&plan.gpus[0]), "1g.5gb*7");
        assert_eq!(layout(&plan.gpus[1]), "3g.71gb*2");
        assert_eq!(layout(&plan.gpus[2]), "1g.5gb*7");
    }
}
