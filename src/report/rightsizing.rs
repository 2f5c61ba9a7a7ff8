//! Right-sizing hints: stages whose memory figure fits a smaller MIG profile
//! than the one they asked for.
//!
//! Slurm records no GPU memory for MIG jobs (NVML gives none per MIG device),
//! so the figures come from run manifests only: a measured peak when the run
//! recorded one, else the estimate `submit` made.

use super::model::{Hint, RightSizing};
use super::runs::Manifest;

/// Usable GiB per profile as `nvidia-smi mig -lgip` reports it; where GPU
/// models differ (A100-80GB, H100), the smaller figure.
const USABLE_GIB: &[(&str, f64)] = &[
    ("1g.5gb", 4.75),
    ("1g.10gb", 9.5),
    ("2g.10gb", 9.75),
    ("1g.20gb", 19.5),
    ("2g.20gb", 19.5),
    ("3g.20gb", 19.62),
    ("4g.20gb", 19.62),
    ("3g.40gb", 39.25),
    ("4g.40gb", 39.25),
    ("7g.40gb", 39.5),
    ("7g.80gb", 78.5),
    ("1g.18gb", 16.0),
    ("1g.35gb", 32.25),
    ("2g.35gb", 32.25),
    ("3g.71gb", 69.5),
];

/// Usable GiB of a profile name: the table, else 0.88 × the GB in a
/// `<n>g.<m>gb` name (the lowest ratio in the table), else `None` (a whole
/// GPU such as `a100`, larger than any slice).
pub fn usable_gib(profile: &str) -> Option<f64> {
    let profile = profile.trim().to_lowercase();
    if let Some((_, gib)) = USABLE_GIB.iter().find(|(p, _)| *p == profile) {
        return Some(*gib);
    }
    let (slices, memory) = profile.split_once("g.")?;
    slices.parse::<u32>().ok()?;
    let gb: f64 = memory.strip_suffix("gb")?.parse().ok()?;
    Some(gb * 0.88)
}

/// Smaller first; whole GPUs (unknown size) last.
fn size_rank(profile: &str) -> f64 {
    usable_gib(profile).unwrap_or(f64::INFINITY)
}

/// Hints for every stage with a figure and a requested profile; `available`
/// are the GPU types the inventory has (`1g.5gb`, `a100`, …).
pub fn hints(manifests: &[Manifest], available: &[String]) -> RightSizing {
    let mut sized: Vec<(&str, f64)> = available
        .iter()
        .filter_map(|p| usable_gib(p).map(|g| (p.as_str(), g)))
        .collect();
    sized.sort_by(|a, b| a.1.total_cmp(&b.1));
    let mut out = RightSizing::default();
    for m in manifests {
        for stage in &m.stages {
            let Some(requested) = stage.profile.as_deref() else {
                continue;
            };
            // Several whole GPUs (DDP) are sized by the batch split over
            // them; a smaller profile is no advice for such a training.
            if stage.gpus > 1 {
                continue;
            }
            let (basis, memory, needed) = match (stage.peak_gib, stage.estimate_gib) {
                (Some(peak), _) => (
                    "measured",
                    peak,
                    peak * crate::advise::need::MEASURED_HEADROOM,
                ),
                (None, Some(est)) => ("estimate", est, est),
                (None, None) => continue,
            };
            out.stages_with_data += 1;
            let Some(&(suggested, usable)) = sized.iter().find(|(_, g)| *g >= needed) else {
                continue;
            };
            if usable < size_rank(requested) {
                out.hints.push(Hint {
                    run_id: m.run_id.clone(),
                    stage: stage.name.clone(),
                    job_id: stage.job_id.clone(),
                    requested: requested.to_string(),
                    basis: basis.to_string(),
                    memory_gib: memory,
                    suggested: suggested.to_string(),
                    suggested_usable_gib: usable,
                });
            }
        }
    }
    out.note = if out.stages_with_data == 0 {
        "no data: no run manifest records a memory estimate or measured peak with its requested \
         profile, and Slurm records no GPU memory for MIG jobs"
            .to_string()
    } else {
        format!(
            "{} stage(s) with a memory figure; {} could use a smaller profile",
            out.stages_with_data,
            out.hints.len()
        )
    };
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::report::runs::Stage;

    fn stage(profile: &str, est: Option<f64>, peak: Option<f64>) -> Stage {
        Stage {
            name: "train".into(),
            state: "completed".into(),
            job_id: Some("7".into()),
            profile: Some(profile.into()),
            estimate_gib: est,
            peak_gib: peak,
            ..Stage::default()
        }
    }

    fn run(stages: Vec<Stage>) -> Manifest {
        Manifest {
            run_id: "r1".into(),
            name: "n".into(),
            state: "completed".into(),
            stages,
            ..Manifest::default()
        }
    }

    fn types() -> Vec<String> {
        ["1g.5gb", "2g.10gb", "a100"]
            .iter()
            .map(|s| s.to_string())
            .collect()
    }

    #[test]
    fn sizes() {
        assert_eq!(usable_gib("1g.5gb"), Some(4.75));
        assert_eq!(
            usable_gib("7g.141gb").map(|g| (g * 100.0).round()),
            Some(12408.0)
        );
        assert_eq!(usable_gib("a100"), None);
        assert_eq!(usable_gib("xg.5gb"), None);
    }

    #[test]
    fn several_gpus_get_no_smaller_profile_hint() {
        let mut s = stage("a100", Some(3.0), None);
        s.gpus = 4;
        let r = hints(&[run(vec![s])], &types());
        assert!(r.hints.is_empty(), "{:?}", r.hints);
    }

    #[test]
    fn estimate_fitting_a_smaller_profile_gives_a_hint() {
        let r = hints(&[run(vec![stage("2g.10gb", Some(3.0), None)])], &types());
        assert_eq!(r.stages_with_data, 1);
        assert_eq!(r.hints.len(), 1);
        assert_eq!(r.hints[0].suggested, "1g.5gb");
        assert_eq!(r.hints[0].basis, "estimate");
    }

    #[test]
    fn whole_gpu_requests_get_a_slice_hint() {
        let r = hints(&[run(vec![stage("a100", Some(8.0), None)])], &types());
        assert_eq!(r.hints[0].suggested, "2g.10gb");
    }

    #[test]
    fn measured_peak_wins_and_gets_headroom() {
        // 4.5 GiB fits 1g.5gb (4.75) as an estimate, but not with 10 % headroom.
        let r = hints(
            &[run(vec![stage("2g.10gb", Some(1.0), Some(4.5))])],
            &types(),
        );
        assert!(r.hints.is_empty(), "{:?}", r.hints);
        assert_eq!(r.stages_with_data, 1);
        let r = hints(&[run(vec![stage("2g.10gb", None, Some(4.0))])], &types());
        assert_eq!(r.hints[0].basis, "measured");
    }

    #[test]
    fn right_sized_and_no_data() {
        let r = hints(&[run(vec![stage("1g.5gb", Some(3.0), None)])], &types());
        assert!(r.hints.is_empty());
        let r = hints(&[run(vec![stage("1g.5gb", None, None)])], &types());
        assert_eq!(r.stages_with_data, 0);
        assert!(r.note.starts_with("no data"));
    }
}
