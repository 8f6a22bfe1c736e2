//! A reference Actor Runtime Socket v1 server over a real SQLite file.
