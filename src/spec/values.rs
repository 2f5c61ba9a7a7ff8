//! Checks of single spec values: Slurm times, memory sizes, GPU requests, names,
//! paths. Each returns the parsed value or a `Problem` (message + optional help).

use super::types::{GpuRequest, MemSize, PathPart, PathTemplate, SlurmTime};

/// What is wrong with a value, and what to write instead when we can tell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub message: String,
    pub help: Option<String>,
}

impl Problem {
    pub fn new(message: impl Into<String>) -> Self {
        Problem {
            message: message.into(),
            help: None,
        }
    }

    pub fn help(mut self, help: impl Into<String>) -> Self {
        self.help = Some(help.into());
        self
    }
}

type Checked<T> = Result<T, Problem>;

/// Longest run name: it becomes part of Slurm job names and directory names.
pub const MAX_RUN_NAME: usize = 64;

/// Strings that end up in generated scripts or Slurm arguments may hold no
/// control characters (a newline would end a `#SBATCH` line or a command).
pub fn check_no_control(s: &str) -> Checked<()> {
    match s.chars().find(|c| c.is_control()) {
        Some(c) => Err(Problem::new(format!(
            "contains the control character {c:?}; only printable characters are allowed here"
        ))),
        None => Ok(()),
    }
}

/// A `[run] setup` line: shell by design, kept verbatim, but one line each.
pub fn check_setup_line(s: &str) -> Checked<()> {
    if s.contains(['\n', '\r']) {
        return Err(Problem::new("a setup entry must be one line")
            .help("split it into several entries of the `setup` list, one command each"));
    }
    match s.chars().find(|c| c.is_control() && *c != '\t') {
        Some(c) => Err(Problem::new(format!(
            "contains the control character {c:?}; setup lines may hold printable characters and tabs"
        ))),
        None => Ok(()),
    }
}

/// `[run] name`: letters, digits, '.', '_', '-', 1..=64 characters, not starting with
/// '.' or '-' (it names a directory and appears as a command-line word).
pub fn check_run_name(s: &str) -> Checked<()> {
    let expected =
        "a run name: 1 to 64 letters, digits, '.', '_' or '-', not starting with '.' or '-'";
    if s.is_empty() {
        return Err(Problem::new(format!("is empty; expected {expected}")));
    }
    if s.chars().count() > MAX_RUN_NAME {
        let short: String = s.chars().take(MAX_RUN_NAME).collect();
        return Err(Problem::new(format!(
            "is {} characters long; expected {expected}",
            s.chars().count()
        ))
        .help(format!("shorten it, e.g. \"{short}\"")));
    }
    if let Some(c) = s
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')))
    {
        let fixed: String = s
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                    c
                } else {
                    '-'
                }
            })
            .collect();
        let fixed = fixed.trim_start_matches(['.', '-']);
        let mut p = Problem::new(format!("contains {c:?}; expected {expected}"));
        if !fixed.is_empty() {
            p = p.help(format!("use \"{fixed}\""));
        }
        return Err(p);
    }
    if s.starts_with(['.', '-']) {
        return Err(Problem::new(format!(
            "starts with {:?}; expected {expected}",
            &s[..1]
        )));
    }
    Ok(())
}

/// Slurm account, QOS or partition names. Partitions may be a comma list.
pub fn check_slurm_name(s: &str, allow_list: bool) -> Checked<()> {
    let ok_char = |c: char| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.');
    let items: Vec<&str> = if allow_list {
        s.split(',').collect()
    } else {
        vec![s]
    };
    for item in items {
        if item.is_empty() {
            return Err(Problem::new(if allow_list {
                "has an empty name; expected Slurm names separated by ','"
            } else {
                "is empty; expected a Slurm name"
            }));
        }
        if let Some(c) = item.chars().find(|c| !ok_char(*c)) {
            return Err(Problem::new(format!(
                "contains {c:?}; expected a Slurm name of letters, digits, '_', '-' or '.'{}",
                if allow_list {
                    " (several separated by ',')"
                } else {
                    ""
                }
            )));
        }
    }
    Ok(())
}

/// A Slurm `--time` value in one of Slurm's formats (`slurm::time::parse_duration`).
pub fn parse_slurm_time(s: &str) -> Checked<SlurmTime> {
    let seconds = crate::slurm::time::parse_duration(s).map_err(|e| Problem {
        message: e.message,
        help: e.help,
    })?;
    Ok(SlurmTime {
        text: s.to_string(),
        seconds,
    })
}

/// A Slurm `--mem` value: a positive number with an optional K, M, G or T suffix
/// (Slurm's default unit is megabytes).
pub fn parse_mem(s: &str) -> Checked<MemSize> {
    let expected = "a Slurm memory size: a number with an optional K, M, G or T suffix (e.g. \"32G\", \"500M\")";
    let digits: String = s.chars().take_while(|c| c.is_ascii_digit()).collect();
    let suffix = &s[digits.len()..];
    let suggestion = || {
        let unit = suffix
            .trim()
            .trim_end_matches(['b', 'B', 'i'])
            .to_ascii_uppercase();
        if !digits.is_empty() && matches!(unit.as_str(), "K" | "M" | "G" | "T") {
            Some(format!("write \"{digits}{unit}\""))
        } else {
            None
        }
    };
    let bad = |why: &str| {
        let mut p = Problem::new(format!("{s:?} {why}; expected {expected}"));
        if let Some(h) = suggestion() {
            p = p.help(h);
        }
        p
    };
    if digits.is_empty() || digits.len() > 12 {
        return Err(bad("is not a size"));
    }
    let n: u64 = digits.parse().map_err(|_| bad("is not a size"))?;
    let mib = match suffix {
        "" | "M" | "m" => Some(n),
        "K" | "k" => Some(n.div_ceil(1024)),
        "G" | "g" => n.checked_mul(1024),
        "T" | "t" => n.checked_mul(1024 * 1024),
        _ => return Err(bad("has an unknown unit")),
    }
    .ok_or_else(|| bad("is too large"))?;
    if n == 0 {
        return Err(Problem::new(format!(
            "{s:?} is zero; Slurm reads --mem=0 as \"all memory of the node\", which a shared cluster should not hand out"
        ))
        .help("ask for what the stage needs, e.g. \"16G\""));
    }
    Ok(MemSize {
        text: s.to_string(),
        mebibytes: mib,
    })
}

/// The most whole GPUs of one node a training may ask for; more is certainly a typo
/// (the cluster's own nodes are checked by the planner).
pub const MAX_GPUS: u32 = 64;

/// `gpu` of a stage that runs on one device (`[stages.val] gpu`): as
/// `parse_gpu_count`, but a count above one is refused: `yolo val` uses one device.
pub fn parse_gpu(s: &str) -> Checked<GpuRequest> {
    let (gpu, count) = parse_gpu_count(s)?;
    if count > 1 {
        let shown = crate::text::clip(s);
        let name = s.split_once(':').map_or(s, |(n, _)| n);
        let name_shown = crate::text::clip(name);
        return Err(Problem::new(format!(
            "{shown:?} asks for {count} GPUs, but `yolo val` runs on one device (device=0); the others would sit idle"
        ))
        .help(format!("write \"{name_shown}\"")));
    }
    Ok(gpu)
}

/// `[resources] gpu`: "auto" | a MIG profile ("1g.5gb") | a GPU type with an
/// optional count of whole GPUs of one node ("a100", "h100:4") | "shard:N" |
/// "none". The count is 1 unless written; on a MIG profile it is refused (one
/// CUDA process sees one MIG device).
pub fn parse_gpu_count(s: &str) -> Checked<(GpuRequest, u32)> {
    let expected = "\"auto\", a MIG profile such as \"1g.5gb\", a GPU type such as \"a100\" or \"h100:4\", \"shard:N\" or \"none\"";
    // Every echo of the value is cut (issue 32, item 11): a 10 kB value is
    // not a 10 kB message.
    let shown = crate::text::clip(s);
    let lower = s.to_ascii_lowercase();
    if s == "auto" || s == "none" {
        return Ok((
            if s == "auto" {
                GpuRequest::Auto
            } else {
                GpuRequest::None
            },
            1,
        ));
    }
    if lower == "auto" || lower == "none" {
        return Err(
            Problem::new(format!("{shown:?} is not {expected}")).help(format!("write \"{lower}\""))
        );
    }
    if let Some(rest) = s.strip_prefix("gpu:") {
        let rest_shown = crate::text::clip(rest);
        return Err(
            Problem::new(format!("{shown:?} is a GRES string; expected {expected}")).help(format!(
                "write \"{rest_shown}\" (yolo-sched adds the gpu: prefix)"
            )),
        );
    }
    if lower == "shard" {
        return Err(Problem::new(format!(
            "{shown:?} has no shard count; expected \"shard:N\""
        ))
        .help("write \"shard:1\""));
    }
    if let Some(n) = s.strip_prefix("shard:") {
        let digits = !n.is_empty() && n.len() <= 6 && n.bytes().all(|b| b.is_ascii_digit());
        return match n.parse::<u32>() {
            Ok(n) if digits && n >= 1 => Ok((GpuRequest::Shard(n), 1)),
            _ => Err(Problem::new(format!(
                "{shown:?}: the shard count must be a whole number ≥ 1, as in \"shard:2\""
            ))),
        };
    }
    let (name, count) = match s.split_once(':') {
        Some((name, count)) => (name, Some(count)),
        None => (s, None),
    };
    let is_mig = is_mig_profile(name);
    if !is_mig && !is_gpu_type(name) {
        let mut p = Problem::new(format!("{shown:?} is not {expected}"));
        if let Some(fixed) = mig_suggestion(name).filter(|f| f.len() <= 64) {
            p = p.help(format!("did you mean \"{fixed}\"?"));
        }
        return Err(p);
    }
    let digits = |c: &str| !c.is_empty() && c.len() <= 6 && c.bytes().all(|b| b.is_ascii_digit());
    let count = match count {
        None => 1,
        Some(c) if digits(c) && c.parse::<u32>().is_ok_and(|c| c >= 1) => {
            c.parse::<u32>().unwrap_or(1)
        }
        Some(c) => {
            let c_shown = crate::text::clip(c);
            return Err(Problem::new(format!(
                "{shown:?}: {c_shown:?} is not a device count; expected {expected}"
            )));
        }
    };
    let name_shown = crate::text::clip(name);
    if is_mig && count > 1 {
        return Err(Problem::new(format!(
            "{shown:?} asks for {count} MIG slices, but one CUDA process sees only one MIG device, so training could use only one of them (several GPUs means whole GPUs, as in \"a100:{count}\")"
        ))
        .help(format!(
            "ask for one larger slice instead (e.g. a profile with more memory than \"{name_shown}\"), or gpu = \"auto\""
        )));
    }
    if count > MAX_GPUS {
        return Err(Problem::new(format!(
            "{shown:?} asks for {count} GPUs; expected at most {MAX_GPUS} GPUs of one node"
        ))
        .help(
            "Ultralytics trains on the GPUs of one node; ask for at most as many as a node has",
        ));
    }
    Ok((
        if is_mig {
            GpuRequest::Mig(name.to_string())
        } else {
            GpuRequest::Type(name.to_string())
        },
        count,
    ))
}

/// A MIG profile name (`mig::profile::ProfileName`: `<n>g.<m>gb` and
/// NVIDIA's attribute suffixes).
pub fn is_mig_profile(s: &str) -> bool {
    crate::mig::profile::ProfileName::parse(s).is_some()
}

/// A Slurm GRES type name for a whole GPU: starts with a letter.
fn is_gpu_type(s: &str) -> bool {
    s.len() <= 64
        && s.starts_with(|c: char| c.is_ascii_alphabetic())
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
}

/// "1g5gb", "1g.5", "1g-5gb", "1G.5GB" → "1g.5gb".
fn mig_suggestion(s: &str) -> Option<String> {
    let lower = s.to_ascii_lowercase();
    let g_at = lower.find('g')?;
    let (g, rest) = lower.split_at(g_at);
    if g.is_empty() || !g.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let mem: String = rest[1..]
        .trim_start_matches(['.', '-', '_'])
        .trim_end_matches("gb")
        .trim_end_matches('g')
        .to_string();
    if !mem.is_empty() && mem.bytes().all(|b| b.is_ascii_digit()) {
        Some(format!("{g}g.{mem}gb"))
    } else {
        None
    }
}

/// A path that may use `$NAME`/`${NAME}`. Other shell syntax (`~`, backquotes,
/// `$(`…) is refused: the path is never given to a shell unquoted.
pub fn parse_path_template(s: &str) -> Checked<PathTemplate> {
    if s.is_empty() {
        return Err(Problem::new("is empty; expected a path"));
    }
    check_no_control(s)?;
    if let Some(rest) = s.strip_prefix('~') {
        return Err(Problem::new(format!(
            "{s:?} starts with '~', which yolo-sched does not expand"
        ))
        .help(format!("write \"$HOME{rest}\"")));
    }
    if s.contains('`') {
        return Err(Problem::new(format!(
            "{s:?} contains '`'; only $NAME and ${{NAME}} variables are expanded in paths"
        )));
    }
    let mut parts = Vec::new();
    let mut literal = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('$') {
        literal.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        let (name, consumed) = if let Some(inner) = after.strip_prefix('{') {
            match inner.find('}') {
                Some(end) => (&inner[..end], end + 2),
                None => {
                    return Err(Problem::new(format!("{s:?} has an unclosed \"${{\"")));
                }
            }
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let valid = name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
        if !valid {
            return Err(Problem::new(format!(
                "{s:?} has a '$' that is not a variable; only $NAME and ${{NAME}} are expanded in paths"
            )));
        }
        if !literal.is_empty() {
            parts.push(PathPart::Literal(std::mem::take(&mut literal)));
        }
        parts.push(PathPart::Var(name.to_string()));
        rest = &after[consumed..];
    }
    literal.push_str(rest);
    if !literal.is_empty() {
        parts.push(PathPart::Literal(literal));
    }
    Ok(PathTemplate::from_parts(s.to_string(), parts))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slurm_time_formats() {
        let secs = |s| parse_slurm_time(s).map(|t| t.seconds);
        assert_eq!(secs("30"), Ok(1800));
        assert_eq!(secs("30:15"), Ok(1815));
        assert_eq!(secs("08:00:00"), Ok(8 * 3600));
        assert_eq!(secs("48:00:00"), Ok(48 * 3600));
        assert_eq!(secs("2-12"), Ok(2 * 86400 + 12 * 3600));
        assert_eq!(secs("1-02:30"), Ok(86400 + 2 * 3600 + 1800));
        assert_eq!(secs("1-00:00:01"), Ok(86401));
        for bad in [
            "", "8h", "1:60", "1:2:3:4", "1-24", "-1", "a", "1-", "0", "00:00:00", "1:99:00",
        ] {
            assert!(parse_slurm_time(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_slurm_time("8h").unwrap_err().help.as_deref(),
            Some("write \"08:00:00\"")
        );
        assert_eq!(
            parse_slurm_time("2 days").unwrap_err().help.as_deref(),
            Some("write \"2-00:00:00\"")
        );
    }

    #[test]
    fn memory_sizes() {
        let mib = |s| parse_mem(s).map(|m| m.mebibytes);
        assert_eq!(mib("32G"), Ok(32768));
        assert_eq!(mib("500M"), Ok(500));
        assert_eq!(mib("1T"), Ok(1 << 20));
        assert_eq!(mib("1000"), Ok(1000));
        assert_eq!(mib("2048K"), Ok(2));
        assert_eq!(mib("16g"), Ok(16384));
        assert!(parse_mem("0").is_err());
        assert!(parse_mem("lots").is_err());
        assert!(parse_mem("99999999999999999999G").is_err());
        assert_eq!(
            parse_mem("32GB").unwrap_err().help.as_deref(),
            Some("write \"32G\"")
        );
        assert_eq!(
            parse_mem("8 GiB").unwrap_err().help.as_deref(),
            Some("write \"8G\"")
        );
    }

    #[test]
    fn gpu_requests() {
        assert_eq!(parse_gpu("auto"), Ok(GpuRequest::Auto));
        assert_eq!(parse_gpu("none"), Ok(GpuRequest::None));
        assert_eq!(parse_gpu("1g.5gb"), Ok(GpuRequest::Mig("1g.5gb".into())));
        assert_eq!(
            parse_gpu("1g.10gb+me"),
            Ok(GpuRequest::Mig("1g.10gb+me".into()))
        );
        assert_eq!(
            parse_gpu("3g.40gb:1"),
            Ok(GpuRequest::Mig("3g.40gb".into()))
        );
        assert_eq!(parse_gpu("a100"), Ok(GpuRequest::Type("a100".into())));
        assert_eq!(parse_gpu("shard:4"), Ok(GpuRequest::Shard(4)));
        let mig2 = parse_gpu("1g.5gb:2").unwrap_err();
        assert!(
            mig2.message
                .contains("one CUDA process sees only one MIG device"),
            "{mig2:?}"
        );
        assert!(parse_gpu("a100:2")
            .unwrap_err()
            .message
            .contains("`yolo val` runs on one device"));
        assert_eq!(
            parse_gpu_count("h100:4"),
            Ok((GpuRequest::Type("h100".into()), 4))
        );
        assert_eq!(
            parse_gpu_count("a100"),
            Ok((GpuRequest::Type("a100".into()), 1))
        );
        let mig = parse_gpu_count("2g.10gb:2").unwrap_err();
        assert!(
            mig.message
                .contains("one CUDA process sees only one MIG device"),
            "{mig:?}"
        );
        assert!(parse_gpu_count("a100:0").is_err());
        assert!(parse_gpu_count("a100:-2").is_err());
        assert!(parse_gpu_count("a100:65")
            .unwrap_err()
            .message
            .contains("at most 64"));
        assert!(parse_gpu_count("a100:4x").is_err());
        assert!(parse_gpu("shard:0").is_err());
        assert!(parse_gpu("shard:x").is_err());
        assert_eq!(
            parse_gpu("1g5gb").unwrap_err().help.as_deref(),
            Some("did you mean \"1g.5gb\"?")
        );
        assert_eq!(
            parse_gpu("Auto").unwrap_err().help.as_deref(),
            Some("write \"auto\"")
        );
        assert_eq!(
            parse_gpu("gpu:a100").unwrap_err().help.as_deref(),
            Some("write \"a100\" (yolo-sched adds the gpu: prefix)")
        );
        assert!(parse_gpu("").is_err());
        assert!(parse_gpu("a100; rm").is_err());
    }

    #[test]
    fn run_names() {
        assert!(check_run_name("pcb-defects_v2.1").is_ok());
        assert!(check_run_name(&"a".repeat(64)).is_ok());
        assert!(check_run_name(&"a".repeat(65)).is_err());
        assert!(check_run_name("").is_err());
        assert!(check_run_name("..").is_err());
        assert!(check_run_name("-x").is_err());
        let p = check_run_name("x; touch /tmp/pwned").unwrap_err();
        assert_eq!(p.help.as_deref(), Some("use \"x--touch--tmp-pwned\""));
    }

    #[test]
    fn path_templates_expand_only_variables() {
        let t = parse_path_template("/local/ssd/$USER/${SLURM_JOB_ID}x").unwrap();
        assert_eq!(
            t.parts(),
            &[
                PathPart::Literal("/local/ssd/".into()),
                PathPart::Var("USER".into()),
                PathPart::Literal("/".into()),
                PathPart::Var("SLURM_JOB_ID".into()),
                PathPart::Literal("x".into()),
            ]
        );
        let look = |n: &str| match n {
            "USER" => Some("ann".to_string()),
            "SLURM_JOB_ID" => Some("7".to_string()),
            _ => None,
        };
        assert_eq!(t.expand(look).unwrap(), "/local/ssd/ann/7x");
        assert_eq!(
            t.shell_word(),
            "/local/ssd/\"${USER:?is not set (a spec path uses it)}\"/\"${SLURM_JOB_ID:?is not set (a spec path uses it)}\"x"
        );
        assert_eq!(
            parse_path_template("/x/$NOPE").unwrap().expand(look),
            Err("NOPE".into())
        );
        for bad in ["$(id)", "/a/`id`", "~/x", "/a/${USER", "/a/$", "/a/$1", ""] {
            assert!(parse_path_template(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_path_template("~/ds").unwrap_err().help.as_deref(),
            Some("write \"$HOME/ds\"")
        );
    }

    #[test]
    fn the_shell_expands_a_template_word_to_exactly_the_path() {
        let t = parse_path_template("/tmp/a b'c/$HOME/;x").unwrap();
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s' {}", t.shell_word()))
            .env("HOME", "/h o")
            .output()
            .unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), "/tmp/a b'c//h o/;x");
        // An unset variable stops the shell with its name, never a wrong path.
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s' {}", t.shell_word()))
            .env_remove("HOME")
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(out.stdout.is_empty());
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert!(
            stderr.contains("HOME: is not set (a spec path uses it)"),
            "{stderr}"
        );
    }

    #[test]
    fn slurm_names_and_setup_lines() {
        assert!(check_slurm_name("gpu,gpu-a100", true).is_ok());
        assert!(check_slurm_name("gpu,gpu-a100", false).is_err());
        assert!(check_slurm_name("gpu,", true).is_err());
        assert!(check_slurm_name("gpu x", false).is_err());
        assert!(check_setup_line("module load cuda\t# ok").is_ok());
        assert!(check_setup_line("a\nb").is_err());
        assert!(check_setup_line("a\u{0}b").is_err());
        assert!(check_no_control("a\u{1b}[31m").is_err());
    }
}
