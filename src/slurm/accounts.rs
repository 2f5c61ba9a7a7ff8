//! Who a user is to Slurm's accounting: the accounts they are a member of,
//! those they coordinate, and their administrative level. One `sacctmgr`
//! call; the parse is pure and tested on recorded output.
//!
//! The registry's read and remove rules (`registry::access`) are built on
//! this, as `list --account` and `cancel` are built on Slurm's own answers.

use std::collections::BTreeSet;

use anyhow::{bail, Result};

use super::runner::Slurm;

/// A user's `AdminLevel` (`sacctmgr modify user … set AdminLevel=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub enum AdminLevel {
    #[default]
    None,
    Operator,
    Administrator,
}

/// What accounting knows of one user.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Membership {
    /// Accounts the user has an association in.
    pub accounts: BTreeSet<String>,
    /// Accounts the user coordinates (sacctmgr lists the sub-accounts too).
    pub coordinates: BTreeSet<String>,
    pub default_account: Option<String>,
    pub admin: AdminLevel,
}

impl Membership {
    /// A member or coordinator of `account`.
    pub fn belongs_to(&self, account: &str) -> bool {
        self.accounts.contains(account) || self.coordinates.contains(account)
    }
}

/// The fields asked for, in the order `parse` reads them.
const FORMAT: &str = "format=User,DefaultAccount,AdminLevel,Account,Coordinators";

/// Parse `sacctmgr -nP show user U withassoc withcoord` with `FORMAT`: one
/// line per association of the user (the account column empty for a user
/// with none). No line at all: the user is unknown to accounting, which is
/// an empty membership, not an error.
pub fn parse(user: &str, out: &str) -> Result<Membership> {
    let mut m = Membership::default();
    for line in out.lines().filter(|l| !l.trim().is_empty()) {
        let f: Vec<&str> = line.split('|').collect();
        if f.len() < 5 {
            bail!("unexpected sacctmgr line {line:?}: expected User|DefaultAccount|AdminLevel|Account|Coordinators");
        }
        if f[0] != user {
            continue;
        }
        if !f[1].is_empty() {
            m.default_account = Some(f[1].to_string());
        }
        m.admin = match f[2] {
            "Administrator" => AdminLevel::Administrator,
            "Operator" => AdminLevel::Operator,
            _ => AdminLevel::None,
        };
        if !f[3].is_empty() {
            m.accounts.insert(f[3].to_string());
        }
        m.coordinates.extend(
            f[4].split(',')
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .map(str::to_string),
        );
    }
    Ok(m)
}

/// `user`'s membership, from slurmdbd. `Err` when accounting does not
/// answer (no slurmdbd, `AccountingStorageType` unset): then nobody's
/// accounts are known, and the caller says so.
pub fn membership(slurm: &Slurm, user: &str) -> Result<Membership> {
    let out = slurm.run_raw(
        "sacctmgr",
        &[
            "-n",
            "-P",
            "show",
            "user",
            user,
            "withassoc",
            "withcoord",
            FORMAT,
        ],
    )?;
    if !out.status.success() {
        let stderr = out.stderr_str();
        bail!(
            "sacctmgr could not answer ({}); Slurm accounting (slurmdbd) is needed to know a user's accounts",
            crate::text::shown(stderr.trim(), 200)
        );
    }
    parse(user, &out.stdout_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_coordinators_and_operators_are_read() {
        // Recorded on the local cluster (Slurm 22.05): alice coordinates vision and
        // its sub-account; dave has two associations; carol is an operator.
        let alice = parse(
            "ys-alice",
            "ys-alice|vision|None|vision|vision,vision-edge\n",
        )
        .unwrap();
        assert_eq!(alice.default_account.as_deref(), Some("vision"));
        assert!(alice.belongs_to("vision-edge") && alice.belongs_to("vision"));
        assert!(!alice.belongs_to("robots"));
        assert_eq!(alice.admin, AdminLevel::None);
        let dave = parse(
            "ys-dave",
            "ys-dave|robots|None|robots|\nys-dave|robots|None|vision-edge|\n",
        )
        .unwrap();
        assert_eq!(
            dave.accounts.iter().map(String::as_str).collect::<Vec<_>>(),
            ["robots", "vision-edge"]
        );
        assert!(dave.coordinates.is_empty() && !dave.belongs_to("vision"));
        let carol = parse("ys-carol", "ys-carol|robots|Operator|robots|\n").unwrap();
        assert_eq!(carol.admin, AdminLevel::Operator);
        assert!(AdminLevel::Administrator > AdminLevel::Operator);
    }

    #[test]
    fn an_unknown_user_has_no_accounts_and_other_lines_are_refused() {
        assert_eq!(parse("nobody", "").unwrap(), Membership::default());
        // Another user's lines (a prefix match in old sacctmgr) are not theirs.
        assert!(parse("bo", "bob|x|None|x|\n").unwrap().accounts.is_empty());
        assert!(parse("bob", "garbage\n").is_err());
    }
}
