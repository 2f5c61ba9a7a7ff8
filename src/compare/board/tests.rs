use super::*;
use crate::compare::render;

fn row(id: &str, fp: Option<&str>, data: &str, map: Option<f64>) -> Row {
    Row {
        rank: None,
        id: id.into(),
        run_id: id.split('/').next().unwrap().into(),
        variant: None,
        name: "n".into(),
        user: "alice".into(),
        submitted_at: "2026-11-30T10:00:00Z".parse().unwrap(),
        state: "completed".into(),
        train_state: "completed".into(),
        model: Some("yolov8n.yaml".into()),
        data: Some(data.into()),
        fingerprint: fp.map(str::to_string),
        params: BTreeMap::new(),
        imgsz: Some("64".into()),
        epochs_done: 2,
        epochs: Some(2),
        best_epoch: Some(2),
        best_map50_95: map,
        best_map50: map.map(|m| m * 1.5),
        precision: None,
        recall: None,
        train_seconds: Some(10.0),
        slice: Some("gpu:1g.5gb:1".into()),
        slice_index: None,
        slice_hours: None,
        gpu_hours: None,
        inference_ms: None,
        inference_of: None,
    }
}

const A: &str = "fnv128:aaaaaaaaaaaaaaaabbbbbbbbbbbbbbbb";
const B: &str = "fnv128:cccccccccccccccc0000000000000000";

#[test]
fn runs_on_different_data_are_ranked_apart_even_under_one_path() {
    let rows = vec![
        row("r1", Some(A), "/d/pcb/data.yaml", Some(0.3)),
        row("r2", Some(B), "/d/pcb/data.yaml", Some(0.9)),
        row("r3", Some(A), "/d/pcb/data.yaml", Some(0.5)),
    ];
    let b = board(rows, &Options::default()).unwrap();
    assert_eq!(b.groups.len(), 2);
    // The group with the best row first; each group ranked from 1.
    assert_eq!(b.groups[0].fingerprint.as_deref(), Some(B));
    assert_eq!(b.groups[0].rows[0].rank, Some(1));
    let a: Vec<(&str, Option<usize>)> = b.groups[1]
        .rows
        .iter()
        .map(|r| (r.id.as_str(), r.rank))
        .collect();
    assert_eq!(a, [("r3", Some(1)), ("r1", Some(2))]);
    assert!(
        b.notes.iter().any(|n| n.contains("2 different datasets")),
        "{:?}",
        b.notes
    );
    assert!(b
        .notes
        .iter()
        .any(|n| n.contains("pcb/data.yaml held 2 different contents")));
}

#[test]
fn rows_without_the_metric_rank_last_and_unranked_and_ties_share() {
    let rows = vec![
        row("r1", Some(A), "/d/pcb/data.yaml", None),
        row("r2", Some(A), "/d/pcb/data.yaml", Some(0.4)),
        row("r3", Some(A), "/d/pcb/data.yaml", Some(0.4)),
        row("r4", Some(A), "/d/pcb/data.yaml", Some(0.1)),
    ];
    let b = board(rows, &Options::default()).unwrap();
    let got: Vec<Option<usize>> = b.groups[0].rows.iter().map(|r| r.rank).collect();
    assert_eq!(got, [Some(1), Some(1), Some(3), None]);
    assert_eq!(b.groups[0].rows[3].id, "r1");
}

#[test]
fn lower_is_better_for_time_and_inference() {
    let mut fast = row("fast", Some(A), "/d/pcb/data.yaml", Some(0.1));
    fast.inference_ms = Some(2.0);
    let mut slow = row("slow", Some(A), "/d/pcb/data.yaml", Some(0.9));
    slow.inference_ms = Some(20.0);
    let opts = Options {
        sort: SortKey::Inference,
        ..Options::default()
    };
    let b = board(vec![slow, fast], &opts).unwrap();
    assert_eq!(b.groups[0].rows[0].id, "fast");
}

#[test]
fn unverified_rows_group_by_path_and_say_so() {
    let rows = vec![
        row("r1", None, "/d/pcb/data.yaml", Some(0.3)),
        row("r2", None, "/e/pcb/data.yaml", Some(0.5)),
        row("r3", None, "/d/other/data.yaml", Some(0.5)),
    ];
    let b = board(rows, &Options::default()).unwrap();
    assert_eq!(b.groups.len(), 2);
    assert!(b.groups.iter().all(|g| !g.verified));
    assert!(b.notes.iter().any(|n| n.contains("no content fingerprint")));
}

#[test]
fn data_filter_matches_names_and_fingerprints_and_suggests() {
    let rows = || {
        vec![
            row("r1", Some(A), "/d/pcb/data.yaml", Some(0.3)),
            row("r2", Some(B), "/d/birds/data.yaml", Some(0.9)),
        ]
    };
    for want in [
        "pcb",
        "/d/pcb/data.yaml",
        "pcb/data.yaml",
        "aaaaaaaa",
        "fnv128:aaaaaa",
    ] {
        let opts = Options {
            data: Some(want.into()),
            ..Options::default()
        };
        let b = board(rows(), &opts).unwrap();
        assert_eq!(b.groups.len(), 1, "{want}");
        assert_eq!(b.groups[0].rows[0].id, "r1", "{want}");
    }
    let opts = Options {
        data: Some("pbc".into()),
        ..Options::default()
    };
    let err = board(rows(), &opts).unwrap_err();
    assert_eq!(crate::error::exit_code_for(&err), 2);
    assert!(format!("{err}").contains("did you mean `pcb`"), "{err}");
    // A fingerprint prefix must be long enough not to match by chance.
    let opts = Options {
        data: Some("aa".into()),
        ..Options::default()
    };
    assert!(board(rows(), &opts).is_err());
}

#[test]
fn user_and_since_filter() {
    let mut old = row("old", Some(A), "/d/pcb/data.yaml", Some(0.3));
    old.submitted_at = "2026-11-01T00:00:00Z".parse().unwrap();
    let mut bob = row("bob", Some(A), "/d/pcb/data.yaml", Some(0.3));
    bob.user = "bob".into();
    let rows = vec![old, bob, row("new", Some(A), "/d/pcb/data.yaml", Some(0.3))];
    let opts = Options {
        user: Some("alice".into()),
        since: Some("2026-11-15T00:00:00Z".parse().unwrap()),
        ..Options::default()
    };
    let b = board(rows, &opts).unwrap();
    let ids: Vec<&str> = b.rows().map(|(_, r)| r.id.as_str()).collect();
    assert_eq!(ids, ["new"]);
}

#[test]
fn csv_quotes_hostile_names() {
    let mut r = row("r1", Some(A), "/d/pcb,x/data.yaml", Some(0.3));
    r.name = "a\"b\nc".into();
    let b = board(vec![r], &Options::default()).unwrap();
    let text = render::csv(&b);
    assert!(text.contains("\"a\"\"b\nc\""), "{text}");
    assert!(text.contains("\"/d/pcb,x/data.yaml\""), "{text}");
    assert_eq!(
        text.lines().next().unwrap().split(',').count(),
        render::CSV_HEADERS.len()
    );
}
