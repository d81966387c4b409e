//! udtrace: DTrace's pid and proc providers for Linux user space, driven by D scripts.

mod cli;
mod compile;
mod glob;
mod list;
mod pidprov;
mod preprocess;
mod probes;
mod selfctx;
mod session;

fn main() {
    let cli = cli::parse_or_exit();
    let status = session::run(cli);
    std::process::exit(status);
}
