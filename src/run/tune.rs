//! `[tune]` after planning: the search's settings file and program written at
//! submission, the chain of batches (ask → trials → tell, one batch after the
//! other), and the search's summary as the tell jobs leave it (`status`,
//! `compare`, `tune best`). The Python the jobs run is `templates/tune.py`.

use anyhow::Result;

use super::chain::JobRequest;
use crate::plan::DepKind;
use crate::rundir::layout;
use crate::rundir::search::{is_search, read_summary, Summary, Trial};
use crate::spec::{ArgValue, Dist, Spec, StageKind, Tune};

/// The program of the ask and tell jobs, written to `layout::TUNE_PROGRAM`.
pub const PROGRAM: &str = include_str!("../../templates/tune.py");

/// The search's settings as the ask and tell jobs read them
/// (`layout::TUNE_SETTINGS`).
pub fn settings_json(spec: &Spec, tune: &Tune, run_id: &str) -> Result<String> {
    let space: Vec<serde_json::Value> = tune
        .space
        .iter()
        .map(|p| match &p.dist {
            Dist::Float { min, max, log } => serde_json::json!({
                "name": p.name, "type": "float", "min": min, "max": max, "log": log,
            }),
            Dist::Int { min, max, log } => serde_json::json!({
                "name": p.name, "type": "int", "min": min, "max": max, "log": log,
            }),
            Dist::Choice { choices } => serde_json::json!({
                "name": p.name, "type": "choice",
                "choices": choices.iter().map(choice_json).collect::<Vec<_>>(),
            }),
        })
        .collect();
    let v = serde_json::json!({
        "study": run_id,
        "run": spec.run.name,
        "trials": tune.trials,
        "parallel": tune.parallel,
        "epochs": tune.epochs,
        "objective": tune.objective,
        "direction": tune.direction.name(),
        "sampler": tune.sampler.name(),
        "seed": tune.seed,
        "space": space,
        "default_space": tune.default_space.then_some(crate::spec::DEFAULT_SPACE_FROM),
    });
    Ok(serde_json::to_string_pretty(&v)? + "\n")
}

fn choice_json(v: &ArgValue) -> serde_json::Value {
    match v {
        ArgValue::Bool(b) => (*b).into(),
        ArgValue::Int(i) => (*i).into(),
        ArgValue::Float(f) => (*f).into(),
        ArgValue::Str(s) => s.clone().into(),
        ArgValue::List(_) => v.to_cli().into(),
    }
}

/// One job request per stage (as `submit` makes them) → the whole search:
/// prepare, then per batch its ask (array task = batch), its trials (array
/// tasks = their numbers) and its tell (afterany), each batch's ask after
/// the tell before it, and the export after the last tell.
pub fn expand(tune: &Tune, base: Vec<JobRequest>) -> Vec<JobRequest> {
    expand_batches(tune, base, 0..tune.batches())
}

/// `expand` for some batches only (`resume`: from the first batch not told):
/// the first ask keeps the dependencies of the base request.
pub fn expand_batches(
    tune: &Tune,
    base: Vec<JobRequest>,
    batches: std::ops::Range<u32>,
) -> Vec<JobRequest> {
    let take = |k: StageKind| base.iter().find(|r| r.kind == k).cloned();
    let (Some(ask), Some(train), Some(tell)) = (
        take(StageKind::Ask),
        take(StageKind::Train),
        take(StageKind::Tell),
    ) else {
        return base;
    };
    let mut out: Vec<JobRequest> = base
        .iter()
        .filter(|r| r.kind == StageKind::Prepare)
        .cloned()
        .collect();
    for b in batches.clone() {
        let trials = tune.batch_trials(b);
        let mut a = ask.clone();
        a.array = Some(b.to_string());
        if b > batches.start {
            a.after = vec![(StageKind::Tell, DepKind::AfterOk)];
        }
        out.push(a);
        let mut t = train.clone();
        t.array = Some(if trials.len() == 1 {
            trials.start.to_string()
        } else {
            format!("{}-{}", trials.start, trials.end - 1)
        });
        out.push(t);
        let mut l = tell.clone();
        l.array = Some(b.to_string());
        out.push(l);
    }
    out.extend(
        base.iter()
            .filter(|r| {
                !matches!(
                    r.kind,
                    StageKind::Prepare | StageKind::Ask | StageKind::Train | StageKind::Tell
                )
            })
            .cloned(),
    );
    out
}

/// What a trial's log (its tail) says when CUDA ran out of memory: the
/// trainer's own words, as the train script's `on_oom` escalation reads them.
pub fn cuda_oom(log: &str) -> bool {
    log.contains("CUDA out of memory") || log.contains("OutOfMemoryError")
}

/// Why a failed trial failed, when it ran out of GPU memory: its train
/// script's record (`rundir::search::OomRecord`), else CUDA's words in its
/// log or the memory guard's stop. Says what `on_oom` did about it and what
/// to change. `gres`: the slice the trial last trained on; `moves`: how many
/// times it moved to a bigger slice.
pub fn gpu_oom_why(
    log: Option<&str>,
    guard: Option<&crate::rundir::guard::GuardRecord>,
    record: Option<&crate::rundir::search::OomRecord>,
    gres: Option<&str>,
    on_oom: &crate::spec::OnOom,
    moves: usize,
) -> Option<String> {
    let cause = if let Some(r) = record {
        r.cause.clone()
    } else if log.is_some_and(cuda_oom) {
        "CUDA out of memory".into()
    } else if guard.is_some_and(|g| g.action == "stopped") {
        "stopped by the memory guard".into()
    } else {
        return None;
    };
    let slice = gres
        .and_then(crate::slurm::gres::parse_item)
        .map(|i| i.kind.unwrap_or(i.name))
        .unwrap_or_else(|| "its GPU".into());
    let change = "set `gpu` in [resources] to a bigger slice (or lower `batch` or `imgsz`) and submit the search again";
    let what = match on_oom {
        crate::spec::OnOom::Stop => format!(
            "told fail, as [resources] on_oom = \"stop\" says: set on_oom = \"resume-bigger\" \
             to move such a trial to a bigger slice within its batch, or {change}"
        ),
        crate::spec::OnOom::ResumeBigger { .. } => {
            let moved = match moves {
                0 => String::new(),
                n => format!(" after {n} move(s) to a bigger slice"),
            };
            match record.and_then(|r| r.not_moved.as_deref()) {
                Some(not) => format!("told fail{moved}, not moved again: {not}; {change}"),
                None => format!("told fail{moved}; {change}"),
            }
        }
    };
    Some(format!(
        "ran out of GPU memory on {slice} ({cause}); {what}"
    ))
}

/// `gpu_oom_why` for each failed trial of `summary`, from the run's files
/// and its manifest (the trial's slice, its moves, the spec's `on_oom`); a
/// trial that did not run out of memory keeps the tell job's why.
pub fn explain_failures(
    summary: &mut Summary,
    dir: &dyn super::status::RunDir,
    manifest: &crate::rundir::manifest::Manifest,
) {
    let on_oom = crate::spec::parse(
        &manifest.spec_text,
        &manifest.spec_file.display().to_string(),
    )
    .map(|s| s.resources.on_oom)
    .unwrap_or(crate::spec::OnOom::Stop);
    let guards = dir.guards();
    for t in summary.trials.iter_mut().filter(|t| t.state == "fail") {
        let log = dir.log_tail(&layout::log_file("train", Some(t.trial)));
        let guard = guards.get(&("train".to_string(), Some(t.trial)));
        let record = dir.trial_oom(t.trial);
        let gres = crate::rundir::search::trial_gres(manifest, t.trial);
        let moves = crate::rundir::search::trial_moves(manifest, t.trial);
        if let Some(why) = gpu_oom_why(
            log.as_deref(),
            guard,
            record.as_ref(),
            gres.as_deref(),
            &on_oom,
            moves,
        ) {
            t.why = Some(why);
        }
    }
}

/// A value as `status` shows it: floats to 4 significant digits.
pub fn short_value(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Number(n) if n.is_f64() => {
            let f = n.as_f64().unwrap_or(f64::NAN);
            let s = format!("{f:.4e}");
            match s.parse::<f64>() {
                Ok(x) if (1e-3..1e5).contains(&x.abs()) => format!("{x}"),
                _ => s,
            }
        }
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// A search's best trial so far, with the snippet `tune best` prints.
pub struct BestTrial {
    pub summary: Summary,
    pub trial: Trial,
    pub snippet: String,
    /// `tune/best_hyperparameters.yaml`, as Ultralytics' tuner names it.
    pub yaml: std::path::PathBuf,
}

/// The best trial of a run's search; `None` while no trial gave an objective.
pub fn best(manifest: &crate::rundir::manifest::Manifest) -> Result<Option<BestTrial>> {
    if !is_search(manifest) {
        return Err(crate::error::invalid(format!(
            "run {} is not a search: its spec has no [tune]",
            manifest.run_id
        )));
    }
    let Some(summary) = read_summary(&manifest.workdir)? else {
        return Ok(None);
    };
    let Some(trial) = summary.ranked().first().map(|t| (*t).clone()) else {
        return Ok(None);
    };
    let snippet = summary.best_snippet().unwrap_or_default();
    Ok(Some(BestTrial {
        yaml: manifest
            .workdir
            .join(layout::TUNE)
            .join("best_hyperparameters.yaml"),
        summary,
        trial,
        snippet,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rundir::search::toml_value;
    use std::path::PathBuf;

    fn req(kind: StageKind, after: Vec<(StageKind, DepKind)>) -> JobRequest {
        JobRequest {
            kind,
            script: PathBuf::from(format!("/w/scripts/{kind}.sh")),
            workdir: "/w".into(),
            array: None,
            after,
            export: vec![],
            overrides: vec![],
        }
    }

    fn tune(trials: u32, parallel: u32) -> Tune {
        let spec = crate::spec::parse(
            &format!(
                "version = 1\n[run]\nname = \"t\"\n[train]\nmodel = \"yolov8n.pt\"\ndata = \"d.yaml\"\n[tune]\ntrials = {trials}\nparallel = {parallel}\n"
            ),
            "t.toml",
        )
        .unwrap();
        spec.tune.unwrap()
    }

    #[test]
    fn batches_chain_ask_trials_tell() {
        let base = vec![
            req(StageKind::Prepare, vec![]),
            req(StageKind::Ask, vec![(StageKind::Prepare, DepKind::AfterOk)]),
            req(StageKind::Train, vec![(StageKind::Ask, DepKind::AfterOk)]),
            req(StageKind::Tell, vec![(StageKind::Train, DepKind::AfterAny)]),
            req(StageKind::Export, vec![(StageKind::Tell, DepKind::AfterOk)]),
        ];
        let out = expand(&tune(5, 2), base);
        let shown: Vec<String> = out
            .iter()
            .map(|r| {
                let after: Vec<String> = r
                    .after
                    .iter()
                    .map(|(s, k)| format!("{}:{s}", k.slurm_word()))
                    .collect();
                format!(
                    "{}[{}]<{}>",
                    r.kind,
                    r.array.as_deref().unwrap_or("-"),
                    after.join(",")
                )
            })
            .collect();
        assert_eq!(
            shown,
            vec![
                "prepare[-]<>",
                "ask[0]<afterok:prepare>",
                "train[0-1]<afterok:ask>",
                "tell[0]<afterany:train>",
                "ask[1]<afterok:tell>",
                "train[2-3]<afterok:ask>",
                "tell[1]<afterany:train>",
                "ask[2]<afterok:tell>",
                "train[4]<afterok:ask>",
                "tell[2]<afterany:train>",
                "export[-]<afterok:tell>",
            ]
        );
    }

    #[test]
    fn a_trial_out_of_gpu_memory_says_what_on_oom_did_and_what_to_change() {
        use crate::rundir::search::OomRecord;
        use crate::spec::OnOom;
        let stop = OnOom::Stop;
        let why = gpu_oom_why(
            Some("epoch 2\ntorch.OutOfMemoryError: CUDA out of memory. Tried to allocate"),
            None,
            None,
            Some("gpu:1g.5gb:1"),
            &stop,
            0,
        )
        .unwrap();
        assert!(
            why.starts_with("ran out of GPU memory on 1g.5gb (CUDA out of memory); told fail")
                && why.contains("on_oom = \"resume-bigger\"")
                && why.contains("set `gpu` in [resources] to a bigger slice"),
            "{why}"
        );
        let stopped = crate::rundir::guard::GuardRecord {
            action: "stopped".into(),
            ..Default::default()
        };
        assert!(
            gpu_oom_why(Some("Traceback"), Some(&stopped), None, None, &stop, 0)
                .unwrap()
                .contains("on its GPU (stopped by the memory guard)")
        );
        let warned = crate::rundir::guard::GuardRecord {
            action: "warned".into(),
            ..Default::default()
        };
        assert_eq!(
            gpu_oom_why(Some("ValueError"), Some(&warned), None, None, &stop, 0),
            None
        );
        assert_eq!(
            gpu_oom_why(None, None, None, Some("gpu:1g.5gb:1"), &stop, 0),
            None
        );
        // Moved twice, then the step limit: the record says why it stayed.
        let record = OomRecord {
            cause: "CUDA out of memory".into(),
            not_moved: Some("trial 1 has moved to a bigger slice 2 time(s) already".into()),
            ..Default::default()
        };
        let bigger = OnOom::ResumeBigger { steps: 2 };
        let why = gpu_oom_why(None, None, Some(&record), Some("gpu:a100:1"), &bigger, 2).unwrap();
        assert!(
            why.starts_with("ran out of GPU memory on a100 (CUDA out of memory); told fail after 2 move(s) to a bigger slice, not moved again: trial 1 has moved"),
            "{why}"
        );
    }

    #[test]
    fn the_summary_ranks_and_makes_a_snippet() {
        let text = r#"{"objective":"metrics/mAP50-95(B)","direction":"maximize","sampler":"tpe",
            "trials_planned":4,"parallel":2,"best":{"trial":2,"value":0.5},"trials":[
            {"trial":0,"batch":0,"number":0,"params":{"lr0":0.01,"optimizer":"SGD"},"state":"complete","value":0.3,"epochs":3,"best_so_far":0.3},
            {"trial":1,"batch":0,"number":1,"params":{"lr0":0.02,"optimizer":"Adam"},"state":"fail","value":null,"epochs":1,"best_so_far":0.3},
            {"trial":2,"batch":1,"number":2,"params":{"lr0":0.001,"optimizer":"AdamW"},"state":"complete","value":0.5,"epochs":3,"best_so_far":0.5},
            {"trial":3,"batch":1,"number":3,"params":{"lr0":1.0,"optimizer":"SGD"},"state":"running","value":null,"epochs":2,"best_so_far":0.5}]}"#;
        let s: Summary = serde_json::from_str(text).unwrap();
        let ranked: Vec<u32> = s.ranked().iter().map(|t| t.trial).collect();
        assert_eq!(ranked, vec![2, 0]);
        let snippet = s.best_snippet().unwrap();
        assert!(
            snippet.contains("[train.args]\nlr0 = 0.001\noptimizer = \"AdamW\"\n"),
            "{snippet}"
        );
        let mut min = s.clone();
        min.direction = "minimize".into();
        assert_eq!(min.ranked()[0].trial, 0);
        assert_eq!(toml_value(&serde_json::json!(1.0)), "1.0");
        assert_eq!(toml_value(&serde_json::json!(3)), "3");
    }
}
