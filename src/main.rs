// Temporary: compiled here so that their unit tests run until main.rs wires them in.
#[allow(dead_code)]
mod cli;
#[allow(dead_code)]
mod preprocess;

fn main() {}
