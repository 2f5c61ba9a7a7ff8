//! Who may read a version and who may tag or remove it, from Slurm's
//! accounts (docs/registry.md, "Who reads what"). yolo-sched keeps no list of
//! its own: a version belongs to the Slurm account it was published under.
//!
//! - Read: the version is public, or the caller published it, is a member
//!   or coordinator of its account, is a Slurm operator or administrator, or
//!   is root.
//! - Manage (tag, remove): the caller published it, coordinates its account,
//!   is a Slurm operator or administrator, or is root.
//!
//! The rule is pure; the caller's membership is asked of `sacctmgr` once, and
//! only when a version's answer depends on it (a public version or one's own
//! never costs a call).

use std::cell::{OnceCell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;

use super::record::ModelRecord;
use crate::slurm::accounts::{AdminLevel, Membership};

/// What the caller wants to do with a version.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Right {
    Read,
    /// Tag or remove.
    Manage,
}

/// Whose private versions a caller reads, beside public versions and their
/// own: the read rule of `Caller::check` for no one record (`doctor` says it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reads {
    /// Every version: root, or a Slurm operator or administrator.
    Every,
    /// Those of the accounts they are a member or coordinator of (members'
    /// first); none: only public versions and their own.
    OfAccounts(Vec<String>),
}

/// Whether `m` is a Slurm operator or administrator: reads, tags and
/// removes every version, publishes under any account.
fn is_operator(m: &Membership) -> bool {
    m.admin >= AdminLevel::Operator
}

/// Another user's accounts (`Err`: accounting does not answer).
type OthersLookup = dyn Fn(&str) -> Result<Membership, String>;

/// The user asking, and their accounts (looked up at most once).
pub struct Caller {
    pub user: String,
    pub root: bool,
    lookup: Box<dyn Fn() -> Result<Membership, String>>,
    membership: OnceCell<Result<Membership, String>>,
    /// Another user's accounts (the writers of tag and removal records).
    others: Rc<OthersLookup>,
    /// Those other users, each looked up at most once.
    writers: RefCell<BTreeMap<String, Rc<Caller>>>,
}

impl std::fmt::Debug for Caller {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Caller")
            .field("user", &self.user)
            .field("root", &self.root)
            .field("membership", &self.membership.get())
            .finish()
    }
}

impl Caller {
    /// `user`, whose accounts `lookup` gives (`Err`: accounting does not answer).
    pub fn new(
        user: &str,
        root: bool,
        lookup: impl Fn() -> Result<Membership, String> + 'static,
    ) -> Caller {
        Caller {
            user: user.to_string(),
            root,
            lookup: Box::new(lookup),
            membership: OnceCell::new(),
            others: Rc::new(|_| Err("other users' accounts are not looked up here".into())),
            writers: RefCell::new(BTreeMap::new()),
        }
    }

    /// The caller, with `others` giving another user's accounts (asked at
    /// most once per user, and only when an answer depends on it).
    pub fn with_others(
        mut self,
        others: impl Fn(&str) -> Result<Membership, String> + 'static,
    ) -> Caller {
        self.others = Rc::new(others);
        self
    }

    /// The user running this process; accounts from `sacctmgr`.
    pub fn current() -> Caller {
        let user = crate::identity::current_user();
        let asked = user.clone();
        Caller::new(&user, nix::unistd::geteuid().is_root(), move || {
            crate::slurm::accounts::membership(&crate::slurm::Slurm::from_env(), &asked)
                .map_err(|e| format!("{e:#}"))
        })
        .with_others(|other| {
            crate::slurm::accounts::membership(&crate::slurm::Slurm::from_env(), other)
                .map_err(|e| format!("{e:#}"))
        })
    }

    /// Whether `writer` (the owner of a tag or removal record's file, or on
    /// S3 the user it names) may tag or remove `r`: the same rule as for
    /// the caller (`check` with `Right::Manage`), asked of `writer`'s
    /// accounts. Root and the publisher need no lookup; another user's
    /// accounts are looked up once. `Err` says why the record is not obeyed.
    pub fn may_manage_as(&self, writer: &str, r: &ModelRecord) -> Result<(), String> {
        if writer == "root" || writer == r.user {
            return Ok(());
        }
        let who = if writer == self.user && !self.root {
            return self.check(r, Right::Manage).map(|_| ());
        } else {
            let mut writers = self.writers.borrow_mut();
            writers
                .entry(writer.to_string())
                .or_insert_with(|| {
                    let others = self.others.clone();
                    let asked = writer.to_string();
                    Rc::new(Caller::new(writer, false, move || others(&asked)))
                })
                .clone()
        };
        who.check(r, Right::Manage).map(|_| ())
    }

    /// Whose private versions the caller reads, given their membership `m`
    /// (`Reads`).
    pub fn reads(&self, m: &Membership) -> Reads {
        if self.root || is_operator(m) {
            Reads::Every
        } else {
            Reads::OfAccounts(m.accounts.iter().chain(&m.coordinates).cloned().collect())
        }
    }

    /// The caller's membership, or why it is not known.
    pub fn membership(&self) -> &Result<Membership, String> {
        self.membership.get_or_init(|| (self.lookup)())
    }

    /// The account a version is published under when none is named: the
    /// caller's default account where accounting knows one.
    pub fn default_account(&self) -> Option<String> {
        self.membership()
            .as_ref()
            .ok()
            .and_then(|m| m.default_account.clone())
    }

    /// Whether the caller may publish under `account`: a member or coordinator
    /// of it, an operator, or root. Where accounting does not answer, Slurm
    /// knows no members and the account is taken as given.
    pub fn may_publish_under(&self, account: &str) -> Result<(), String> {
        if self.root {
            return Ok(());
        }
        match self.membership() {
            Err(_) => Ok(()),
            Ok(m) if m.belongs_to(account) || is_operator(m) => Ok(()),
            Ok(m) => Err(format!(
                "{} is not a member of the Slurm account `{}`{}",
                crate::text::echo(&self.user),
                crate::text::echo(account),
                if m.accounts.is_empty() {
                    " (accounting knows no account of theirs)".to_string()
                } else {
                    format!(
                        "; their accounts are {}",
                        crate::suggest::ticked_list(m.accounts.iter().map(String::as_str))
                    )
                }
            )),
        }
    }

    /// Why the caller may do `right` to `r`, or why not (a whole sentence).
    pub fn check(&self, r: &ModelRecord, right: Right) -> Result<&'static str, String> {
        if self.root {
            return Ok("root");
        }
        if right == Right::Read && r.public {
            return Ok("public");
        }
        if r.user == self.user {
            return Ok("yours");
        }
        let m = match self.membership() {
            Ok(m) => m,
            Err(why) => {
                return Err(format!(
                    "{} belongs to {} and is not public; your Slurm accounts are not known ({why}), so only public versions and your own are {}",
                    r.id(),
                    owner_words(r),
                    match right {
                        Right::Read => "readable",
                        Right::Manage => "yours to change",
                    }
                ))
            }
        };
        if is_operator(m) {
            return Ok("Slurm operator");
        }
        let account = r.account.as_deref();
        match right {
            Right::Read if account.is_some_and(|a| m.belongs_to(a)) => Ok("account member"),
            Right::Manage if account.is_some_and(|a| m.coordinates.contains(a)) => {
                Ok("account coordinator")
            }
            Right::Read => Err(format!(
                "{} belongs to {} and is not public: only the account's members and coordinators, Slurm operators and its publisher read it",
                r.id(),
                owner_words(r)
            )),
            Right::Manage => Err(format!(
                "{} was published by {}{}: only its publisher, a coordinator of its account, or a Slurm operator tags or removes it",
                r.id(),
                crate::text::echo(&r.user),
                account.map_or(String::new(), |a| format!(
                    " in account `{}`",
                    crate::text::echo(a)
                ))
            )),
        }
    }

    /// `check` as an error: invalid input (for this caller the version is
    /// as good as absent; nothing was changed), with the hint.
    pub fn require(&self, r: &ModelRecord, right: Right) -> anyhow::Result<&'static str> {
        self.check(r, right).map_err(|refusal| {
            crate::error::with_hint(crate::error::invalid(refusal), self.hint(r, right))
        })
    }

    /// What to do about a refusal of `r`.
    pub fn hint(&self, r: &ModelRecord, right: Right) -> String {
        match (right, r.account.as_deref()) {
            (Right::Read, Some(a)) => format!(
                "ask a member of `{a}` to publish it again with --public, or a coordinator of `{a}` to add you (`sacctmgr add user {} account={a}`)",
                self.user
            ),
            (Right::Read, None) => {
                format!("ask {} to publish it again with --public", r.user)
            }
            (Right::Manage, _) => format!(
                "ask {} or a coordinator of the account; `sacctmgr show user $USER withcoord` shows what you coordinate",
                r.user
            ),
        }
    }
}

fn owner_words(r: &ModelRecord) -> String {
    match &r.account {
        Some(a) => format!("the Slurm account `{}`", crate::text::echo(a)),
        None => format!(
            "{} (published under no account)",
            crate::text::echo(&r.user)
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::record::FileEntry;
    use std::cell::Cell;
    use std::rc::Rc;

    fn record(user: &str, account: Option<&str>, public: bool) -> ModelRecord {
        let who = crate::registry::Publisher {
            name: "pcb".into(),
            user: user.into(),
            account: account.map(str::to_string),
            public,
            note: None,
        };
        let mut r = who.draft(
            Default::default(),
            vec![FileEntry {
                role: "weights".into(),
                name: "best.pt".into(),
                sha256: "0".repeat(64),
                size: 1,
            }],
        );
        r.version = 2;
        r
    }

    fn member(accounts: &[&str], coordinates: &[&str], admin: AdminLevel) -> Membership {
        Membership {
            accounts: accounts.iter().map(|a| a.to_string()).collect(),
            coordinates: coordinates.iter().map(|a| a.to_string()).collect(),
            default_account: accounts.first().map(|a| a.to_string()),
            admin,
        }
    }

    fn caller(user: &str, m: Result<Membership, String>) -> (Caller, Rc<Cell<u32>>) {
        let calls = Rc::new(Cell::new(0));
        let c = calls.clone();
        (
            Caller::new(user, false, move || {
                c.set(c.get() + 1);
                m.clone()
            }),
            calls,
        )
    }

    #[test]
    fn readers_are_the_accounts_members_coordinators_operators_and_the_publisher() {
        let private = record("bob", Some("vision"), false);
        let (alice, _) = caller(
            "alice",
            Ok(member(&["vision"], &["vision"], AdminLevel::None)),
        );
        let (dave, _) = caller("dave", Ok(member(&["robots"], &[], AdminLevel::None)));
        let (carol, _) = caller("carol", Ok(member(&["robots"], &[], AdminLevel::Operator)));
        let (coord, _) = caller("erin", Ok(member(&[], &["vision"], AdminLevel::None)));
        let (bob, bob_calls) = caller("bob", Ok(member(&["vision"], &[], AdminLevel::None)));
        assert_eq!(alice.check(&private, Right::Read), Ok("account member"));
        assert_eq!(coord.check(&private, Right::Read), Ok("account member"));
        assert_eq!(carol.check(&private, Right::Read), Ok("Slurm operator"));
        assert_eq!(bob.check(&private, Right::Read), Ok("yours"));
        assert_eq!(
            bob_calls.get(),
            0,
            "one's own version costs no sacctmgr call"
        );
        let refused = dave.check(&private, Right::Read).unwrap_err();
        assert!(
            refused.contains("pcb@2") && refused.contains("`vision`"),
            "{refused}"
        );
        assert!(dave.hint(&private, Right::Read).contains("--public"));
        let public = record("bob", Some("vision"), true);
        let (dave2, calls) = caller("dave", Ok(member(&["robots"], &[], AdminLevel::None)));
        assert_eq!(dave2.check(&public, Right::Read), Ok("public"));
        assert_eq!(calls.get(), 0, "a public version costs no sacctmgr call");
    }

    #[test]
    fn tag_and_remove_are_for_the_publisher_the_coordinator_and_operators() {
        let r = record("bob", Some("vision"), true);
        let (alice, _) = caller(
            "alice",
            Ok(member(&["vision"], &["vision"], AdminLevel::None)),
        );
        let (amy, _) = caller("amy", Ok(member(&["vision"], &[], AdminLevel::None)));
        let (carol, _) = caller("carol", Ok(member(&[], &[], AdminLevel::Administrator)));
        let (bob, _) = caller("bob", Err("no slurmdbd".into()));
        assert_eq!(alice.check(&r, Right::Manage), Ok("account coordinator"));
        assert_eq!(carol.check(&r, Right::Manage), Ok("Slurm operator"));
        assert_eq!(bob.check(&r, Right::Manage), Ok("yours"));
        // A member reads a public version but does not move its tags.
        let refused = amy.check(&r, Right::Manage).unwrap_err();
        assert!(refused.contains("published by bob"), "{refused}");
        let root = Caller::new("root", true, || Err("never asked".into()));
        assert_eq!(root.check(&r, Right::Manage), Ok("root"));
    }

    #[test]
    fn without_accounting_only_public_versions_and_ones_own_are_readable() {
        let (dave, calls) = caller("dave", Err("sacctmgr: no slurmdbd".into()));
        let refused = dave
            .check(&record("bob", Some("vision"), false), Right::Read)
            .unwrap_err();
        assert!(
            refused.contains("not known (sacctmgr: no slurmdbd)"),
            "{refused}"
        );
        let _ = dave.check(&record("bob", None, false), Right::Read);
        assert_eq!(calls.get(), 1, "the accounts are asked for once");
        assert!(dave.may_publish_under("anything").is_ok());
        assert_eq!(dave.default_account(), None);
    }

    /// What `doctor` says a caller reads is the rule `check` applies.
    #[test]
    fn reads_says_whose_private_versions_check_lets_the_caller_read() {
        let private = |account: &str| record("bob", Some(account), false);
        let m = member(&["robots"], &["vision"], AdminLevel::None);
        let (dave, _) = caller("dave", Ok(m.clone()));
        assert_eq!(
            dave.reads(&m),
            Reads::OfAccounts(vec!["robots".into(), "vision".into()])
        );
        for a in ["robots", "vision"] {
            assert!(dave.check(&private(a), Right::Read).is_ok(), "{a}");
        }
        assert!(dave.check(&private("audio"), Right::Read).is_err());
        let none = member(&[], &[], AdminLevel::None);
        let (erin, _) = caller("erin", Ok(none.clone()));
        assert_eq!(erin.reads(&none), Reads::OfAccounts(vec![]));
        assert!(erin.check(&private("robots"), Right::Read).is_err());
        let op = member(&[], &[], AdminLevel::Operator);
        let (carol, _) = caller("carol", Ok(op.clone()));
        assert_eq!(carol.reads(&op), Reads::Every);
        assert!(carol.check(&private("audio"), Right::Read).is_ok());
        let root = Caller::new("root", true, || Err("never asked".into()));
        assert_eq!(root.reads(&none), Reads::Every);
    }

    #[test]
    fn publishing_under_an_account_needs_membership() {
        let (dave, _) = caller("dave", Ok(member(&["robots"], &[], AdminLevel::None)));
        assert!(dave.may_publish_under("robots").is_ok());
        let e = dave.may_publish_under("vision").unwrap_err();
        assert!(e.contains("their accounts are `robots`"), "{e}");
        assert_eq!(dave.default_account().as_deref(), Some("robots"));
        let (carol, _) = caller("carol", Ok(member(&[], &[], AdminLevel::Operator)));
        assert!(carol.may_publish_under("vision").is_ok());
    }
}
