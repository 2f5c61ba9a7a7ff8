//! Reading gres.conf: lines of whitespace-separated `Key=Value` pairs.
//!
//! Follows Slurm's reader (`gres.conf(5)`): keys are case-insensitive, `#`
//! starts a comment, a trailing `\` continues a line, values may be
//! double-quoted, `NodeName=` and `File=` take bracketed lists
//! (`node[1-4]`, `/dev/nvidia[0-3]`), and `MultipleFiles=` names several files
//! that form one GRES. `Include` lines are recorded but not followed.

use anyhow::Result;

use super::hostlist;
use crate::error::invalid;
use crate::suggest::did_you_mean;

/// One configuration line (a record).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GresLine {
    /// 1-based number of the line the record starts on.
    pub line: usize,
    /// Expanded `NodeName=`; `None` = every node.
    pub node_names: Option<Vec<String>>,
    pub auto_detect: Option<String>,
    /// `Name=` (`gpu`, `shard`, …); `None` on a line that only sets `AutoDetect`.
    pub name: Option<String>,
    /// `Type=`.
    pub kind: Option<String>,
    /// Expanded `File=` or `MultipleFiles=` paths.
    pub files: Vec<String>,
    /// True when `files` came from `MultipleFiles=` (one GRES), false for `File=` (one per file).
    pub multiple_files: bool,
    pub cores: Option<String>,
    pub count: Option<u64>,
    pub flags: Option<String>,
    pub links: Option<String>,
}

impl GresLine {
    /// True when this record configures `node`.
    pub fn applies_to(&self, node: &str) -> bool {
        self.node_names
            .as_ref()
            .is_none_or(|names| names.iter().any(|n| n == node))
    }

    /// GRES units the record declares: `Count=` when given, else one per
    /// `File=` path, else one for `MultipleFiles=`.
    pub fn units(&self) -> u64 {
        if let Some(c) = self.count {
            c
        } else if self.multiple_files {
            1
        } else {
            self.files.len().max(1) as u64
        }
    }
}

/// A parsed gres.conf.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct GresConf {
    pub lines: Vec<GresLine>,
    /// `(line, path)` of `Include` directives, not followed.
    pub includes: Vec<(usize, String)>,
}

impl GresConf {
    /// Records that configure `node`.
    pub fn for_node<'a>(&'a self, node: &'a str) -> impl Iterator<Item = &'a GresLine> + 'a {
        self.lines.iter().filter(move |l| l.applies_to(node))
    }
}

const KEYS: &[&str] = &[
    "AutoDetect",
    "Count",
    "Cores",
    "CPUs",
    "File",
    "Flags",
    "Links",
    "MultipleFiles",
    "Name",
    "NodeName",
    "Type",
];

/// Parse gres.conf text. `origin` names the file in messages (`gres.conf:12: …`).
pub fn parse(text: &str, origin: &str) -> Result<GresConf> {
    let mut conf = GresConf::default();
    let mut pending = String::new();
    let mut start_line = 0;
    for (i, raw) in text.lines().enumerate() {
        let number = i + 1;
        let content = strip_comment(raw);
        if pending.is_empty() {
            start_line = number;
        }
        if let Some(head) = content.trim_end().strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        pending.push_str(&content);
        let record = std::mem::take(&mut pending);
        if record.trim().is_empty() {
            continue;
        }
        parse_record(&record, start_line, origin, &mut conf)?;
    }
    if !pending.trim().is_empty() {
        parse_record(&pending, start_line, origin, &mut conf)?;
    }
    Ok(conf)
}

/// The line without its comment; `\#` is a literal `#`.
fn strip_comment(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' if chars.peek() == Some(&'#') => {
                out.push('#');
                chars.next();
            }
            '#' => break,
            _ => out.push(c),
        }
    }
    out
}

/// Split a record into words at whitespace outside double quotes.
fn words(record: &str, at: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut quoted = false;
    for c in record.chars() {
        match c {
            '"' => quoted = !quoted,
            c if c.is_whitespace() && !quoted => {
                if !cur.is_empty() {
                    out.push(std::mem::take(&mut cur));
                }
            }
            c => cur.push(c),
        }
    }
    if quoted {
        return Err(invalid(format!("{at}: a double quote is not closed")));
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    Ok(out)
}

fn parse_record(record: &str, line: usize, origin: &str, conf: &mut GresConf) -> Result<()> {
    let at = format!("{origin}:{line}");
    let words = words(record, &at)?;
    if let [first, rest @ ..] = words.as_slice() {
        if first.eq_ignore_ascii_case("include") {
            if rest.len() != 1 {
                return Err(invalid(format!("{at}: `Include` takes one file name")));
            }
            conf.includes.push((line, rest[0].clone()));
            return Ok(());
        }
    }
    let mut rec = GresLine {
        line,
        ..GresLine::default()
    };
    let mut seen: Vec<&str> = Vec::new();
    for word in &words {
        let Some((raw_key, value)) = word.split_once('=') else {
            return Err(invalid(format!(
                "{at}: `{word}` is not Key=Value (keys: {})",
                KEYS.join(", ")
            )));
        };
        let Some(&key) = KEYS.iter().find(|k| k.eq_ignore_ascii_case(raw_key)) else {
            let hint = did_you_mean(raw_key, KEYS.iter().copied());
            return Err(invalid(format!(
                "{at}: unknown key `{raw_key}` (gres.conf keys: {}){hint}",
                KEYS.join(", ")
            )));
        };
        let key = if key == "CPUs" { "Cores" } else { key };
        if seen.contains(&key) {
            return Err(invalid(format!("{at}: `{key}` is given twice")));
        }
        seen.push(key);
        if value.is_empty() {
            return Err(invalid(format!("{at}: `{raw_key}=` has no value")));
        }
        let list =
            |v: &str| hostlist::expand(v).map_err(|e| invalid(format!("{at}: {raw_key}: {e}")));
        match key {
            "NodeName" => rec.node_names = Some(list(value)?),
            "AutoDetect" => rec.auto_detect = Some(value.to_ascii_lowercase()),
            "Name" => rec.name = Some(value.to_string()),
            "Type" => rec.kind = Some(value.to_string()),
            "File" => rec.files = list(value)?,
            "MultipleFiles" => {
                rec.files = list(value)?;
                rec.multiple_files = true;
            }
            "Cores" => rec.cores = Some(value.to_string()),
            "Count" => rec.count = Some(parse_count(value, &at)?),
            "Flags" => rec.flags = Some(value.to_string()),
            "Links" => rec.links = Some(value.to_string()),
            _ => unreachable!("every key in KEYS is handled"),
        }
    }
    if seen.contains(&"File") && seen.contains(&"MultipleFiles") {
        return Err(invalid(format!(
            "{at}: `File` and `MultipleFiles` cannot both be given (gres.conf(5)); use MultipleFiles for MIG devices"
        )));
    }
    if rec.name.is_none() {
        // A line may only set AutoDetect, for all nodes or some.
        let only_autodetect = rec.auto_detect.is_some()
            && seen.iter().all(|k| matches!(*k, "AutoDetect" | "NodeName"));
        if !only_autodetect {
            return Err(invalid(format!("{at}: `Name=` is missing (e.g. Name=gpu)")));
        }
    }
    conf.lines.push(rec);
    Ok(())
}

/// `Count=4`, `Count=2K` (×1024).
fn parse_count(value: &str, at: &str) -> Result<u64> {
    let (digits, factor) = match value.chars().last() {
        Some('k' | 'K') => (&value[..value.len() - 1], 1u64 << 10),
        Some('m' | 'M') => (&value[..value.len() - 1], 1 << 20),
        Some('g' | 'G') => (&value[..value.len() - 1], 1 << 30),
        Some('t' | 'T') => (&value[..value.len() - 1], 1 << 40),
        _ => (value, 1),
    };
    digits
        .parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .ok_or_else(|| invalid(format!("{at}: Count={value} is not a count (e.g. Count=8)")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;

    const SAMPLE: &str = "\
# site gres.conf
AutoDetect=off
NodeName=gpu2 AutoDetect=off Name=gpu Type=a100 File=/dev/nvidia[0-1] Cores=8-15
nodename=gpu2 autodetect=off name=gpu type=nvidia_a100_1g.10gb \\
    MultipleFiles=/dev/nvidia4,/dev/nvidia-caps/nvidia-cap606,/dev/nvidia-caps/nvidia-cap607 Cores=40-47
NodeName=tux[01-03] Name=shard Count=2K File=/dev/nvidia0   # shards
Name=gpu Type=\"weird type\" File=/dev/nvidia9
Include /etc/slurm/gres.d/extra.conf
";

    #[test]
    fn parses_the_forms_sites_use() {
        let conf = parse(SAMPLE, "gres.conf").unwrap();
        assert_eq!(conf.lines.len(), 5);
        assert_eq!(conf.lines[0].auto_detect.as_deref(), Some("off"));
        assert_eq!(conf.lines[0].name, None);
        let whole = &conf.lines[1];
        assert_eq!(whole.line, 3);
        assert_eq!(whole.files, ["/dev/nvidia0", "/dev/nvidia1"]);
        assert_eq!(whole.units(), 2);
        assert_eq!(whole.cores.as_deref(), Some("8-15"));
        let mig = &conf.lines[2];
        assert_eq!(mig.line, 4, "continued lines keep their first line number");
        assert!(mig.multiple_files);
        assert_eq!(mig.files.len(), 3);
        assert_eq!(mig.units(), 1);
        assert_eq!(mig.kind.as_deref(), Some("nvidia_a100_1g.10gb"));
        let shard = &conf.lines[3];
        assert_eq!(shard.count, Some(2048));
        assert!(shard.applies_to("tux02") && !shard.applies_to("tux4"));
        assert_eq!(conf.lines[4].kind.as_deref(), Some("weird type"));
        assert!(conf.lines[4].applies_to("anything"));
        assert_eq!(
            conf.includes,
            [(8, "/etc/slurm/gres.d/extra.conf".to_string())]
        );
        assert_eq!(conf.for_node("gpu2").count(), 4);
    }

    #[test]
    fn mistakes_name_the_line_and_key() {
        for (text, needle) in [
            (
                "Name=gpu Fiel=/dev/nvidia0\n",
                "gres.conf:1: unknown key `Fiel`",
            ),
            ("Name=gpu Fiel=/dev/nvidia0\n", "did you mean `File`?"),
            ("\n\nName=gpu File=/dev/nvidia[0-\n", "gres.conf:3: File:"),
            (
                "Name=gpu File=/dev/a MultipleFiles=/dev/b\n",
                "cannot both be given",
            ),
            ("Name=gpu name=shard\n", "`Name` is given twice"),
            ("Name=shard Count=lots\n", "Count=lots is not a count"),
            ("Type=a100 File=/dev/nvidia0\n", "`Name=` is missing"),
            ("Name=gpu File\n", "`File` is not Key=Value"),
            ("Name=gpu Type=\"a100\n", "not closed"),
            ("Name=gpu File=\n", "has no value"),
        ] {
            let err = parse(text, "gres.conf").unwrap_err();
            assert_eq!(exit_code_for(&err), 2);
            assert!(err.to_string().contains(needle), "{text:?}: {err}");
        }
    }

    #[test]
    fn escaped_hash_and_blank_lines() {
        let conf = parse(
            "\n   \n# only a comment\nName=gpu Type=a\\#b File=/dev/x\n",
            "g",
        )
        .unwrap();
        assert_eq!(conf.lines.len(), 1);
        assert_eq!(conf.lines[0].kind.as_deref(), Some("a#b"));
    }
}
