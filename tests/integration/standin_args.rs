//! The stand-in trainer accepts exactly the arguments the spec validator
//! knows as Ultralytics' (`src/spec/ultralytics.rs`), so a spec that
//! validates never fails in the stand-in for an unknown argument, and the
//! stand-in never accepts an argument real Ultralytics would refuse.

use std::collections::BTreeSet;

#[test]
fn the_stand_in_knows_the_same_arguments_as_the_validator() {
    let source =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/standin/yolo"))
            .unwrap();
    let start = source
        .find("TRAIN_ARGS = {")
        .expect("TRAIN_ARGS in the stand-in");
    let end = start + source[start..].find('}').unwrap();
    let standin: BTreeSet<String> = source[start..end]
        .split('"')
        .enumerate()
        .filter(|(i, _)| i % 2 == 1)
        .map(|(_, s)| s.to_string())
        .collect();
    let validator: BTreeSet<String> = yolo_sched::spec::ultralytics::YOLO_ARGS
        .iter()
        .map(|a| a.name.to_string())
        .collect();
    let only_standin: Vec<&String> = standin.difference(&validator).collect();
    let only_validator: Vec<&String> = validator.difference(&standin).collect();
    assert!(
        only_standin.is_empty() && only_validator.is_empty(),
        "stand-in only: {only_standin:?}\nvalidator only: {only_validator:?}"
    );
}
