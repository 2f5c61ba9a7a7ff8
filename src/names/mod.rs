//! Names and addresses that specs, runs, scripts and stores share, checked
//! strictly and pure, on a floor below `spec`: a registry model's name, tag,
//! note and reference (`model`: `registry:NAME[@N|@TAG]`, and what such a
//! reference resolved to at submission), and a checkpoint backup's
//! `s3://bucket/prefix` (`backup_url`).

pub mod backup_url;
pub mod model;
