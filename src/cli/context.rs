//! What every subcommand is handed.

use anyhow::Result;

use super::global::GlobalArgs;
use crate::config::Site;
use crate::printer::Printer;
use crate::slurm::Slurm;

/// What every subcommand gets: resolved settings, the terminal and the Slurm runner.
pub struct Context {
    pub global: GlobalArgs,
    pub printer: Printer,
    pub slurm: Slurm,
    /// Read on first use (`site()`); `None` until then.
    pub(super) site: Option<Site>,
}

impl Context {
    /// The site file, read on first use so that `--help` and commands that do
    /// not need it work even when it is broken.
    pub fn site(&mut self) -> Result<&Site> {
        if self.site.is_none() {
            self.site = Some(Site::load(self.global.site.as_deref())?);
        }
        Ok(self.site.as_ref().expect("just loaded"))
    }

    pub fn color(&self) -> bool {
        self.printer.color()
    }
}
