//! The one catalog of the `squeue` fields yolo-sched asks for, the one
//! separator, the one builder of the `--Format=` argument and the one line
//! splitter every query reads its lines with. Pure.

/// The separator after every field of every query: the ASCII unit separator
/// 0x1F. No Slurm name, state, time, count or GRES string contains it.
pub const SEPARATOR: char = '\u{1f}';

/// A field `squeue --Format` prints for a job, by its `--Format` name
/// ([`Field::name`]). Fields are asked for by name, so a newer Slurm that
/// knows more fields prints the same columns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Field {
    /// The job's own id: a number, for an array task too.
    JobId,
    /// `123`, `15_3`, or `15_[0-9%2]` for the pending rest of an array.
    JobArrayId,
    /// The array's id (the job id for a plain job).
    ArrayJobId,
    /// The task id, the pending tasks' list (`2-5%2`), or `N/A`.
    ArrayTaskId,
    /// The long state name (`PENDING`, `RUNNING`, …).
    State,
    /// One partition, or a comma list when the job may run in several.
    Partition,
    UserName,
    /// `(null)` when the job has none.
    Account,
    /// The job's name: the user's words, printed as given.
    Name,
    /// The job's working directory (`--chdir`), printed as given.
    WorkDir,
    SubmitTime,
    /// Expected while pending or running, `N/A` when unknown.
    StartTime,
    /// Expected while running, `N/A` when unknown.
    EndTime,
    /// `M:SS`, `H:MM:SS` or `D-HH:MM:SS`.
    TimeUsed,
    /// A duration, or `UNLIMITED`.
    TimeLimit,
    /// A duration, or `UNLIMITED`.
    TimeLeft,
    /// A host list (`node[2-3]`), empty while pending.
    NodeList,
    NumNodes,
    /// 4294967294 (NO_VAL) when unset.
    NumTasks,
    /// `gres:gpu:1g.5gb:1` (22.05) or `gres/gpu:1g.5gb=1` (newer); `N/A`.
    TresPerNode,
    TresPerJob,
    TresPerTask,
    /// `cpu=1,mem=4G,node=1,gres/gpu:1g.5gb=1`.
    TresAlloc,
    /// The raw wait status of the job's script (exit code in the high byte).
    ExitCode,
    /// `afterok:7(unfulfilled)`, `(null)` when none.
    Dependency,
    /// Why a job waits: Slurm's reason, or its state description
    /// (`ReqNodeNotAvail, UnavailableNodes:node2`), text Slurm does not
    /// fully control.
    Reason,
    /// The job's comment: the user's text (yolo-sched's tag,
    /// `slurm::comment`), any bytes.
    Comment,
}

impl Field {
    /// The field's `--Format` name.
    pub const fn name(self) -> &'static str {
        match self {
            Field::JobId => "JobID",
            Field::JobArrayId => "JobArrayID",
            Field::ArrayJobId => "ArrayJobID",
            Field::ArrayTaskId => "ArrayTaskID",
            Field::State => "State",
            Field::Partition => "Partition",
            Field::UserName => "UserName",
            Field::Account => "Account",
            Field::Name => "Name",
            Field::WorkDir => "WorkDir",
            Field::SubmitTime => "SubmitTime",
            Field::StartTime => "StartTime",
            Field::EndTime => "EndTime",
            Field::TimeUsed => "TimeUsed",
            Field::TimeLimit => "TimeLimit",
            Field::TimeLeft => "TimeLeft",
            Field::NodeList => "NodeList",
            Field::NumNodes => "NumNodes",
            Field::NumTasks => "NumTasks",
            Field::TresPerNode => "tres-per-node",
            Field::TresPerJob => "tres-per-job",
            Field::TresPerTask => "tres-per-task",
            Field::TresAlloc => "tres-alloc",
            Field::ExitCode => "exit_code",
            Field::Dependency => "Dependency",
            Field::Reason => "Reason",
            Field::Comment => "Comment",
        }
    }

    /// Whether the field's text is free: written by a user or an admin, or
    /// taken from them, rather than one of Slurm's own words, numbers or
    /// names, so it may hold the separator. Such a field goes after every
    /// other field of a query ([`free_text_last`]), where a separator inside
    /// it cannot shift a column that is not free.
    pub const fn is_free(self) -> bool {
        matches!(self, Field::Reason | Field::Comment)
    }
}

/// Whether every free field of `fields` comes after every field that is not
/// ([`Field::is_free`]). Each query checks its list with it at compile time.
pub const fn free_text_last(fields: &[Field]) -> bool {
    let mut free_seen = false;
    let mut i = 0;
    while i < fields.len() {
        if fields[i].is_free() {
            free_seen = true;
        } else if free_seen {
            return false;
        }
        i += 1;
    }
    true
}

/// The `--Format=` argument of a query: every field with the separator as
/// its suffix and no width, so nothing is padded or cut.
pub fn format_arg(fields: &[Field]) -> String {
    let mut arg = String::from("--Format=");
    for (i, f) in fields.iter().enumerate() {
        if i > 0 {
            arg.push(',');
        }
        arg.push_str(f.name());
        arg.push(':');
        arg.push(SEPARATOR);
    }
    arg
}

/// Why a line could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub message: String,
}

impl std::fmt::Display for LineError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The columns of one line of a query that asked for `fields`
/// ([`format_arg`]), borrowed from the line, untrimmed, in the order of
/// `fields`. Each field ends with [`SEPARATOR`]; the last one's is dropped
/// (and a `\r` before the line's end). A free field's separators stay in
/// the last column: one free field last is read whole; of two free fields,
/// the last takes any separator the other held. A line with fewer columns,
/// or with more where the last field is not free, is an error that says so.
pub fn split<'a, const N: usize>(
    line: &'a str,
    fields: &[Field; N],
) -> Result<[&'a str; N], LineError> {
    let line = line.strip_suffix('\r').unwrap_or(line);
    let mut cols = line.splitn(N, SEPARATOR);
    let mut found = 0;
    let mut columns: [&str; N] = std::array::from_fn(|_| {
        let col = cols.next();
        found += usize::from(col.is_some());
        col.unwrap_or("")
    });
    if found < N {
        return Err(LineError {
            message: format!("expected {N} columns separated by 0x1F, found {found}"),
        });
    }
    if let Some(last) = columns.last_mut() {
        // The last column keeps its own trailing separator (splitn stops there).
        *last = last.strip_suffix(SEPARATOR).unwrap_or(last);
        let free = fields.last().is_some_and(|f| f.is_free());
        if !free && last.contains(SEPARATOR) {
            return Err(LineError {
                message: format!("expected {N} columns separated by 0x1F, found more"),
            });
        }
    }
    Ok(columns)
}

#[cfg(test)]
mod tests {
    use super::*;

    const TWO: [Field; 2] = [Field::State, Field::TimeLeft];
    const FREE: [Field; 3] = [Field::State, Field::Reason, Field::Comment];

    #[test]
    fn the_format_argument_names_each_field_with_the_separator_and_no_width() {
        assert_eq!(format_arg(&TWO), "--Format=State:\u{1f},TimeLeft:\u{1f}");
        assert_eq!(format_arg(&[]), "--Format=");
    }

    #[test]
    fn lines_split_into_their_columns() {
        assert_eq!(
            split("PENDING\u{1f}1:00\u{1f}", &TWO),
            Ok(["PENDING", "1:00"])
        );
        // Without the last separator, and with a carriage return.
        assert_eq!(split("PENDING\u{1f}1:00\r", &TWO), Ok(["PENDING", "1:00"]));
        assert_eq!(split("\u{1f}\u{1f}", &TWO), Ok(["", ""]));
    }

    #[test]
    fn short_and_foreign_lines_are_errors_that_say_so() {
        let err = split("JOBID PARTITION NAME", &TWO).unwrap_err();
        assert_eq!(
            err.to_string(),
            "expected 2 columns separated by 0x1F, found 1"
        );
        let err = split("PENDING|1:00|", &TWO).unwrap_err();
        assert!(err.message.contains("found 1"), "{err}");
        let err = split("PENDING\u{1f}1:00\u{1f}9\u{1f}", &TWO).unwrap_err();
        assert!(err.message.contains("found more"), "{err}");
    }

    #[test]
    fn the_last_free_field_keeps_every_separator_after_the_fixed_ones() {
        let cols = split("RUNNING\u{1f}None\u{1f}a\u{1f}b\u{1f}", &FREE).unwrap();
        assert_eq!(cols, ["RUNNING", "None", "a\u{1f}b"]);
    }

    #[test]
    fn free_fields_must_come_last() {
        assert!(free_text_last(&FREE));
        assert!(free_text_last(&TWO));
        assert!(!free_text_last(&[Field::Reason, Field::State]));
        assert!(!free_text_last(&[
            Field::Comment,
            Field::State,
            Field::Reason
        ]));
    }
}
