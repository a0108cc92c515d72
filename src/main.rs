//! The `palisade` binary: parse the command line, run, map the outcome to an exit code.

fn main() -> std::process::ExitCode {
    palisade::cli::main()
}
