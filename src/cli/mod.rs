pub fn run_main() {}
