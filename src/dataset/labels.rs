//! YOLO label files: one object per line, `class cx cy w h` (boxes), `class x1 y1 …`
//! (polygons, segmentation) or `class cx cy w h` + keypoints (pose), with
//! coordinates normalised to [0, 1]. The rules are those of Ultralytics'
//! `verify_image_label` (`ultralytics/data/utils.py`).

/// Ultralytics accepts coordinates this far outside [0, 1] (and clips them).
pub const TOLERANCE: f64 = 0.01;

/// Counts from one label file.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelCounts {
    pub boxes: usize,
    pub polygons: usize,
    /// Instances per class id (length = number of classes).
    pub per_class: Vec<usize>,
}

impl LabelCounts {
    pub fn instances(&self) -> usize {
        self.boxes + self.polygons
    }
}

/// A problem on one line (line 0 = the whole file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LabelProblem {
    pub line: usize,
    /// Ultralytics would drop the image (or train on wrong targets).
    pub error: bool,
    pub message: String,
}

/// Check the text of one label file for a dataset of `nc` classes;
/// `kpt_shape` = (keypoints, dims per keypoint) for pose datasets.
pub fn check(
    text: &str,
    nc: usize,
    kpt_shape: Option<(usize, usize)>,
) -> (LabelCounts, Vec<LabelProblem>) {
    let mut counts = LabelCounts {
        per_class: vec![0; nc],
        ..LabelCounts::default()
    };
    let mut problems = Vec::new();
    let error = |line: usize, message: String| LabelProblem {
        line,
        error: true,
        message,
    };
    let rows = read_rows(text, &mut problems);

    let polygon_file = kpt_shape.is_none() && rows.iter().any(|(_, v)| v.len() > 6);
    if polygon_file {
        if let Some((n, _)) = rows.iter().find(|(_, v)| v.len() == 5) {
            problems.push(error(
                *n,
                "box line in a file of polygon lines: Ultralytics then reads every line as a polygon, and this box as 2 points, which gives a wrong box".into(),
            ));
        }
    }

    let mut seen: Vec<&Vec<f64>> = Vec::new();
    let mut duplicates = 0;
    for (n, v) in &rows {
        let n = *n;
        let kind = match kind_of(v.len(), kpt_shape) {
            Ok(kind) => kind,
            Err(message) => {
                problems.push(error(n, message));
                continue;
            }
        };
        let class = match class_of(v[0], nc) {
            Ok(class) => class,
            Err(message) => {
                problems.push(error(n, message));
                continue;
            }
        };
        match coordinate_warnings(kind, v) {
            Ok(warnings) => problems.extend(warnings.into_iter().map(|message| LabelProblem {
                line: n,
                error: false,
                message: message.into(),
            })),
            Err(message) => {
                problems.push(error(n, message));
                continue;
            }
        }
        if seen.contains(&v) {
            duplicates += 1;
        } else {
            seen.push(v);
        }
        counts.per_class[class] += 1;
        match kind {
            Kind::Polygon => counts.polygons += 1,
            _ => counts.boxes += 1,
        }
    }
    problems.sort_by_key(|p| p.line);
    if duplicates > 0 {
        problems.push(LabelProblem {
            line: 0,
            error: false,
            message: format!(
                "{duplicates} duplicate label line{} (Ultralytics removes duplicates)",
                if duplicates == 1 { "" } else { "s" }
            ),
        });
    }
    (counts, problems)
}

/// The label file's lines as numbers, with their line numbers; a line of
/// spaces or with a token that is no number is a problem instead.
fn read_rows(text: &str, problems: &mut Vec<LabelProblem>) -> Vec<(usize, Vec<f64>)> {
    let mut rows: Vec<(usize, Vec<f64>)> = Vec::new();
    let error = |line: usize, message: String| LabelProblem {
        line,
        error: true,
        message,
    };
    // Ultralytics: text.strip().splitlines(), keeping lines of non-zero length.
    let first_line = text.len() - text.trim_start().len();
    let skipped_lines = text[..first_line].matches('\n').count();
    for (i, line) in text.trim().lines().enumerate() {
        let n = i + 1 + skipped_lines;
        if line.is_empty() {
            continue;
        }
        if line.trim().is_empty() {
            problems.push(error(
                n,
                "a line of only spaces (Ultralytics cannot read this file)".into(),
            ));
            continue;
        }
        let mut values = Vec::new();
        let mut bad = None;
        for token in line.split_whitespace() {
            match token.parse::<f64>() {
                Ok(v) if v.is_finite() => values.push(v),
                _ => {
                    bad = Some(token);
                    break;
                }
            }
        }
        if let Some(token) = bad {
            problems.push(error(n, format!("{token:?} is not a number")));
            continue;
        }
        rows.push((n, values));
    }

    rows
}

/// What a line of `cols` values is (a box, a polygon, a pose label), or why
/// it is none.
fn kind_of(cols: usize, kpt_shape: Option<(usize, usize)>) -> Result<Kind, String> {
    match kpt_shape {
        Some((k, d)) => {
            let want = 5 + k * d;
            if cols != want {
                return Err(format!("{cols} values; a pose label needs {want}: class cx cy w h and {k} keypoints of {d} values (kpt_shape)"));
            }
            Ok(Kind::Pose(d))
        }
        None if cols == 5 => Ok(Kind::Box),
        None if cols == 6 => Err("6 values; expected 5 (class cx cy w h) or a polygon (class and x y pairs). A 6th value is often a confidence score from predictions saved with save_conf".into()),
        None if cols > 6 && (cols - 1) % 2 == 0 => Ok(Kind::Polygon),
        None if cols > 6 => Err(format!(
            "{} coordinates; a polygon needs x y pairs (an even number)",
            cols - 1
        )),
        None => Err(format!(
            "{cols} value{}; expected 5 (class cx cy w h) or a polygon",
            if cols == 1 { "" } else { "s" }
        )),
    }
}

/// The class index a line's first value names, if it is one below `nc`.
fn class_of(class: f64, nc: usize) -> Result<usize, String> {
    if class.fract() != 0.0 || class < 0.0 {
        return Err(format!("class {class} is not a class index (0, 1, 2, …)"));
    }
    let class = class as usize;
    if class >= nc {
        return Err(format!(
            "class {class} is not below the dataset's class count {nc} (classes are 0-{})",
            nc.saturating_sub(1)
        ));
    }
    Ok(class)
}

/// A line's coordinates against [0, 1]: an error past Ultralytics' tolerance;
/// warnings for one clipped within it and for a zero-size box.
fn coordinate_warnings(kind: Kind, v: &[f64]) -> Result<Vec<&'static str>, String> {
    let coords: Vec<f64> = match kind {
        Kind::Pose(3) => v[1..5]
            .iter()
            .copied()
            .chain(v[5..].chunks(3).flat_map(|k| [k[0], k[1]]))
            .collect(),
        _ => v[1..].to_vec(),
    };
    let worst = coords
        .iter()
        .copied()
        .fold(0.0f64, |w, c| w.max(-c).max(c - 1.0));
    if worst > TOLERANCE {
        let bad = coords
            .iter()
            .find(|c| **c < -TOLERANCE || **c > 1.0 + TOLERANCE)
            .copied()
            .unwrap_or(0.0);
        return Err(format!("coordinate {bad} is outside [0, 1]: coordinates must be normalised by the image width and height"));
    }
    let mut warnings = Vec::new();
    if worst > 0.0 {
        warnings.push("a coordinate is slightly outside [0, 1] (within Ultralytics' 1% tolerance; it is clipped)");
    }
    if matches!(kind, Kind::Box | Kind::Pose(_)) && (v[3] <= 0.0 || v[4] <= 0.0) {
        warnings.push("zero-size box (width or height is 0)");
    }
    Ok(warnings)
}

#[derive(Debug, Clone, Copy)]
enum Kind {
    Box,
    Polygon,
    Pose(usize),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn errors(text: &str, nc: usize) -> Vec<(usize, String)> {
        check(text, nc, None)
            .1
            .into_iter()
            .filter(|p| p.error)
            .map(|p| (p.line, p.message))
            .collect()
    }

    #[test]
    fn boxes_and_polygons_are_counted_per_class() {
        let (c, p) = check(
            "0 0.5 0.5 0.2 0.2\n1 0.1 0.1 0.3 0.3\n1 0.2 0.2 0.1 0.1\n",
            2,
            None,
        );
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(
            (c.boxes, c.polygons, c.per_class.clone()),
            (3, 0, vec![1, 2])
        );
        let (c, p) = check("2 0.1 0.1 0.9 0.1 0.5 0.9\n", 3, None);
        assert!(p.is_empty(), "{p:?}");
        assert_eq!((c.polygons, c.instances()), (1, 1));
        // Empty (background) file and trailing blank lines.
        let (c, p) = check("\n\n", 2, None);
        assert_eq!((c.instances(), p.len()), (0, 0));
    }

    #[test]
    fn broken_lines_are_errors_with_their_line() {
        let text = "0 0.5 0.5 0.2 0.2\n5 0.5 0.5 0.2 0.2\n0 0.5 0.5 1.2 0.2\n0 0.5 0.5 0.2\n0 0.5 0.5 0.2 0.2 0.93\nx 0.5 0.5 0.2 0.2\n0.5 0.5 0.5 0.2 0.2\n";
        let e = errors(text, 2);
        let lines: Vec<usize> = e.iter().map(|(l, _)| *l).collect();
        assert_eq!(lines, [2, 3, 4, 5, 6, 7], "{e:#?}");
        assert!(e[0]
            .1
            .contains("class 5 is not below the dataset's class count 2"));
        assert!(e[1].1.contains("outside [0, 1]"));
        assert!(e[3].1.contains("confidence"));
        let e = errors("0 0.1 0.1 0.2 0.2 0.3 0.3 0.4\n", 1);
        assert!(e[0].1.contains("even number"), "{e:?}");
    }

    #[test]
    fn ultralytics_tolerances_and_warnings() {
        let (_, p) = check(
            "0 0.5 0.5 1.005 0.2\n0 0.5 0.5 1.005 0.2\n0 0.5 0.5 0 0.2\n",
            1,
            None,
        );
        assert!(p.iter().all(|p| !p.error), "{p:?}");
        let msgs: Vec<&str> = p.iter().map(|p| p.message.as_str()).collect();
        assert!(msgs.iter().any(|m| m.contains("1% tolerance")));
        assert!(msgs.iter().any(|m| m.contains("zero-size")));
        assert!(msgs.iter().any(|m| m.contains("1 duplicate label line")));
    }

    #[test]
    fn mixed_boxes_and_polygons_are_refused() {
        let e = errors("0 0.5 0.5 0.2 0.2\n0 0.1 0.1 0.9 0.1 0.5 0.9\n", 1);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].0, 1);
    }

    #[test]
    fn pose_labels_need_the_kpt_shape_columns() {
        let ok = "0 0.5 0.5 0.2 0.2 0.1 0.1 2 0.2 0.2 0\n";
        let (c, p) = check(ok, 1, Some((2, 3)));
        assert!(p.is_empty(), "{p:?}");
        assert_eq!(c.boxes, 1);
        let (_, p) = check("0 0.5 0.5 0.2 0.2 0.1 0.1\n", 1, Some((2, 3)));
        assert!(p[0].message.contains("needs 11"), "{p:?}");
    }

    #[test]
    fn whitespace_lines_and_leading_blank_lines_keep_line_numbers() {
        let e = errors("\n\n0 0.5 0.5 0.2 0.2\n   \n9 0.5 0.5 0.2 0.2\n", 2);
        assert_eq!(e.iter().map(|x| x.0).collect::<Vec<_>>(), [4, 5], "{e:?}");
    }
}
