//! From argv to an exit status: parse, recover what an interrupted submission
//! left, run the subcommand, print the error.

use anyhow::Result;
use clap::Parser;

use super::{
    advise, agent, backup, checkpoint, compare, dataset, doctor, gc, generate, models, node_setup,
    report, runs, status, submit, tune, validate, watch, Cli, Command, Context,
};
use crate::error::{self, exit};
use crate::printer::Printer;
use crate::slurm::Slurm;

/// Run the parsed command; the returned number is the exit status.
pub fn execute(cli: Cli) -> Result<i32> {
    crate::slurm::runner::timeout_from_env().map_err(|e| {
        error::invalid(format!(
            "{e}; set it to the seconds a Slurm command may take, e.g. 30"
        ))
    })?;
    let mut ctx = Context {
        printer: Printer::new(cli.global.color),
        global: cli.global,
        slurm: Slurm::from_env(),
        site: None,
    };
    // What an interrupted submission left: undone before the commands that
    // change runs, pointed out by those that only look.
    match &cli.command {
        Command::Cancel(a) if !a.dry_run => gc::recover_before(&mut ctx, true),
        Command::Resume(a) if !a.dry_run => gc::recover_before(&mut ctx, true),
        Command::Status(_) | Command::Watch(_) | Command::List(_) => {
            gc::recover_before(&mut ctx, false)
        }
        _ => {}
    }
    match cli.command {
        Command::Gc(args) => gc::run(&mut ctx, &args),
        Command::Doctor(args) => doctor::run(&mut ctx, &args),
        Command::Generate(args) => generate::run(&args, <Cli as clap::CommandFactory>::command()),
        Command::Submit(args) => submit::run(&mut ctx, &args),
        Command::Validate(args) => validate::run(&mut ctx, &args),
        Command::Dataset(args) => dataset::run(&mut ctx, &args),
        Command::Checkpoint(args) => checkpoint::run(&ctx, &args),
        Command::Status(args) => status::run(&mut ctx, &args),
        Command::Watch(args) => watch::run(&mut ctx, &args),
        Command::List(args) => status::list(&mut ctx, &args),
        Command::Cancel(args) => runs::cancel(&mut ctx, &args),
        Command::Resume(args) => runs::resume_run(&mut ctx, &args),
        Command::Logs(args) => runs::logs(&mut ctx, &args),
        Command::Audit(args) => runs::audit_cmd(&mut ctx, &args),
        Command::NodeSetup(args) => node_setup::run(&mut ctx, &args),
        Command::Report(args) => report::run(&mut ctx, &args),
        Command::Compare(args) => compare::run(&mut ctx, &args),
        Command::Advise(args) => advise::run(&mut ctx, &args),
        Command::Agent(args) => agent::run(&mut ctx, &args),
        Command::Backup(args) => backup::run(&mut ctx, &args),
        Command::Models(args) => models::run(&mut ctx, &args),
        Command::Tune(args) => tune::run(&mut ctx, &args),
    }
}

/// The binary's entry point: parse, run, print the error, exit with its status.
pub fn run_main() {
    // clap's `help` subcommand takes no flags; `yolo-sched help --help` is a
    // reasonable thing to type, so it prints the top-level help.
    let argv: Vec<std::ffi::OsString> = std::env::args_os().collect();
    if argv.get(1).is_some_and(|a| a == "help")
        && argv[2..].iter().any(|a| a == "--help" || a == "-h")
    {
        use clap::CommandFactory;
        let _ = Cli::command().print_long_help();
        std::process::exit(exit::OK);
    }
    // An empty YOLO_SCHED_* variable means "not set" (`YOLO_SCHED_SITE=` in a
    // job script), not "the empty value", which clap would refuse as a
    // missing flag value. Still one thread here, so changing the environment
    // is sound.
    for (key, value) in std::env::vars_os() {
        if value.is_empty() && key.to_string_lossy().starts_with("YOLO_SCHED_") {
            std::env::remove_var(&key);
        }
    }
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() {
                exit::INVALID_INPUT
            } else {
                exit::OK
            };
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let printer = Printer::new(cli.global.color);
    let code = match execute(cli) {
        Ok(code) => code,
        Err(err) if error::is_broken_pipe(&err) => exit::OK,
        Err(err) => {
            printer.error(&err);
            error::exit_code_for(&err)
        }
    };
    std::process::exit(code);
}
