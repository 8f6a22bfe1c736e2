//! Test support: the same store tests run on both backends.
