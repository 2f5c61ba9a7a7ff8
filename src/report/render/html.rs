//! `--format html`: one self-contained page. Charts are inline SVG; there is
//! no script, no font, no image and no link to fetch, and a Content Security
//! Policy that forbids them, so the page reads the same offline, in a mail
//! attachment or printed. Colours are the Okabe–Ito palette (safe for the
//! common colour-vision deficiencies), and lines differ by dash pattern too;
//! every chart has its numbers in a `<details>` table under it.
//!
//! Every string from outside (run ids, user and model names, GRES types,
//! Slurm's words) goes through `esc`. Pure: the report in, the page out.

use std::fmt::Write as _;

use crate::compare::render as board_cells;
use crate::report::model::{Curve, Report, WAIT_BUCKETS};

/// Okabe & Ito (2008), "Color Universal Design": blue, orange, bluish
/// green, vermillion, reddish purple, sky blue, yellow, black.
pub const PALETTE: [&str; 8] = [
    "#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
];
const DASHES: [&str; 4] = ["", "6 3", "2 3", "8 3 2 3"];

/// Text safe inside HTML elements and quoted attributes.
pub fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c if c.is_control() && c != '\n' && c != '\t' => out.push('\u{FFFD}'),
            c => out.push(c),
        }
    }
    out
}

const STYLE: &str = "
:root { color-scheme: light; }
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; color: #111;
  margin: 1.5rem auto; max-width: 72rem; padding: 0 1rem; }
h1 { font-size: 1.6rem; margin-bottom: .2rem; }
h2 { font-size: 1.2rem; border-bottom: 1px solid #ccc; padding-bottom: .2rem; margin-top: 2rem; }
h3 { font-size: 1rem; margin: 1rem 0 .3rem; }
.meta, .note { color: #444; }
table { border-collapse: collapse; margin: .4rem 0; font-variant-numeric: tabular-nums; }
th, td { border: 1px solid #bbb; padding: .15rem .45rem; text-align: left; vertical-align: top; }
td.n { text-align: right; }
th { background: #eee; }
.board td, .board th { font-size: 13px; }
svg { max-width: 100%; height: auto; display: block; }
svg text { font: 11px system-ui, sans-serif; fill: #222; }
.axis line, .axis path { stroke: #888; }
.grid line { stroke: #e4e4e4; }
details { margin: .3rem 0 1rem; }
summary { cursor: pointer; color: #0072B2; }
.curves { display: grid; grid-template-columns: repeat(auto-fill, minmax(22rem, 1fr)); gap: 1rem; }
.legend span { display: inline-block; margin-right: 1rem; }
.swatch { display: inline-block; width: 1.6em; height: .7em; margin-right: .3em; vertical-align: middle; }
@media print {
  body { margin: 0; max-width: none; font-size: 11px; }
  details > summary { display: none; }
  details::details-content { content-visibility: visible; display: block; }
  section { break-inside: avoid-page; }
  .curves { display: block; }
  .curves > div { break-inside: avoid; }
  a { color: inherit; text-decoration: none; }
}
";

/// A series to draw: a name and its points.
struct Series<'a> {
    name: &'a str,
    points: Vec<(f64, f64)>,
    /// Points only, no line (a search's trials: each one its own outcome).
    dots: bool,
}

fn fmt_num(v: f64) -> String {
    if v == v.trunc() && v.abs() < 1e9 {
        format!("{v:.0}")
    } else {
        let digits = if v.abs() >= 10.0 { 1 } else { 4 };
        let s = format!("{v:.digits$}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// An RFC 3339 time for people: `2026-12-01 14:50:35 +00:00`; other text as is.
pub fn short_time(t: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(t)
        .map(|d| d.format("%Y-%m-%d %H:%M:%S %:z").to_string())
        .unwrap_or_else(|_| t.to_string())
}

/// The smallest 1, 2 or 5 × 10^k at or above `v` (an axis top); 1 for nothing.
pub fn nice_ceiling(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let step = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * step)
        .find(|c| *c >= v * (1.0 - 1e-12))
        .unwrap_or(10.0 * step)
}

/// The series' finite points: a non-finite value has no place on an axis,
/// so it is not drawn (the numbers table under the chart shows it as it is).
fn drawable<'a>(series: &[Series<'a>]) -> Vec<Series<'a>> {
    series
        .iter()
        .map(|s| Series {
            name: s.name,
            points: s
                .points
                .iter()
                .copied()
                .filter(|(x, y)| x.is_finite() && y.is_finite())
                .collect(),
            dots: s.dots,
        })
        .collect()
}

/// A line chart of the series over a shared x axis; `y_max` fixes the top
/// (mAP is 0–1), else the data's maximum decides.
fn line_chart(
    out: &mut String,
    label: &str,
    x_label: &str,
    series: &[Series],
    y_max: Option<f64>,
    small: bool,
    x_span: Option<(f64, f64)>,
) {
    let (w, h) = if small {
        (380.0, 200.0)
    } else {
        (640.0, 220.0)
    };
    let (left, right, top, bottom) = (48.0, 12.0, 12.0, 34.0);
    let finite = drawable(series);
    let series = finite.as_slice();
    let xs = series.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let (x0, x1) = xs.fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), x| {
        (a.min(x), b.max(x))
    });
    let data_max = series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.1))
        .fold(0.0f64, f64::max);
    let y1 = y_max.unwrap_or_else(|| nice_ceiling(data_max));
    let (x0, x1) = if let Some(span) = x_span {
        span
    } else if x0.is_finite() && x1 > x0 {
        (x0, x1)
    } else if x0.is_finite() {
        (x0 - 1.0, x0 + 1.0)
    } else {
        (0.0, 1.0)
    };
    let px = |x: f64| left + (x - x0) / (x1 - x0) * (w - left - right);
    let py = |y: f64| top + (1.0 - (y / y1).clamp(0.0, 1.0)) * (h - top - bottom);
    let _ = write!(
        out,
        "<svg viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\">",
        esc(label)
    );
    out.push_str("<g class=\"grid\">");
    // 1 and 5 × 10^k split in fives, 2 × 10^k in fours: round tick values.
    let mantissa = y1 / 10f64.powf(y1.log10().floor());
    let parts = if (mantissa - 2.0).abs() < 1e-9 { 4 } else { 5 };
    for i in 0..=parts {
        let y = y1 * f64::from(i) / f64::from(parts);
        let _ = write!(
            out,
            "<line x1=\"{left}\" x2=\"{}\" y1=\"{:.1}\" y2=\"{:.1}\"/><text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\">{}</text>",
            w - right,
            py(y),
            py(y),
            left - 4.0,
            py(y) + 4.0,
            fmt_num(y)
        );
    }
    out.push_str("</g><g class=\"axis\">");
    let _ = write!(
        out,
        "<line x1=\"{left}\" x2=\"{}\" y1=\"{}\" y2=\"{}\"/>",
        w - right,
        h - bottom,
        h - bottom
    );
    // Whole numbers (epochs) get whole ticks when there are few of them.
    let whole = series
        .iter()
        .flat_map(|s| s.points.iter())
        .all(|p| p.0.fract() == 0.0)
        && x1 - x0 <= 12.0;
    let ticks: Vec<f64> = if whole {
        (0..=(x1 - x0) as i64).map(|i| x0 + i as f64).collect()
    } else {
        (0..=4)
            .map(|i| x0 + (x1 - x0) * f64::from(i) / 4.0)
            .collect()
    };
    for x in ticks {
        let _ = write!(
            out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{}</text>",
            px(x),
            h - bottom + 14.0,
            fmt_num(x)
        );
    }
    let _ = write!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">{}</text></g>",
        (left + w - right) / 2.0,
        h - 4.0,
        esc(x_label)
    );
    for (i, s) in series.iter().enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let dash = DASHES[i % DASHES.len()];
        let pts: Vec<String> = s
            .points
            .iter()
            .map(|(x, y)| format!("{:.1},{:.1}", px(*x), py(*y)))
            .collect();
        if s.dots {
            // Each point its own mark, with its numbers as the tooltip.
            for ((x, y), p) in s.points.iter().zip(&pts) {
                let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    out,
                    "<circle class=\"dot\" cx=\"{cx}\" cy=\"{cy}\" r=\"3.5\" fill=\"{colour}\"><title>{} {}: {}</title></circle>",
                    esc(x_label),
                    fmt_num(*x),
                    fmt_num(*y)
                );
            }
            continue;
        }
        let _ = write!(
            out,
            "<polyline class=\"series\" fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" stroke-dasharray=\"{dash}\" points=\"{}\"><title>{}</title></polyline>",
            pts.join(" "),
            esc(s.name)
        );
        if s.points.len() <= 60 {
            for p in &pts {
                let (cx, cy) = p.split_once(',').unwrap_or(("0", "0"));
                let _ = write!(
                    out,
                    "<circle cx=\"{cx}\" cy=\"{cy}\" r=\"2.5\" fill=\"{colour}\"/>"
                );
            }
        }
    }
    out.push_str("</svg>");
    legend(out, series.iter().map(|s| (s.name, s.dots)));
}

fn legend<'a>(out: &mut String, names: impl Iterator<Item = (&'a str, bool)>) {
    out.push_str("<div class=\"legend\">");
    for (i, (n, dots)) in names.enumerate() {
        let colour = PALETTE[i % PALETTE.len()];
        let dash = DASHES[i % DASHES.len()];
        let mark = if dots {
            format!("<circle cx=\"12\" cy=\"5\" r=\"3.5\" fill=\"{colour}\"/>")
        } else {
            format!("<line x1=\"0\" y1=\"5\" x2=\"24\" y2=\"5\" stroke=\"{colour}\" stroke-width=\"3\" stroke-dasharray=\"{dash}\"/>")
        };
        let _ = write!(
            out,
            "<span><svg class=\"swatch\" viewBox=\"0 0 24 10\">{mark}</svg>{}</span>",
            esc(n)
        );
    }
    out.push_str("</div>");
}

/// Horizontal bars, one per category, grouped by series.
fn bar_chart(out: &mut String, label: &str, categories: &[String], series: &[(String, Vec<f64>)]) {
    let per = series.len().max(1) as f64;
    let bar = 14.0;
    let gap = 10.0;
    let left = 150.0;
    let w = 640.0;
    let h = categories.len() as f64 * (per * bar + gap) + 24.0;
    let max = series
        .iter()
        .flat_map(|(_, v)| v.iter().copied())
        .filter(|v| v.is_finite())
        .fold(0.0f64, f64::max)
        .max(1.0);
    let scale = |v: f64| v / max * (w - left - 60.0);
    let _ = write!(
        out,
        "<svg viewBox=\"0 0 {w} {h}\" role=\"img\" aria-label=\"{}\">",
        esc(label)
    );
    for (ci, c) in categories.iter().enumerate() {
        let y0 = 8.0 + ci as f64 * (per * bar + gap);
        // Long labels (run ids) are cut; the whole label is the tooltip.
        let short: String = if c.chars().count() > 24 {
            let tail: String = c
                .chars()
                .rev()
                .take(23)
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .collect();
            format!("…{tail}")
        } else {
            c.clone()
        };
        let _ = write!(
            out,
            "<text x=\"{}\" y=\"{:.1}\" text-anchor=\"end\"><title>{}</title>{}</text>",
            left - 6.0,
            y0 + per * bar / 2.0 + 4.0,
            esc(c),
            esc(&short)
        );
        for (si, (name, values)) in series.iter().enumerate() {
            let raw = values.get(ci).copied().unwrap_or(0.0);
            // A non-finite value (a NaN or infinite metric) gets no bar and says so.
            let (v, label) = if raw.is_finite() {
                (raw.max(0.0), fmt_num(raw))
            } else {
                (0.0, format!("not a number ({raw})"))
            };
            let y = y0 + si as f64 * bar;
            let _ = write!(
                out,
                "<rect class=\"bar\" x=\"{left}\" y=\"{y:.1}\" width=\"{:.1}\" height=\"{}\" fill=\"{}\"><title>{}: {}</title></rect><text x=\"{:.1}\" y=\"{:.1}\">{}</text>",
                scale(v),
                bar - 2.0,
                PALETTE[si % PALETTE.len()],
                esc(name),
                label,
                left + scale(v) + 4.0,
                y + bar - 4.0,
                label
            );
        }
    }
    out.push_str("</svg>");
    if series.len() > 1 {
        // Bars have no dash: the legend shows the colour and the order.
        out.push_str("<div class=\"legend\">");
        for (i, (n, _)) in series.iter().enumerate() {
            let _ = write!(
                out,
                "<span><span class=\"swatch\" style=\"background:{}\"></span>{} ({})</span>",
                PALETTE[i % PALETTE.len()],
                esc(n),
                match i {
                    0 => "top bar".to_string(),
                    n => format!("bar {}", n + 1),
                }
            );
        }
        out.push_str("</div>");
    }
}

/// A table in a `<details>`: the numbers behind a chart.
fn numbers(out: &mut String, caption: &str, headers: &[String], rows: &[Vec<String>], open: bool) {
    let _ = write!(
        out,
        "<details{}><summary>{}</summary>",
        if open { " open" } else { "" },
        esc(caption)
    );
    table(out, "", headers, rows);
    out.push_str("</details>");
}

fn table(out: &mut String, class: &str, headers: &[String], rows: &[Vec<String>]) {
    let _ = write!(out, "<table class=\"{class}\"><thead><tr>");
    for h in headers {
        let _ = write!(out, "<th scope=\"col\">{}</th>", esc(h));
    }
    out.push_str("</tr></thead><tbody>");
    for r in rows {
        out.push_str("<tr>");
        for c in r {
            let numeric = !c.is_empty()
                && c.chars()
                    .all(|ch| ch.is_ascii_digit() || matches!(ch, '.' | '-' | '/' | ':'));
            let _ = write!(
                out,
                "<td{}>{}</td>",
                if numeric { " class=\"n\"" } else { "" },
                esc(c)
            );
        }
        out.push_str("</tr>");
    }
    out.push_str("</tbody></table>");
}

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn section_slices(out: &mut String, r: &Report) {
    out.push_str("<section id=\"slices\"><h2>Slices in use by type</h2>");
    let Some(usage) = &r.usage else {
        out.push_str("<p class=\"note\">The usage section was not selected.</p></section>");
        return;
    };
    match &usage.series {
        Some(series) if !series.by_type.is_empty() => {
            let hours = series.bucket_seconds as f64 / 3600.0;
            let _ = write!(
                out,
                "<p class=\"meta\">Average slices in use per {} since {} (from Slurm accounting).</p>",
                esc(&board_cells::duration(series.bucket_seconds as f64)),
                esc(&short_time(&r.filters.since))
            );
            let lines: Vec<Series> = series
                .by_type
                .iter()
                .map(|t| Series {
                    name: &t.kind,
                    points: t
                        .slices
                        .iter()
                        .enumerate()
                        .map(|(i, v)| ((i as f64 + 0.5) * hours, *v))
                        .collect(),
                    dots: false,
                })
                .collect();
            line_chart(
                out,
                "slices in use by type",
                "hours since the window's start",
                &lines,
                None,
                false,
                Some((0.0, series.buckets as f64 * hours)),
            );
            let mut headers = vec!["hours from start".to_string()];
            headers.extend(series.by_type.iter().map(|t| t.kind.clone()));
            let rows: Vec<Vec<String>> = (0..series.buckets)
                .map(|i| {
                    let mut row = vec![format!("{:.2}", i as f64 * hours)];
                    row.extend(
                        series
                            .by_type
                            .iter()
                            .map(|t| fmt_num(t.slices.get(i).copied().unwrap_or(0.0))),
                    );
                    row
                })
                .collect();
            numbers(
                out,
                "Numbers: slices in use per bucket",
                &headers,
                &rows,
                false,
            );
        }
        _ => {
            let why = usage
                .accounting
                .message
                .clone()
                .unwrap_or_else(|| "no job held a slice in the window".into());
            let _ = write!(
                out,
                "<p class=\"note\">No usage over time: {}</p>",
                esc(&why)
            );
        }
    }
    // What is held now, from the queue (needs no accounting).
    let mut held: std::collections::BTreeMap<&str, u64> = std::collections::BTreeMap::new();
    for row in &usage.rows {
        *held.entry(row.kind.as_str()).or_default() += row.slices_held;
    }
    if let Some(inv) = &r.inventory {
        let cats: Vec<String> = inv.totals.iter().map(|t| t.kind.clone()).collect();
        let alloc: Vec<f64> = inv.totals.iter().map(|t| t.allocated as f64).collect();
        let total: Vec<f64> = inv.totals.iter().map(|t| t.total as f64).collect();
        out.push_str("<h3>Now: allocated and total per type</h3>");
        bar_chart(
            out,
            "slices allocated now by type",
            &cats,
            &[("allocated".into(), alloc), ("total".into(), total)],
        );
        let rows: Vec<Vec<String>> = inv
            .totals
            .iter()
            .map(|t| {
                vec![
                    t.kind.clone(),
                    t.allocated.to_string(),
                    t.free.to_string(),
                    t.total.to_string(),
                    held.get(t.kind.as_str()).copied().unwrap_or(0).to_string(),
                ]
            })
            .collect();
        numbers(
            out,
            "Numbers: slices per type now",
            &strings(&["type", "allocated", "free", "total", "held by listed jobs"]),
            &rows,
            false,
        );
    }
    out.push_str("</section>");
}

fn section_queue(out: &mut String, r: &Report) {
    out.push_str("<section id=\"queue-wait\"><h2>Queue wait by GPU type</h2>");
    let Some(q) = &r.queue else {
        out.push_str("<p class=\"note\">The queue section was not selected.</p></section>");
        return;
    };
    let types: Vec<_> = q
        .by_type
        .iter()
        .filter(|t| t.wait_buckets.iter().any(|n| *n > 0))
        .collect();
    if types.is_empty() {
        out.push_str("<p class=\"note\">No job is waiting now.</p>");
    } else {
        out.push_str(
            "<p class=\"meta\">Pending jobs (array tasks count one each) by how long they have waited.</p>",
        );
        let cats: Vec<String> = WAIT_BUCKETS.iter().map(|(_, l)| l.to_string()).collect();
        let series: Vec<(String, Vec<f64>)> = types
            .iter()
            .map(|t| {
                (
                    t.kind.clone(),
                    t.wait_buckets.iter().map(|n| *n as f64).collect(),
                )
            })
            .collect();
        bar_chart(out, "pending jobs by wait and type", &cats, &series);
    }
    let mut headers = vec![
        "type".to_string(),
        "running".into(),
        "pending".into(),
        "median wait".into(),
    ];
    headers.extend(WAIT_BUCKETS.iter().map(|(_, l)| l.to_string()));
    let rows: Vec<Vec<String>> = q
        .by_type
        .iter()
        .map(|t| {
            let mut row = vec![
                t.kind.clone(),
                t.running_jobs.to_string(),
                t.pending_jobs.to_string(),
                t.median_wait_seconds
                    .map(|s| board_cells::duration(s as f64))
                    .unwrap_or_default(),
            ];
            row.extend(t.wait_buckets.iter().map(u64::to_string));
            row
        })
        .collect();
    numbers(
        out,
        "Numbers: jobs and waits per type",
        &headers,
        &rows,
        types.is_empty(),
    );
    out.push_str("</section>");
}

fn section_runs(out: &mut String, r: &Report) {
    out.push_str("<section id=\"runs-by-state\"><h2>Runs by state</h2>");
    let Some(runs) = &r.runs else {
        out.push_str("<p class=\"note\">The runs section was not selected.</p></section>");
        return;
    };
    if runs.by_state.is_empty() {
        out.push_str("<p class=\"note\">No runs in the index.</p>");
    } else {
        let cats: Vec<String> = runs.by_state.iter().map(|s| s.state.clone()).collect();
        let vals: Vec<f64> = runs.by_state.iter().map(|s| s.runs as f64).collect();
        bar_chart(out, "runs by state", &cats, &[("runs".into(), vals)]);
    }
    let rows: Vec<Vec<String>> = runs
        .by_run
        .iter()
        .map(|x| vec![x.run_id.clone(), x.name.clone(), x.description.clone()])
        .collect();
    numbers(
        out,
        &format!("Numbers: {} runs", runs.runs),
        &strings(&["run", "name", "state"]),
        &rows,
        false,
    );
    out.push_str("</section>");
}

fn section_board(out: &mut String, r: &Report) {
    out.push_str("<section id=\"leaderboard\"><h2>Leaderboard</h2>");
    if r.runs.is_none() {
        out.push_str("<p class=\"note\">The runs section was not selected.</p></section>");
        return;
    }
    let Some(board) = r.leaderboard.as_ref().filter(|b| !b.groups.is_empty()) else {
        out.push_str("<p class=\"note\">No training runs to compare.</p></section>");
        return;
    };
    let _ = write!(
        out,
        "<p class=\"meta\">Ranked by {} within each dataset (the same as <code>yolo-sched compare</code>).</p>",
        esc(board.sort.name())
    );
    for n in &board.notes {
        let _ = write!(out, "<p class=\"note\">{}</p>", esc(n));
    }
    for g in &board.groups {
        let _ = write!(out, "<h3>{}</h3>", esc(&board_cells::dataset_cell(g)));
        let headers = strings(&board_cells::TABLE_HEADERS);
        let rows: Vec<Vec<String>> = g
            .rows
            .iter()
            .map(|row| board_cells::table_row(g, row))
            .collect();
        table(out, "board", &headers, &rows);
        let with_map: Vec<_> = g
            .rows
            .iter()
            .filter(|x| x.best_map50_95.is_some())
            .collect();
        if with_map.len() > 1 {
            let cats: Vec<String> = with_map.iter().map(|x| x.id.clone()).collect();
            let vals: Vec<f64> = with_map
                .iter()
                .map(|x| x.best_map50_95.unwrap_or(0.0))
                .collect();
            bar_chart(
                out,
                "best mAP50-95 per run",
                &cats,
                &[("best mAP50-95".into(), vals)],
            );
        }
    }
    out.push_str("</section>");
}

/// Most points one curve draws: a chart is 380 px wide, so 1,000 points
/// already put several on each pixel column.
pub const CURVE_POINTS: usize = 1000;
/// Most rows of a curve's numbers table.
pub const CURVE_ROWS: usize = 200;

/// `points` (in x order) thinned to at most [`CURVE_POINTS`] + 1: they fall
/// into `CURVE_POINTS / 2` buckets of consecutive points, each keeping its
/// lowest and its highest point (in x order, so a spike stays visible), and
/// the last point is always kept. Fewer points are returned as they are.
pub fn thin(points: Vec<(f64, f64)>) -> Vec<(f64, f64)> {
    if points.len() <= CURVE_POINTS {
        return points;
    }
    let buckets = CURVE_POINTS / 2;
    let per = points.len().div_ceil(buckets);
    let mut out = Vec::with_capacity(CURVE_POINTS + 1);
    for chunk in points.chunks(per) {
        let lo = chunk
            .iter()
            .enumerate()
            .min_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
            .map(|(i, _)| i);
        let hi = chunk
            .iter()
            .enumerate()
            .max_by(|a, b| a.1 .1.total_cmp(&b.1 .1))
            .map(|(i, _)| i);
        let (Some(lo), Some(hi)) = (lo, hi) else {
            continue;
        };
        let (first, second) = if lo <= hi { (lo, hi) } else { (hi, lo) };
        out.push(chunk[first]);
        if second != first {
            out.push(chunk[second]);
        }
    }
    if let (Some(last), Some(kept)) = (points.last(), out.last()) {
        if last != kept {
            out.push(*last);
        }
    }
    out
}

/// The epochs a curve's numbers table lists: all of them up to [`CURVE_ROWS`],
/// else evenly spaced ones, with the first, the best mAP50-95 and the last.
fn table_epochs(epochs: &[crate::rundir::results::Epoch]) -> Vec<&crate::rundir::results::Epoch> {
    if epochs.len() <= CURVE_ROWS {
        return epochs.iter().collect();
    }
    let best = epochs
        .iter()
        .enumerate()
        .filter_map(|(i, e)| e.map50_95.filter(|m| m.is_finite()).map(|m| (i, m)))
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(i, _)| i);
    let step = (epochs.len() - 1) as f64 / (CURVE_ROWS - 2) as f64;
    let mut picked: Vec<usize> = (0..CURVE_ROWS - 1)
        .map(|k| ((k as f64 * step).round() as usize).min(epochs.len() - 1))
        .chain(best)
        .collect();
    picked.sort_unstable();
    picked.dedup();
    picked.into_iter().map(|i| &epochs[i]).collect()
}

fn section_curves(out: &mut String, curves: &[Curve], omitted: u64) {
    out.push_str("<section id=\"curves\"><h2>Training curves</h2>");
    if curves.is_empty() {
        out.push_str("<p class=\"note\">No run has finished an epoch yet.</p></section>");
        return;
    }
    if omitted > 0 {
        let _ = write!(
            out,
            "<p class=\"note\">The best rows of each dataset are drawn; {omitted} more are left out \
             (<code>yolo-sched compare --json</code> and each run's <code>results.csv</code> have them).</p>"
        );
    }
    out.push_str("<div class=\"curves\">");
    for c in curves {
        let _ = write!(out, "<div class=\"curve\"><h3>{}</h3>", esc(&c.id));
        let pick = |f: fn(&crate::rundir::results::Epoch) -> Option<f64>| -> Vec<(f64, f64)> {
            thin(
                c.epochs
                    .iter()
                    .filter_map(|e| f(e).map(|v| (f64::from(e.epoch), v)))
                    .filter(|(_, v)| v.is_finite())
                    .collect(),
            )
        };
        if c.epochs.len() > CURVE_POINTS {
            let _ = write!(
                out,
                "<p class=\"note\">{} epochs: each line is thinned to at most {CURVE_POINTS} points \
                 (the lowest and highest of each run of epochs, and the last).</p>",
                c.epochs.len()
            );
        }
        line_chart(
            out,
            &format!("mAP per epoch of {}", c.id),
            "epoch",
            &[
                Series {
                    name: "mAP50-95",
                    points: pick(|e| e.map50_95),
                    dots: false,
                },
                Series {
                    name: "mAP50",
                    points: pick(|e| e.map50),
                    dots: false,
                },
            ],
            Some(1.0),
            true,
            None,
        );
        line_chart(
            out,
            &format!("loss per epoch of {}", c.id),
            "epoch",
            &[
                Series {
                    name: "train box loss",
                    points: pick(|e| e.box_loss),
                    dots: false,
                },
                Series {
                    name: "train cls loss",
                    points: pick(|e| e.cls_loss),
                    dots: false,
                },
                Series {
                    name: "val box loss",
                    points: pick(|e| e.val_box_loss),
                    dots: false,
                },
            ],
            None,
            true,
            None,
        );
        let cell = |v: Option<f64>| v.map(fmt_num).unwrap_or_default();
        let listed = table_epochs(&c.epochs);
        let rows: Vec<Vec<String>> = listed
            .iter()
            .map(|e| {
                vec![
                    e.epoch.to_string(),
                    cell(e.map50_95),
                    cell(e.map50),
                    cell(e.precision),
                    cell(e.recall),
                    cell(e.box_loss),
                    cell(e.cls_loss),
                    cell(e.val_box_loss),
                ]
            })
            .collect();
        let caption = if listed.len() < c.epochs.len() {
            format!(
                "Numbers: {} of {} epochs (evenly spaced, with the first, the best and the last; \
                 results.csv has every one)",
                listed.len(),
                c.epochs.len()
            )
        } else {
            "Numbers: per epoch".to_string()
        };
        numbers(
            out,
            &caption,
            &strings(&[
                "epoch",
                "mAP50-95",
                "mAP50",
                "P",
                "R",
                "box loss",
                "cls loss",
                "val box loss",
            ]),
            &rows,
            false,
        );
        out.push_str("</div>");
    }
    out.push_str("</div></section>");
}

/// The searches (`[tune]`): per search, each trial's objective as a dot at
/// its number and the best so far as a step line, with the numbers below.
fn section_searches(out: &mut String, searches: &[crate::report::model::SearchPlot]) {
    if searches.is_empty() {
        return;
    }
    out.push_str("<section id=\"searches\"><h2>Hyperparameter searches</h2>");
    out.push_str("<p class=\"meta\">Each trial's objective (its best epoch's value) and the best so far, in the order the trials were numbered; a trial that failed, was stopped early or is still running has no dot (the table says which).</p>");
    for search in searches {
        let s = &search.summary;
        let _ = write!(
            out,
            "<div class=\"search\"><h3>{}</h3><p class=\"meta\">{} of {} trials asked, {} per batch, sampler {}, {} ({}d)</p>",
            esc(&search.run_id),
            s.trials.len(),
            s.trials_planned,
            s.parallel,
            esc(&s.sampler),
            esc(&s.objective),
            esc(&s.direction)
        );
        let dots: Vec<(f64, f64)> = s
            .trials
            .iter()
            .filter_map(|t| t.value.map(|v| (f64::from(t.trial), v)))
            .collect();
        // The best so far as steps: it holds until a better trial.
        let mut steps: Vec<(f64, f64)> = Vec::new();
        for t in &s.trials {
            let Some(b) = t.best_so_far else { continue };
            let x = f64::from(t.trial);
            if let Some(&(_, prev)) = steps.last() {
                if prev != b {
                    steps.push((x, prev));
                }
            }
            steps.push((x, b));
        }
        if dots.is_empty() {
            out.push_str("<p class=\"note\">No trial has given an objective yet.</p>");
        } else {
            line_chart(
                out,
                &format!("{} per trial of {}", s.objective, search.run_id),
                "trial",
                &[
                    Series {
                        name: "objective of the trial",
                        points: dots,
                        dots: true,
                    },
                    Series {
                        name: "best so far",
                        points: steps,
                        dots: false,
                    },
                ],
                None,
                false,
                Some((0.0, f64::from(s.trials_planned.saturating_sub(1).max(1)))),
            );
        }
        let cell = |v: Option<f64>| v.map(fmt_num).unwrap_or_default();
        let rows: Vec<Vec<String>> = s
            .trials
            .iter()
            .map(|t| {
                vec![
                    t.trial.to_string(),
                    t.batch.map(|b| b.to_string()).unwrap_or_default(),
                    t.state.clone(),
                    cell(t.value),
                    cell(t.best_so_far),
                    t.epochs.to_string(),
                    t.params
                        .iter()
                        .map(|(k, v)| format!("{k}={}", crate::run::tune::short_value(v)))
                        .collect::<Vec<_>>()
                        .join(" "),
                ]
            })
            .collect();
        numbers(
            out,
            "Numbers: per trial",
            &strings(&[
                "trial",
                "batch",
                "state",
                "objective",
                "best so far",
                "epochs",
                "arguments",
            ]),
            &rows,
            false,
        );
        out.push_str("</div>");
    }
    out.push_str("</section>");
}

/// The page.
/// The page's head, up to the opening `<body>`: the one style and the policy
/// that forbids fetching anything.
fn head(out: &mut String, title: &str) {
    out.push_str("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">");
    out.push_str("<meta http-equiv=\"Content-Security-Policy\" content=\"default-src 'none'; style-src 'unsafe-inline'; img-src data:\">");
    out.push_str("<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">");
    out.push_str("<meta name=\"generator\" content=\"yolo-sched\">");
    let _ = write!(
        out,
        "<title>{}</title><style>{STYLE}</style></head><body>",
        esc(title)
    );
}

pub fn render(r: &Report) -> String {
    let mut out = String::with_capacity(64 << 10);
    head(&mut out, &format!("yolo-sched report {}", r.generated_at));
    let mut filters = Vec::new();
    for (k, v) in [
        ("partition", &r.filters.partition),
        ("user", &r.filters.user),
        ("account", &r.filters.account),
    ] {
        if let Some(v) = v {
            filters.push(format!("{k} {v}"));
        }
    }
    let _ = write!(
        out,
        "<header><h1>yolo-sched report</h1><p class=\"meta\">Made {} · window since {}{}</p></header><main>",
        esc(&short_time(&r.generated_at)),
        esc(&short_time(&r.filters.since)),
        if filters.is_empty() {
            String::new()
        } else {
            format!(" · {}", esc(&filters.join(", ")))
        }
    );
    section_slices(&mut out, r);
    section_queue(&mut out, r);
    section_advice(&mut out, r);
    section_runs(&mut out, r);
    section_board(&mut out, r);
    section_searches(&mut out, &r.searches);
    section_curves(&mut out, &r.curves, r.curves_omitted);
    out.push_str("</main></body></html>\n");
    out
}

/// The layout advice, where accounting answered: last week's waits
/// measured, simulated as cut now and as advised, and each node's verdict.
fn section_advice(out: &mut String, r: &Report) {
    let Some(a) = &r.advice else { return };
    out.push_str("<section id=\"advice\"><h2>Layout advice (last week)</h2>");
    if let Some(e) = &a.error {
        let _ = write!(
            out,
            "<p class=\"note\">No layout advice: {}</p></section>",
            esc(e)
        );
        return;
    }
    let _ = write!(
        out,
        "<p class=\"meta\">{} typed GPU jobs; {} waited over a minute ({} GPU-hours). `yolo-sched advise` prints the plan.</p>",
        a.jobs,
        a.jobs_waited,
        fmt_num(a.waited_gpu_hours)
    );
    let cats = strings(&["measured", "simulated, as cut now", "simulated, as advised"]);
    let h = |s: f64| s / 3600.0;
    bar_chart(
        out,
        "mean wait in hours",
        &cats,
        &[(
            "mean wait (h)".to_string(),
            vec![
                h(a.measured_mean_wait_s),
                h(a.predicted_mean_wait_s),
                h(a.advised_mean_wait_s),
            ],
        )],
    );
    let rows: Vec<Vec<String>> = a
        .nodes
        .iter()
        .map(|n| {
            vec![
                n.node.clone(),
                if n.advised { "yes" } else { "re-cut" }.to_string(),
                n.now.clone(),
                n.advised_layout.clone(),
            ]
        })
        .collect();
    table(
        out,
        "",
        &strings(&["node", "as advised", "GPUs now", "GPUs as advised"]),
        &rows,
    );
    out.push_str("</section>");
}

/// `yolo-sched advise --format html`: the waits of each set-up as bars, the
/// set-ups' numbers, and which node gets which layout, in the order to apply.
pub fn advice_page(r: &crate::advise::Report) -> String {
    let mut out = String::with_capacity(16 << 10);
    head(&mut out, "yolo-sched layout advice");
    let _ = write!(
        out,
        "<header><h1>yolo-sched layout advice</h1><p class=\"meta\">{} typed GPU jobs from {} to {}{}</p></header><main>",
        r.counted.jobs,
        esc(&r.since.format("%Y-%m-%d %H:%M").to_string()),
        esc(&r.until.format("%Y-%m-%d %H:%M").to_string()),
        r.partition
            .as_deref()
            .map(|p| format!(" in partition {}", esc(p)))
            .unwrap_or_default()
    );
    if !r.warnings.is_empty() {
        out.push_str("<section id=\"warnings\"><h2>Warnings</h2><ul>");
        for w in &r.warnings {
            let _ = write!(out, "<li>{}</li>", esc(w));
        }
        out.push_str("</ul></section>");
    }
    out.push_str("<section id=\"waits\"><h2>Waits per set-up (simulated)</h2>");
    let cats: Vec<String> = r.advice.setups.iter().map(|s| s.name.clone()).collect();
    let h = |s: f64| s / 3600.0;
    bar_chart(
        &mut out,
        "wait per set-up in hours",
        &cats,
        &[
            (
                "mean wait (h)".to_string(),
                r.advice
                    .setups
                    .iter()
                    .map(|s| h(s.outcome.mean_wait_s))
                    .collect(),
            ),
            (
                "p95 wait (h)".to_string(),
                r.advice
                    .setups
                    .iter()
                    .map(|s| h(s.outcome.p95_wait_s as f64))
                    .collect(),
            ),
        ],
    );
    let rows: Vec<Vec<String>> = r
        .advice
        .setups
        .iter()
        .map(|s| {
            let o = &s.outcome;
            vec![
                s.name.clone(),
                (o.jobs - o.never_run).to_string(),
                o.never_run.to_string(),
                format!("{:.2}", h(o.mean_wait_s)),
                format!("{:.2}", h(o.p95_wait_s as f64)),
                o.peak_concurrent.to_string(),
                format!("{:.1}", o.mean_concurrent),
                format!("{:.1}/{:.1}", o.gpu_hours_used, o.gpu_hours_offered),
            ]
        })
        .collect();
    numbers(
        &mut out,
        "The numbers",
        &strings(&[
            "set-up",
            "jobs run",
            "never run",
            "mean wait (h)",
            "p95 wait (h)",
            "peak jobs",
            "mean jobs",
            "GPU-h held/offered",
        ]),
        &rows,
        true,
    );
    advice_needs(&mut out, r);
    advice_plan(&mut out, r);
    out.push_str("</section></main></body></html>\n");
    out
}

/// The advice page's needs section: where the needs came from, and the
/// jobs that asked for more than they used.
fn advice_needs(out: &mut String, r: &crate::advise::Report) {
    out.push_str("</section><section id=\"needs\"><h2>What the jobs needed</h2>");
    let _ = write!(
        out,
        "<p class=\"meta\">{}</p>",
        esc(&super::tables::need_note(&r.needs))
    );
    if !r.rightsizing.is_empty() {
        let rows: Vec<Vec<String>> = r
            .rightsizing
            .iter()
            .map(|o| {
                vec![
                    o.by.to_string(),
                    o.name.clone(),
                    format!("{} of {}", o.jobs, o.measured_jobs),
                    format!("{:.1}", o.gpu_hours_asked),
                    format!("{:.1}", o.gpu_hours_fit),
                    o.moves
                        .iter()
                        .map(|(m, n)| format!("{m} ×{n}"))
                        .collect::<Vec<_>>()
                        .join(", "),
                    format!("{:.2}", o.waited_h),
                    format!("{:.2}", o.predicted_wait_h),
                    format!("{:.2}", o.wait_saved_h),
                ]
            })
            .collect();
        out.push_str("<h3>Jobs that asked for more than they used, per user and account</h3>");
        table(
            out,
            "",
            &strings(&[
                "by",
                "name",
                "jobs",
                "GPU-h asked",
                "GPU-h fit",
                "asked → fits",
                "waited (h)",
                "predicted (h)",
                "saved (h)",
            ]),
            &rows,
        );
    }
}

/// The advice page's plan: the steps, node by node, or why there are none.
fn advice_plan(out: &mut String, r: &crate::advise::Report) {
    let h = |s: f64| s / 3600.0;
    out.push_str("</section><section id=\"plan\"><h2>The plan</h2>");
    if r.advice.steps.is_empty() {
        out.push_str("<p class=\"note\">No change of layout would run more of these jobs or shorten their mean wait by a minute or more: nothing to change.</p>");
    } else {
        let rows: Vec<Vec<String>> = r
            .advice
            .steps
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let now = r
                    .nodes
                    .iter()
                    .find(|n| n.name == s.node)
                    .map(|n| n.layout_words().join("; "))
                    .unwrap_or_default();
                vec![
                    (i + 1).to_string(),
                    s.node.clone(),
                    now,
                    s.gpus.join("; "),
                    format!("{:.2}", h(s.after.mean_wait_s)),
                    s.after.never_run.to_string(),
                ]
            })
            .collect();
        table(
            out,
            "",
            &strings(&[
                "step",
                "node",
                "GPUs now",
                "GPUs after",
                "mean wait after (h)",
                "never run after",
            ]),
            &rows,
        );
        out.push_str("<p class=\"meta\">On each node in turn: <code>yolo-sched node-setup --apply --layout auto --demand FILE</code> (FILE from <code>advise --demand-out</code>).</p>");
    }
}

#[cfg(test)]
mod tests;
