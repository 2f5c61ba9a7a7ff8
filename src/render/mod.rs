//! sbatch scripts from the templates in `templates/`.
//!
//! Templates are Jinja (minijinja) with two rules that make a generated script
//! safe whatever a spec contains:
//! - every `{{ value }}` is shell-quoted on output (a custom auto-escape), and a
//!   list renders as its quoted items joined by spaces; only values a template
//!   marks `|safe` are written as they are (the spec's `setup` lines, which are
//!   the user's own shell commands by design);
//! - an undefined variable is an error, not an empty string.
//!
//! The built-in templates are compiled in; a directory given by `--templates`
//! or `YOLO_SCHED_TEMPLATES` overrides them file by file (the site file has no
//! such setting). A directory that is missing, unreadable or overrides
//! nothing is refused, naming where it came from.
//!
//! `templates` holds the set (`Templates`, `BUILTIN`), `escape` the quoting
//! formatter, `scripts` the stage scripts of a plan.

mod escape;
pub mod scripts;
mod templates;

pub use templates::{
    read_overrides, Templates, BUILTIN, FROM_ENV as TEMPLATES_ENV, FROM_FLAG as TEMPLATES_FLAG,
};
