//! `agentos-sidecar`: the command line. Parsing only; everything else lives in
//! the library.

fn main() {}
