//! A scripted ACP agent for tests and for the embedded default `echo` agent.

fn main() {}
