//! The node and `mig-minors` the tests of every part render.

use super::block::{GpuGres, GpuUsage, MigSlice, NodeGres};
use crate::gres::minors::MigMinors;

pub(super) fn minors() -> MigMinors {
    MigMinors::parse(
        "config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\ngpu0/gi2/access 21\n\
             gpu0/gi2/ci0/access 22\ngpu4/gi7/access 606\ngpu4/gi7/ci0/access 607\n",
        "mig-minors",
    )
    .unwrap()
}

pub(super) fn node() -> NodeGres {
    NodeGres {
        node: "gpu2".into(),
        gpus: vec![
            GpuGres {
                minor: 0,
                cores: None,
                usage: GpuUsage::Mig {
                    slices: vec![
                        MigSlice {
                            profile: "1g.5gb".into(),
                            gi_id: 2,
                            ci_id: 0,
                        },
                        MigSlice {
                            profile: "3g.20gb".into(),
                            gi_id: 1,
                            ci_id: 0,
                        },
                    ],
                },
            },
            GpuGres {
                minor: 4,
                cores: Some("40-47".into()),
                usage: GpuUsage::Mig {
                    slices: vec![MigSlice {
                        profile: "1g.5gb".into(),
                        gi_id: 7,
                        ci_id: 0,
                    }],
                },
            },
            GpuGres {
                minor: 2,
                cores: Some("8-15".into()),
                usage: GpuUsage::Whole {
                    gpu_type: "a100".into(),
                    shards: Some(8),
                },
            },
        ],
    }
}
