//! The one integration test binary: every module drives the built
//! `yolo-sched` (and, for the live modules, the local Slurm cluster). One
//! binary links once; `common` holds the `Test` world (a scratch directory,
//! stand-in tools first on PATH, the clean environment, whole-output
//! snapshots), the one poll (`wait_for`, `wait_until`) and the cluster
//! turn-taking.
//!
//! Tests that need the local cluster are `#[ignore]`d with the reason, so a
//! plain `cargo test` shows them as ignored rather than passing them; the
//! README's test command runs them with `-- --include-ignored` (they fail
//! there when no cluster answers).

mod common;
mod fake_nvml;
mod s3;

mod accounting_live;
mod advise;
mod agent_fake;
mod agent_live;
mod agent_script;
mod backup_live;
mod backup_s3;
mod chromium;
mod cli_help;
mod cluster_conf;
mod cluster_live;
mod compare_live;
mod compare_recorded;
mod dataset_check;
mod echoes;
mod escalate_live;
mod faults_cluster_live;
mod faults_live;
mod first_run;
mod gres_slurmd;
mod hostile_inputs;
mod isolation_live;
mod isolation_none_live;
mod mig_plans_on_fake;
mod node_setup;
mod node_setup_slurm;
mod nvml_fake;
mod pool_live;
mod registry_gc;
mod registry_live;
mod registry_s3;
mod registry_trust;
mod render_hostile;
mod report_live;
mod report_recorded;
mod report_replay;
mod report_synthetic;
mod resources_live;
mod run_fixture;
mod runs_agree;
mod runs_agree_live;
mod runs_live;
mod slurm_env;
mod snapshots;
mod spec_corpus;
mod standin_args;
mod syslog_live;
mod tiers_live;
mod trainer_live;
mod tune_live;
mod tune_tell;
mod ultralytics_table;
