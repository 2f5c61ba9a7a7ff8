//! Which layout each GPU of a node gets: what one GPU should look like
//! (`GpuLayout`), selectors by index and model, and the most specific entry
//! that matches.

use std::fmt;

use anyhow::Result;
use serde::Serialize;

use super::counts::ProfileCounts;
use crate::error::invalid;

/// What one GPU should look like.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum GpuLayout {
    /// MIG mode off: the GPU is used whole.
    Disabled,
    /// MIG mode on with exactly these instances (empty = MIG on, no instances).
    Profiles(ProfileCounts),
    /// `all-1g`: as many of the smallest plain profile as fit (`1g.5gb` ×7 on an A100-40GB).
    AllSmallest,
    /// `balanced`: mig-parted's `all-balanced` (2×1g + 1×2g + 1×3g on a 7-slice GPU).
    Balanced,
    /// `auto`: chosen from the demand of pending and recent jobs.
    Auto,
}

impl fmt::Display for GpuLayout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuLayout::Disabled => f.write_str("disabled"),
            GpuLayout::Profiles(c) if c.is_empty() => f.write_str("enabled"),
            GpuLayout::Profiles(c) => c.fmt(f),
            GpuLayout::AllSmallest => f.write_str("all-1g"),
            GpuLayout::Balanced => f.write_str("balanced"),
            GpuLayout::Auto => f.write_str("auto"),
        }
    }
}

/// In JSON a GPU layout is its text form (`"3g.20gb,1g.5gb*2"`, `"disabled"`).
impl Serialize for GpuLayout {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

/// Which GPUs of a node a layout entry applies to. Empty = all GPUs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize)]
pub struct GpuSelector {
    /// NVML indices; `None` = any index.
    pub indices: Option<Vec<u32>>,
    /// Case-insensitive substring of the NVML device name (`A100-SXM4-40GB`, `H200`); `None` = any model.
    pub model: Option<String>,
}

impl GpuSelector {
    /// Every GPU.
    pub fn all() -> GpuSelector {
        GpuSelector::default()
    }

    /// True when this selector picks the GPU with `index` and NVML name `model`.
    pub fn matches(&self, index: u32, model: &str) -> bool {
        let index_ok = self.indices.as_ref().is_none_or(|ix| ix.contains(&index));
        let model_ok = self
            .model
            .as_ref()
            .is_none_or(|m| model.to_ascii_lowercase().contains(&m.to_ascii_lowercase()));
        index_ok && model_ok
    }

    /// More specific selectors win: index and model (3) > index (2) > model (1) > all (0).
    pub fn specificity(&self) -> u8 {
        2 * u8::from(self.indices.is_some()) + u8::from(self.model.is_some())
    }
}

impl fmt::Display for GpuSelector {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.indices, &self.model) {
            (None, None) => f.write_str("all GPUs"),
            (Some(ix), model) => {
                let list: Vec<String> = ix.iter().map(u32::to_string).collect();
                let noun = if ix.len() == 1 { "GPU" } else { "GPUs" };
                write!(f, "{noun} {}", list.join(","))?;
                if let Some(m) = model {
                    write!(f, " (model ~ {m:?})")?;
                }
                Ok(())
            }
            (None, Some(m)) => write!(f, "GPUs with model ~ {m:?}"),
        }
    }
}

/// One entry of a layout: a selector and what the selected GPUs become.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LayoutEntry {
    pub selector: GpuSelector,
    pub gpu: GpuLayout,
}

/// A whole-node layout.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Layout {
    /// The site-file name, the built-in word, or the canonical profile list.
    pub name: String,
    pub description: Option<String>,
    pub entries: Vec<LayoutEntry>,
}

impl Layout {
    /// A layout with one entry for every GPU.
    pub fn uniform(gpu: GpuLayout) -> Layout {
        Layout {
            name: gpu.to_string(),
            description: None,
            entries: vec![LayoutEntry {
                selector: GpuSelector::all(),
                gpu,
            }],
        }
    }

    /// What the GPU with `index` and NVML name `model` should become: the
    /// matching entry with the most specific selector. `Ok(None)` when no entry
    /// selects it (the GPU is left as it is); an error when two equally
    /// specific entries select it.
    pub fn for_gpu(&self, index: u32, model: &str) -> Result<Option<&GpuLayout>> {
        let matching: Vec<(usize, &LayoutEntry)> = self
            .entries
            .iter()
            .enumerate()
            .filter(|(_, e)| e.selector.matches(index, model))
            .collect();
        let Some(best) = matching.iter().map(|(_, e)| e.selector.specificity()).max() else {
            return Ok(None);
        };
        let top: Vec<&(usize, &LayoutEntry)> = matching
            .iter()
            .filter(|(_, e)| e.selector.specificity() == best)
            .collect();
        if let [first, second, ..] = top.as_slice() {
            return Err(invalid(format!(
                "layout `{}`: GPU {index} ({model}) is selected by entry {} ({}) and entry {} ({}) \
                 equally; give one of them a GPU index or a narrower model filter",
                self.name,
                first.0 + 1,
                first.1.selector,
                second.0 + 1,
                second.1.selector
            )));
        }
        Ok(Some(&top[0].1.gpu))
    }
}

impl fmt::Display for Layout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::exit_code_for;

    #[test]
    fn selectors_pick_the_most_specific_entry() {
        let layout = Layout {
            name: "mixed".into(),
            description: None,
            entries: vec![
                LayoutEntry {
                    selector: GpuSelector::all(),
                    gpu: GpuLayout::AllSmallest,
                },
                LayoutEntry {
                    selector: GpuSelector {
                        indices: None,
                        model: Some("h200".into()),
                    },
                    gpu: GpuLayout::Balanced,
                },
                LayoutEntry {
                    selector: GpuSelector {
                        indices: Some(vec![3]),
                        model: None,
                    },
                    gpu: GpuLayout::Disabled,
                },
            ],
        };
        let a100 = "NVIDIA A100-SXM4-40GB";
        let h200 = "NVIDIA H200 141GB HBM3e";
        assert_eq!(
            layout.for_gpu(0, a100).unwrap(),
            Some(&GpuLayout::AllSmallest)
        );
        assert_eq!(layout.for_gpu(1, h200).unwrap(), Some(&GpuLayout::Balanced));
        assert_eq!(layout.for_gpu(3, h200).unwrap(), Some(&GpuLayout::Disabled));
    }

    #[test]
    fn equally_specific_matches_are_an_error_and_unmatched_gpus_are_left_alone() {
        let entry = |model: &str| LayoutEntry {
            selector: GpuSelector {
                indices: None,
                model: Some(model.into()),
            },
            gpu: GpuLayout::Balanced,
        };
        let layout = Layout {
            name: "x".into(),
            description: None,
            entries: vec![entry("A100"), entry("40GB")],
        };
        let err = layout.for_gpu(0, "NVIDIA A100-SXM4-40GB").unwrap_err();
        assert_eq!(exit_code_for(&err), 2);
        assert!(err.to_string().contains("entry 1"), "{err}");
        assert_eq!(layout.for_gpu(0, "NVIDIA H200").unwrap(), None);
    }
}
