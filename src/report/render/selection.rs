//! Which sections and tables `--section` keeps.

use crate::report::model::Section;

/// Every table name, with the section it belongs to. `--section` accepts
/// section names and these.
pub const TABLES: [(&str, Section); 11] = [
    ("inventory", Section::Inventory),
    ("inventory-totals", Section::Inventory),
    ("queue", Section::Queue),
    ("queue-types", Section::Queue),
    ("queue-reasons", Section::Queue),
    ("queue-never-runnable", Section::Queue),
    ("usage", Section::Usage),
    ("runs", Section::Runs),
    ("runs-failing-stages", Section::Runs),
    ("right-sizing", Section::RightSizing),
    ("advice", Section::Advice),
];

/// Which sections and tables to print.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selection {
    pub sections: Vec<Section>,
    /// Only these tables (CSV and table formats); `None`: all of the sections'.
    pub tables: Option<Vec<&'static str>>,
}

impl Selection {
    pub fn all() -> Self {
        Selection {
            sections: Section::ALL.to_vec(),
            tables: None,
        }
    }

    /// From `--section` values: section names or table names.
    pub fn parse(values: &[String]) -> Result<Self, String> {
        if values.is_empty() {
            return Ok(Self::all());
        }
        let mut sections = Vec::new();
        let mut tables = Vec::new();
        for raw in values.iter().flat_map(|v| v.split(',')) {
            let v = raw.trim().to_lowercase().replace('_', "-");
            if let Some(s) = Section::ALL.iter().find(|s| s.name() == v) {
                sections.push(*s);
                tables.extend(TABLES.iter().filter(|(_, ts)| ts == s).map(|(t, _)| *t));
            } else if let Some((t, s)) = TABLES.iter().find(|(t, _)| *t == v) {
                sections.push(*s);
                tables.push(*t);
            } else {
                let names: Vec<&str> = Section::ALL.iter().map(|s| s.name()).collect();
                let table_names: Vec<&str> = TABLES.iter().map(|(t, _)| *t).collect();
                return Err(format!(
                    "--section {raw:?} is not a section or table; sections: {}; tables: {}",
                    names.join(", "),
                    table_names.join(", ")
                ));
            }
        }
        sections.sort();
        sections.dedup();
        tables.sort_by_key(|t| TABLES.iter().position(|(name, _)| name == t));
        tables.dedup();
        Ok(Selection {
            sections,
            tables: Some(tables),
        })
    }

    pub fn has(&self, section: Section) -> bool {
        self.sections.contains(&section)
    }

    pub fn has_table(&self, table: &str) -> bool {
        match &self.tables {
            None => TABLES.iter().any(|(t, s)| *t == table && self.has(*s)),
            Some(tables) => tables.contains(&table),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selections() {
        let all = Selection::parse(&[]).unwrap();
        assert_eq!(all, Selection::all());
        assert!(all.has_table("queue-reasons"));
        let s = Selection::parse(&["queue-reasons".into(), "usage".into()]).unwrap();
        assert_eq!(s.sections, vec![Section::Queue, Section::Usage]);
        assert!(s.has_table("queue-reasons"));
        assert!(!s.has_table("queue"));
        assert!(s.has_table("usage"));
        let s = Selection::parse(&["inventory,right_sizing".into()]).unwrap();
        assert_eq!(s.sections, vec![Section::Inventory, Section::RightSizing]);
        assert!(s.has_table("inventory-totals"));
        let err = Selection::parse(&["queues".into()]).unwrap_err();
        assert!(
            err.contains("\"queues\"") && err.contains("queue-reasons"),
            "{err}"
        );
    }
}
