use super::*;
use crate::compare::{self, Options, Row};
use crate::report::model::*;
use crate::rundir::results::Epoch;

const HOSTILE: &str = "<script>alert('x')</script>\"&";

fn row(id: &str, map: f64) -> Row {
    Row {
        rank: None,
        id: id.into(),
        run_id: id.into(),
        variant: None,
        name: HOSTILE.into(),
        user: HOSTILE.into(),
        submitted_at: "2026-11-30T10:00:00Z".parse().unwrap(),
        state: "completed".into(),
        train_state: "completed".into(),
        model: Some(format!("{HOSTILE}.yaml")),
        data: Some(format!("/d/{HOSTILE}/data.yaml")),
        fingerprint: Some("fnv128:0123456789abcdef0123456789abcdef".into()),
        params: [("lr0".to_string(), HOSTILE.to_string())].into(),
        imgsz: Some("64".into()),
        epochs_done: 2,
        epochs: Some(2),
        best_epoch: Some(2),
        best_map50_95: Some(map),
        best_map50: Some(map * 1.4),
        precision: Some(0.5),
        recall: Some(0.25),
        train_seconds: Some(75.0),
        slice: Some("gpu:1g.5gb:1".into()),
        slice_index: Some("0".into()),
        slice_hours: Some(0.02),
        gpu_hours: Some(0.02 / 7.0),
        inference_ms: Some(3.5),
        inference_of: Some("onnx".into()),
    }
}

fn epoch(e: u32, m: f64) -> Epoch {
    Epoch {
        epoch: e,
        box_loss: Some(3.0 - m),
        cls_loss: Some(5.0 - m),
        dfl_loss: None,
        precision: Some(m),
        recall: Some(m),
        map50: Some(m * 1.4),
        map50_95: Some(m),
        val_box_loss: Some(4.0),
        time: None,
    }
}

fn report() -> Report {
    let id = format!("run-{HOSTILE}");
    let board = compare::board(
        vec![row(&id, 0.3), row("plain-run/train-1", 0.1)],
        &Options::default(),
    )
    .unwrap();
    Report {
        schema_version: SCHEMA_VERSION,
        generated_at: "2026-11-30T12:00:00+00:00".into(),
        generated_unix: 0,
        filters: Filters {
            user: Some(HOSTILE.into()),
            since: "2026-11-29T12:00:00+00:00".into(),
            window_seconds: 86400,
            ..Filters::default()
        },
        inventory: Some(Inventory {
            nodes: vec![],
            totals: vec![TypeTotal {
                kind: format!("gpu:{HOSTILE}"),
                total: 7,
                allocated: 3,
                free: 4,
                free_usable: 4,
            }],
        }),
        queue: Some(Queue {
            by_type: vec![TypeWait {
                kind: "gpu:1g.5gb".into(),
                running_jobs: 3,
                pending_jobs: 5,
                median_wait_seconds: Some(700),
                wait_buckets: vec![1, 0, 4, 0, 0, 0],
                oldest_pending: None,
            }],
            ..Queue::default()
        }),
        usage: Some(Usage {
            accounting: AccountingState {
                status: AccountingStatus::Ok,
                message: None,
            },
            window_seconds: 86400,
            rows: vec![],
            series: Some(UsageSeries {
                bucket_seconds: 1800,
                buckets: 3,
                by_type: vec![
                    TypeSeries {
                        kind: "gpu:1g.5gb".into(),
                        slices: vec![0.0, 2.5, 1.0],
                    },
                    TypeSeries {
                        kind: format!("gpu:{HOSTILE}"),
                        slices: vec![1.0, 1.0, 0.0],
                    },
                ],
            }),
        }),
        runs: Some(Runs {
            dir: "/x".into(),
            runs: 2,
            by_state: vec![StateCount {
                state: "completed".into(),
                runs: 2,
            }],
            by_run: vec![RunRow {
                run_id: id.clone(),
                name: HOSTILE.into(),
                state: "completed".into(),
                stage: None,
                description: "completed".into(),
            }],
            ..Runs::default()
        }),
        right_sizing: None,
        leaderboard: Some(board),
        curves: vec![Curve {
            id,
            epochs: vec![epoch(1, 0.1), epoch(2, 0.3)],
        }],
        curves_omitted: 0,
        searches: vec![],
        advice: None,
    }
}

#[test]
fn hostile_names_are_escaped_everywhere() {
    let page = render(&report());
    assert!(!page.contains("<script"), "a raw script tag");
    assert!(!page.contains("alert('x')"), "a raw quote");
    assert!(page.contains("&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;&quot;&amp;"));
    // Quoted attributes cannot be closed from inside.
    assert!(!page.contains(&format!("\"{HOSTILE}")));
}

#[test]
fn the_page_fetches_nothing_and_forbids_fetching() {
    let page = render(&report());
    for bad in [
        "http:", "https:", "//", "src=", "href=", "<link", "<img", "@import", "url(",
    ] {
        let hits: Vec<&str> = page.matches(bad).collect();
        // The one `//` allowed is none: the CSS has no comments either.
        assert!(hits.is_empty(), "{bad} in the page");
    }
    assert!(page.contains("Content-Security-Policy\" content=\"default-src 'none'"));
    assert!(page.starts_with("<!DOCTYPE html>"));
    assert!(page.trim_end().ends_with("</html>"));
}

#[test]
fn every_section_and_chart_is_there_with_its_numbers() {
    let page = render(&report());
    for id in [
        "slices",
        "queue-wait",
        "runs-by-state",
        "leaderboard",
        "curves",
    ] {
        assert!(page.contains(&format!("<section id=\"{id}\">")), "{id}");
    }
    let charts = page.matches("role=\"img\"").count();
    // slices over time, slices now, queue wait, runs by state, board bars, 2 curves.
    assert_eq!(charts, 7, "charts");
    let tables = page.matches("<details").count();
    // Every chart but the leaderboard's bars (the board is the table) has one;
    // the two curves of a run share one.
    assert_eq!(tables, 5);
    // The numbers are in the tables, not only in the drawing.
    assert!(page.contains("<td class=\"n\">2.5</td>"));
    assert!(page.contains("<td class=\"n\">0.3</td>"));
    // The leaderboard shows ranks and the dataset's short fingerprint.
    assert!(page.contains("01234567"));
    assert!(page.contains("@media print"));
}

#[test]
fn only_okabe_ito_colours_are_drawn() {
    let page = render(&report());
    for part in page
        .split("fill=\"")
        .skip(1)
        .chain(page.split("stroke=\"").skip(1))
    {
        let colour = &part[..part.find('"').unwrap()];
        if colour == "none" {
            continue;
        }
        assert!(PALETTE.contains(&colour), "{colour} is not in the palette");
    }
}

#[test]
fn an_empty_report_still_renders_with_notes() {
    let mut r = report();
    r.queue = None;
    r.usage = None;
    r.runs = None;
    r.leaderboard = None;
    r.curves.clear();
    r.inventory = None;
    let page = render(&r);
    assert!(page.contains("The runs section was not selected"));
    r.runs = Some(Runs::default());
    let page = render(&r);
    assert!(page.contains("No training runs to compare"));
    assert!(page.contains("No run has finished an epoch yet"));
    assert_eq!(page.matches("role=\"img\"").count(), 0);
}

#[test]
fn axis_tops_are_round() {
    assert_eq!(nice_ceiling(0.7321), 1.0);
    assert_eq!(nice_ceiling(0.11), 0.2);
    assert_eq!(nice_ceiling(2.5), 5.0);
    assert_eq!(nice_ceiling(5.0), 5.0);
    assert_eq!(nice_ceiling(12.0), 20.0);
    assert_eq!(nice_ceiling(0.0), 1.0);
    assert_eq!(nice_ceiling(f64::NAN), 1.0);
}

#[test]
fn times_are_shown_without_nanoseconds() {
    assert_eq!(
        short_time("2026-12-01T14:50:35.580889668+00:00"),
        "2026-12-01 14:50:35 +00:00"
    );
    assert_eq!(short_time("not a time <b>"), "not a time <b>");
    assert!(render(&report()).contains("Made 2026-11-30 12:00:00 +00:00"));
}

#[test]
fn left_out_curves_are_counted_on_the_page() {
    let mut r = report();
    assert!(!render(&r).contains("more are left out"));
    r.curves_omitted = 5;
    assert!(render(&r).contains("5 more are left out"));
}

/// Every attribute value of the page's SVG elements is a finite number where
/// a number goes (`width`, `x`, `y`, `points`, …).
fn numeric_attributes_are_finite(page: &str) {
    for bad in ["inf\"", "NaN", "inf,", ",inf", "-inf"] {
        let at = page.find(&format!("=\"{bad}")).or_else(|| {
            page.match_indices(bad)
                .find(|(i, _)| page[..*i].rfind('<') > page[..*i].rfind('>'))
                .map(|(i, _)| i)
        });
        assert!(
            at.is_none(),
            "{bad:?} inside a tag: …{}…",
            &page[at.unwrap().saturating_sub(120)..(at.unwrap() + 40).min(page.len())]
        );
    }
}

#[test]
fn non_finite_metrics_are_not_drawn() {
    let mut r = report();
    let board = compare::board(
        vec![
            row("run-inf", f64::NEG_INFINITY),
            row("run-nan", f64::NAN),
            row("run-big", f64::INFINITY),
            row("run-ok", 0.4),
        ],
        &Options::default(),
    )
    .unwrap();
    r.leaderboard = Some(board);
    let mut bad = epoch(2, 0.3);
    bad.map50_95 = Some(f64::NAN);
    bad.box_loss = Some(f64::INFINITY);
    r.curves[0].epochs = vec![epoch(1, 0.1), bad, epoch(3, f64::NEG_INFINITY)];
    if let Some(u) = r.usage.as_mut() {
        u.series.as_mut().unwrap().by_type[0].slices = vec![0.0, f64::INFINITY, f64::NAN];
    }
    let page = render(&r);
    numeric_attributes_are_finite(&page);
    // The bar of a non-finite value is missing and says why.
    assert!(page.contains("not a number (-inf)"), "no note for -inf");
    assert!(page.contains("not a number (NaN)"), "no note for NaN");
}

#[test]
fn a_200000_epoch_curve_is_thinned_and_its_table_cut() {
    let mut r = report();
    r.curves[0].epochs = (1..=200_000u32)
        .map(|e| {
            // A slow rise with one spike: thinning must keep the spike.
            let m = if e == 123_457 {
                0.99
            } else {
                f64::from(e) / 400_000.0
            };
            epoch(e, m)
        })
        .collect();
    let t = std::time::Instant::now();
    let page = render(&r);
    let took = t.elapsed();
    assert!(page.len() < 1 << 20, "{} bytes", page.len());
    assert!(took < std::time::Duration::from_secs(5), "{took:?}");
    for line in page.split("<polyline").skip(1) {
        let pts = line
            .split("points=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap();
        assert!(pts.split(' ').count() <= CURVE_POINTS + 1, "{}", pts.len());
    }
    // The spike (0.99) survives thinning: its y is near the chart's top (12 + 0.01 * 154).
    assert!(page.contains(",13.5"), "the spike was thinned away");
    assert!(page.contains("200 of 200000 epochs"));
    assert!(page.contains("<td class=\"n\">200000</td>") || page.contains(">200000<"));
}

#[test]
fn thinning_keeps_extremes_the_last_point_and_short_series() {
    let short: Vec<(f64, f64)> = (0..10).map(|i| (f64::from(i), 1.0)).collect();
    assert_eq!(thin(short.clone()), short);
    let long: Vec<(f64, f64)> = (0..5000)
        .map(|i| {
            (
                f64::from(i),
                if i == 2222 { -5.0 } else { f64::from(i % 7) },
            )
        })
        .collect();
    let t = thin(long);
    assert!(t.len() <= CURVE_POINTS + 1, "{}", t.len());
    assert!(t.contains(&(2222.0, -5.0)));
    assert_eq!(t.last(), Some(&(4999.0, f64::from(4999 % 7))));
    assert!(t.windows(2).all(|w| w[0].0 < w[1].0), "x order kept");
}

/// A search of four trials as tune.py's tell writes `tune/trials.json`:
/// two complete (the second better), one pruned, one failed.
fn search() -> SearchPlot {
    let text = r#"{"objective":"metrics/mAP50-95(B)","direction":"maximize","sampler":"tpe",
        "trials_planned":5,"parallel":2,"best":{"trial":1,"value":0.42},"trials":[
        {"trial":0,"batch":0,"number":0,"params":{"lr0":0.01},"state":"complete","value":0.3,"epochs":4,"best_so_far":0.3},
        {"trial":1,"batch":0,"number":1,"params":{"lr0":0.05},"state":"complete","value":0.42,"epochs":4,"best_so_far":0.42},
        {"trial":2,"batch":1,"number":2,"params":{"lr0":0.0001},"state":"pruned","value":null,"epochs":2,"best_so_far":0.42},
        {"trial":3,"batch":1,"number":3,"params":{"lr0":"<b>"},"state":"fail","value":null,"epochs":0,"best_so_far":0.42}]}"#;
    SearchPlot {
        run_id: format!("search-{HOSTILE}"),
        summary: serde_json::from_str(text).unwrap(),
    }
}

#[test]
fn a_search_is_plotted_per_trial_with_the_best_so_far() {
    let mut r = report();
    let without = render(&r);
    assert!(
        !without.contains("id=\"searches\""),
        "no search, no section"
    );
    r.searches = vec![search()];
    let page = render(&r);
    let section = &page[page.find("<section id=\"searches\">").expect("the section")..];
    let section = &section[..section.find("</section>").unwrap()];
    // One chart: a dot per trial with an objective, a step line of the best.
    assert_eq!(section.matches("role=\"img\"").count(), 1);
    assert_eq!(
        section.matches("<circle class=\"dot\"").count(),
        2,
        "{section}"
    );
    assert!(section.contains("<title>trial 1: 0.42</title>"));
    let line = section
        .split("<polyline")
        .nth(1)
        .and_then(|p| p.split("points=\"").nth(1))
        .and_then(|p| p.split('"').next())
        .expect("the best-so-far line");
    // 0.3 at trial 0, up to 0.42 at trial 1 (a step), held to trial 3.
    assert_eq!(line.split(' ').count(), 5, "{line}");
    // The x axis spans the planned trials (0 to 4).
    assert!(section.contains(">4</text>"), "{section}");
    // The numbers: every trial with its state, escaped.
    assert!(section.contains("<td>pruned</td>") && section.contains("<td>fail</td>"));
    assert!(section.contains("lr0=&lt;b&gt;"));
    assert!(!section.contains("<b>"));
    assert!(section.contains(&esc(&format!("search-{HOSTILE}"))));
    numeric_attributes_are_finite(&page);
    // Nothing told yet: no chart, a note.
    let mut empty = search();
    for t in &mut empty.summary.trials {
        t.value = None;
        t.best_so_far = None;
    }
    r.searches = vec![empty];
    let page = render(&r);
    assert!(page.contains("No trial has given an objective yet."));
}
