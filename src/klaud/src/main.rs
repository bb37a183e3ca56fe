//! The `klaud` command line. Everything lives in the library; this only maps
//! errors to exit codes.

fn main() -> std::process::ExitCode {
    klaud::cli::main()
}
