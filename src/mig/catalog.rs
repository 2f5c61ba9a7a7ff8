//! Every valid layout of one GPU model, enumerated once (what `auto` chooses from).

use super::layout::ProfileCounts;
use super::planner::{make_plan, place_first, totals, GpuPlan, Rules};
use super::profile::GpuGeometry;

/// Every valid layout (non-empty) of one GPU model, and the GRES type the GPU
/// has when MIG is off (`a100`), so "whole GPU" competes with the layouts.
#[derive(Debug, Clone)]
pub struct LayoutCatalog {
    pub(crate) geometry: GpuGeometry,
    pub(crate) plans: Vec<GpuPlan>,
    /// Instances per profile of each plan, in `geometry.profiles()` order.
    pub(crate) needs: Vec<Vec<u8>>,
    pub(crate) whole_type: Option<String>,
}

impl LayoutCatalog {
    /// Enumerate every multiset of profiles that the planner can place. MIG off
    /// is a candidate too, as the GRES type Slurm's gres.conf gives a whole GPU
    /// of this model (`NVIDIA A100-SXM4-40GB` → `a100`).
    pub fn build(geometry: &GpuGeometry) -> LayoutCatalog {
        let profiles = geometry.profiles();
        let mut needs = Vec::new();
        let mut need = vec![0u8; profiles.len()];
        enumerate(geometry, 0, &mut need, &mut needs);
        needs.sort_by(|a, b| {
            let (ma, ca) = totals(geometry, a);
            let (mb, cb) = totals(geometry, b);
            mb.cmp(&ma).then(cb.cmp(&ca)).then(b.cmp(a))
        });
        let plans = needs
            .iter()
            .map(|need| {
                let starts = place_first(geometry, need, Rules::Hardware)
                    .expect("enumerated layouts were placed before");
                make_plan(geometry, need, &starts)
            })
            .collect();
        LayoutCatalog {
            geometry: geometry.clone(),
            plans,
            needs,
            whole_type: Some(crate::gres::render::gpu_type_name(geometry.model())),
        }
    }

    /// The GRES type of the GPU with MIG off (`None`: MIG off is not a candidate).
    pub fn with_whole_type(mut self, whole_type: Option<String>) -> LayoutCatalog {
        self.whole_type = whole_type;
        self
    }

    pub fn whole_type(&self) -> Option<&str> {
        self.whole_type.as_deref()
    }

    pub fn geometry(&self) -> &GpuGeometry {
        &self.geometry
    }

    /// Every valid layout, fuller and larger first.
    pub fn layouts(&self) -> &[GpuPlan] {
        &self.plans
    }

    pub fn len(&self) -> usize {
        self.plans.len()
    }

    pub fn is_empty(&self) -> bool {
        self.plans.is_empty()
    }

    /// True when `counts` is one of the valid layouts.
    pub fn contains(&self, counts: &ProfileCounts) -> bool {
        self.plans.iter().any(|p| &p.counts() == counts)
    }
}

fn enumerate(geometry: &GpuGeometry, j: usize, need: &mut Vec<u8>, out: &mut Vec<Vec<u8>>) {
    let profiles = geometry.profiles();
    if j == profiles.len() {
        if need.iter().any(|&n| n > 0) && place_first(geometry, need, Rules::Hardware).is_some() {
            out.push(need.clone());
        }
        return;
    }
    let p = &profiles[j];
    for n in 0..=p.max_instances {
        need[j] = n;
        let (m, c) = totals(geometry, need);
        if m > u32::from(geometry.memory_slices()) || c > u32::from(geometry.compute_slices()) {
            break;
        }
        enumerate(geometry, j + 1, need, out);
    }
    need[j] = 0;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mig::builtin;
    use crate::mig::planner::check;

    #[test]
    fn catalog_holds_every_valid_layout_once() {
        let a = builtin::a100_40gb();
        let cat = LayoutCatalog::build(&a);
        for plan in cat.layouts() {
            check(&plan.counts(), &a).unwrap();
        }
        let mut seen: Vec<String> = cat
            .layouts()
            .iter()
            .map(|p| p.counts().to_string())
            .collect();
        let n = seen.len();
        seen.sort();
        seen.dedup();
        assert_eq!(seen.len(), n, "no duplicates");
        let balanced: ProfileCounts = [("3g.20gb", 1), ("2g.10gb", 1), ("1g.5gb", 2)]
            .into_iter()
            .collect();
        assert!(cat.contains(&balanced));
        let refused: ProfileCounts = [("4g.20gb", 1), ("3g.20gb", 1)].into_iter().collect();
        assert!(!cat.contains(&refused));
        assert_eq!(
            cat.layouts()[0].counts().to_string(),
            "7g.40gb",
            "fullest, largest first"
        );
        assert_eq!(cat.whole_type(), Some("a100"));
        assert_eq!(
            LayoutCatalog::build(&builtin::h200()).whole_type(),
            Some("h200")
        );
    }
}
