//! Reading control rows back, through the schema crate's checked [`Row`]
//! (width and type of every value; `corrupt_row` otherwise).

pub(super) use agentos_schema::row::{corrupt, count, texts, Row};
