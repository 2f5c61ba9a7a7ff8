//! `yolo-sched generate`: shell completions and the man page, from the clap definitions.

use std::io::Write;
use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::{Args, CommandFactory, Subcommand};
use clap_complete::Shell;

use super::Cli;

#[derive(Debug, Args)]
#[command(
    after_help = "Examples:\n  yolo-sched generate completions bash > /etc/bash_completion.d/yolo-sched\n  yolo-sched generate man --dir /usr/local/share/man/man1"
)]
pub struct GenerateArgs {
    #[command(subcommand)]
    pub what: What,
}

#[derive(Debug, Subcommand)]
pub enum What {
    /// Print a completion script for a shell.
    Completions {
        /// bash, zsh, fish, elvish or powershell.
        shell: Shell,
    },
    /// Write man pages (one per subcommand) into a directory, or print the main page.
    Man {
        /// Directory for yolo-sched.1 and yolo-sched-<subcommand>.1; stdout when absent.
        #[arg(long, value_name = "DIR")]
        dir: Option<PathBuf>,
    },
}

pub fn run(args: &GenerateArgs) -> Result<i32> {
    let mut cmd = Cli::command();
    match &args.what {
        What::Completions { shell } => {
            clap_complete::generate(*shell, &mut cmd, "yolo-sched", &mut std::io::stdout());
        }
        What::Man { dir: None } => {
            let mut out = std::io::stdout().lock();
            clap_mangen::Man::new(cmd).render(&mut out)?;
            out.flush()?;
        }
        What::Man { dir: Some(dir) } => {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
            clap_mangen::generate_to(cmd, dir)
                .with_context(|| format!("writing man pages to {}", dir.display()))?;
        }
    }
    Ok(0)
}
