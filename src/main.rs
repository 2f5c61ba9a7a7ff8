fn main() {
    yolo_sched::cli::run_main()
}
